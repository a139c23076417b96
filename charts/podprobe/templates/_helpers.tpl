{{/*
Names. With the release named podprobe (as hack/render-manifests.sh renders
deploy/base) every name is the one deploy/base has always used: DaemonSet and
ServiceAccount podprobe, podprobe-authority, ClusterRole
podprobe-metrics-reader, policy podprobe-status-writes.
*/}}
{{- define "podprobe.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "podprobe.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 53 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 53 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The gate-mode ServiceAccount; the admission policy lets it write only podprobe.io/ready. */}}
{{- define "podprobe.gateServiceAccount" -}}
{{- include "podprobe.fullname" . -}}
{{- end -}}

{{/* The authority-mode ServiceAccount; the admission policy lets it write readiness fields. */}}
{{- define "podprobe.authorityServiceAccount" -}}
{{- printf "%s-authority" (include "podprobe.fullname" .) -}}
{{- end -}}

{{- define "podprobe.serviceAccount" -}}
{{- if eq .Values.mode "authority" -}}
{{- include "podprobe.authorityServiceAccount" . -}}
{{- else -}}
{{- include "podprobe.gateServiceAccount" . -}}
{{- end -}}
{{- end -}}

{{- define "podprobe.statusReader" -}}
{{- printf "%s-status-reader" (include "podprobe.fullname" .) -}}
{{- end -}}

{{/* The Service in front of every podprobe's status API listener; the APIService names it. */}}
{{- define "podprobe.statusApiService" -}}
{{- printf "%s-status-api" (include "podprobe.fullname" .) -}}
{{- end -}}

{{/* The Secret with the status API's CA bundle, serving certificate and key. */}}
{{- define "podprobe.statusApiSecret" -}}
{{- printf "%s-status-api-tls" (include "podprobe.fullname" .) -}}
{{- end -}}

{{/* The name podprobes expect in each other's certificate (mutual TLS between nodes). */}}
{{- define "podprobe.statusApiPeerName" -}}
{{- printf "%s.%s.svc" (include "podprobe.statusApiService" .) .Release.Namespace -}}
{{- end -}}

{{- define "podprobe.metricsReader" -}}
{{- printf "%s-metrics-reader" (include "podprobe.fullname" .) -}}
{{- end -}}

{{- define "podprobe.metricsScraper" -}}
{{- printf "%s-metrics-scraper" (include "podprobe.fullname" .) -}}
{{- end -}}

{{/* The DaemonSet's selector: immutable once created. */}}
{{- define "podprobe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "podprobe.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "podprobe.labels" -}}
{{ include "podprobe.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* Fails the render on values that cannot work, saying which and why. */}}
{{- define "podprobe.validate" -}}
{{- if not (has .Values.mode (list "gate" "authority")) -}}
{{- fail (printf "mode must be gate or authority, not %q" .Values.mode) -}}
{{- end -}}
{{- if not (has .Values.metrics.auth (list "delegated" "none")) -}}
{{- fail (printf "metrics.auth must be delegated or none, not %q" .Values.metrics.auth) -}}
{{- end -}}
{{- $socket := include "podprobe.criSocket" . -}}
{{- if and .Values.statusApi.enabled (eq (int64 .Values.statusApi.port) (int64 .Values.listen.port)) -}}
{{- fail (printf "statusApi.port must differ from listen.port (both %d): the status API is a TLS listener of its own" (int64 .Values.listen.port)) -}}
{{- end -}}
{{- $keys := .Values.markers.allowedKeys -}}
{{- if $keys -}}
{{- $list := kindIs "slice" $keys -}}
{{- if $list -}}
{{- range $keys -}}
{{- if not (and (kindIs "string" .) .) -}}
{{- $list = false -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not $list -}}
{{- fail (printf "markers.allowedKeys must be a list of label or annotation keys (e.g. --set 'markers.allowedKeys={role}'), not %s" (toJson $keys)) -}}
{{- end -}}
{{- end -}}
{{- /*
Markers need the admission policy: RBAC's `patch pods` (rbac.yaml) is every
pod of every namespace, and only <release>-marker-writes
(admission-policy.yaml) narrows it to the listed keys of pods on podprobe's
own node. rbac.yaml grants it only with both, too.
*/ -}}
{{- if and $keys (not .Values.admissionPolicy.enabled) -}}
{{- fail (printf "markers.allowedKeys needs admissionPolicy.enabled: probe markers grant podprobe `patch` on pods, which RBAC cannot narrow, and only the admission policy %s-marker-writes limits it to the keys %s on pods of podprobe's own node; without the policy, one node's podprobe token could change any pod in any namespace (its image, labels, anything). Either set admissionPolicy.enabled=true (needs Kubernetes 1.30 or later), or remove markers.allowedKeys (no probe markers are written)" (include "podprobe.fullname" .) (join ", " $keys)) -}}
{{- end -}}
{{- end -}}

{{/* The CRI socket's path on the node, from cri.runtime (and cri.socketPath). */}}
{{- define "podprobe.criSocket" -}}
{{- $runtime := .Values.cri.runtime -}}
{{- if eq $runtime "containerd" -}}
/run/containerd/containerd.sock
{{- else if eq $runtime "crio" -}}
/var/run/crio/crio.sock
{{- else if eq $runtime "custom" -}}
{{- $path := .Values.cri.socketPath | default "" -}}
{{- if not (and (hasPrefix "/" $path) (ne (dir $path) "/")) -}}
{{- fail (printf "cri.runtime custom needs cri.socketPath: the socket's absolute path on the node, in a directory of its own (not %q)" $path) -}}
{{- end -}}
{{- clean $path -}}
{{- else -}}
{{- fail (printf "cri.runtime must be containerd, crio or custom, not %q" $runtime) -}}
{{- end -}}
{{- end -}}

{{- define "podprobe.image" -}}
{{- $image := .Values.image -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository (required "image.tag or image.digest is required" $image.tag | toString) -}}
{{- end -}}
{{- end -}}
