module podprobe.bench/kubelet-probes

go 1.26

require (
	google.golang.org/grpc v1.72.2
	k8s.io/api v0.35.8
	k8s.io/apimachinery v0.35.8
	k8s.io/kubernetes v1.35.8
)

require (
	github.com/fxamacker/cbor/v2 v2.9.0 // indirect
	github.com/go-logr/logr v1.4.3 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/kr/text v0.2.0 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.3-0.20250322232337-35a7c28c31ee // indirect
	github.com/x448/float16 v0.8.4 // indirect
	go.yaml.in/yaml/v2 v2.4.3 // indirect
	golang.org/x/net v0.56.0 // indirect
	golang.org/x/sys v0.46.0 // indirect
	golang.org/x/text v0.39.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20250528174236-200df99c418a // indirect
	google.golang.org/protobuf v1.36.12-0.20260120151049-f2248ac996af // indirect
	gopkg.in/inf.v0 v0.9.1 // indirect
	k8s.io/component-base v0.0.0 // indirect
	k8s.io/klog/v2 v2.130.1 // indirect
	k8s.io/kube-openapi v0.0.0-20250910181357-589584f1c912 // indirect
	k8s.io/utils v0.0.0-20251002143259-bc988d571ff4 // indirect
	sigs.k8s.io/json v0.0.0-20250730193827-2d320260d730 // indirect
	sigs.k8s.io/randfill v1.0.0 // indirect
	sigs.k8s.io/structured-merge-diff/v6 v6.3.0 // indirect
)

// k8s.io/kubernetes requires its staging modules at v0.0.0 and points them at
// ./staging with replace lines of its own, which do not apply to a module
// that depends on it; pin each to the release matching v1.35.8.
replace (
	k8s.io/api => k8s.io/api v0.35.8
	k8s.io/apiextensions-apiserver => k8s.io/apiextensions-apiserver v0.35.8
	k8s.io/apimachinery => k8s.io/apimachinery v0.35.8
	k8s.io/apiserver => k8s.io/apiserver v0.35.8
	k8s.io/cli-runtime => k8s.io/cli-runtime v0.35.8
	k8s.io/client-go => k8s.io/client-go v0.35.8
	k8s.io/cloud-provider => k8s.io/cloud-provider v0.35.8
	k8s.io/cluster-bootstrap => k8s.io/cluster-bootstrap v0.35.8
	k8s.io/code-generator => k8s.io/code-generator v0.35.8
	k8s.io/component-base => k8s.io/component-base v0.35.8
	k8s.io/component-helpers => k8s.io/component-helpers v0.35.8
	k8s.io/controller-manager => k8s.io/controller-manager v0.35.8
	k8s.io/cri-api => k8s.io/cri-api v0.35.8
	k8s.io/cri-client => k8s.io/cri-client v0.35.8
	k8s.io/csi-translation-lib => k8s.io/csi-translation-lib v0.35.8
	k8s.io/dynamic-resource-allocation => k8s.io/dynamic-resource-allocation v0.35.8
	k8s.io/endpointslice => k8s.io/endpointslice v0.35.8
	k8s.io/externaljwt => k8s.io/externaljwt v0.35.8
	k8s.io/kms => k8s.io/kms v0.35.8
	k8s.io/kube-aggregator => k8s.io/kube-aggregator v0.35.8
	k8s.io/kube-controller-manager => k8s.io/kube-controller-manager v0.35.8
	k8s.io/kube-proxy => k8s.io/kube-proxy v0.35.8
	k8s.io/kube-scheduler => k8s.io/kube-scheduler v0.35.8
	k8s.io/kubectl => k8s.io/kubectl v0.35.8
	k8s.io/kubelet => k8s.io/kubelet v0.35.8
	k8s.io/metrics => k8s.io/metrics v0.35.8
	k8s.io/mount-utils => k8s.io/mount-utils v0.35.8
	k8s.io/pod-security-admission => k8s.io/pod-security-admission v0.35.8
	k8s.io/sample-apiserver => k8s.io/sample-apiserver v0.35.8
	k8s.io/sample-cli-plugin => k8s.io/sample-cli-plugin v0.35.8
	k8s.io/sample-controller => k8s.io/sample-controller v0.35.8
)
