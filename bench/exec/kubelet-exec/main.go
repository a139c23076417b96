// kubelet-exec drives the kubelet's own CRI client (k8s.io/cri-client, as
// the kubelet sets it up: NewRemoteRuntimeService with the runtime request
// timeout, 2 min, and a no-op tracer provider) the way the kubelet's exec
// prober does: one ExecSync per probe, timeout = the probe's timeoutSeconds
// (1 s), each container probed once per period, spread evenly over the
// period. Prints one JSON line: calls, errors, exit codes, latency p50/p99.
// Part of bench/exec (issue #27, item 4). A measurement, not a test.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	remote "k8s.io/cri-client/pkg"
	utilexec "k8s.io/utils/exec"
)

func main() {
	endpoint := flag.String("endpoint", "unix:///tmp/podprobe-cri/containerd.sock", "CRI endpoint")
	ids := flag.String("ids", "", "comma-separated container IDs (or @file, one per line)")
	period := flag.Duration("period", time.Second, "probe period per container")
	duration := flag.Duration("duration", 60*time.Second, "how long to probe")
	timeout := flag.Duration("timeout", time.Second, "probe timeoutSeconds, as the ExecSync timeout")
	cmd := flag.String("cmd", "test -f /www/exec-ok", "probe command, split on spaces")
	flag.Parse()

	list := *ids
	if strings.HasPrefix(list, "@") {
		b, err := os.ReadFile(list[1:])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		list = strings.Join(strings.Fields(string(b)), ",")
	}
	var containers []string
	for _, id := range strings.Split(list, ",") {
		if id = strings.TrimSpace(id); id != "" {
			containers = append(containers, id)
		}
	}
	if len(containers) == 0 {
		fmt.Fprintln(os.Stderr, "no container IDs (--ids)")
		os.Exit(2)
	}
	command := strings.Fields(*cmd)

	// As the kubelet: --runtime-request-timeout (2m) and its tracer provider
	// (a no-op one when tracing is not configured).
	rs, err := remote.NewRemoteRuntimeService(*endpoint, 2*time.Minute, noop.NewTracerProvider(), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "connect:", err)
		os.Exit(1)
	}

	var mu sync.Mutex
	var lat []float64
	calls, errs, exitNonZero := 0, 0, 0
	var firstErrs []string
	start := time.Now().Add(100 * time.Millisecond)
	end := start.Add(*duration)
	var wg sync.WaitGroup
	for i, id := range containers {
		wg.Add(1)
		go func(i int, id string) {
			defer wg.Done()
			next := start.Add(time.Duration(int64(*period) * int64(i) / int64(len(containers))))
			for next.Before(end) {
				time.Sleep(time.Until(next))
				next = next.Add(*period)
				t := time.Now()
				// The prober's execInContainer: runner.RunInContainer ->
				// runtimeService.ExecSync(ctx, id, cmd, timeout).
				_, _, err := rs.ExecSync(context.Background(), id, command, *timeout)
				us := float64(time.Since(t).Microseconds())
				mu.Lock()
				calls++
				lat = append(lat, us)
				if err != nil {
					if _, ok := err.(utilexec.CodeExitError); ok {
						exitNonZero++
					} else {
						errs++
						if len(firstErrs) < 5 {
							firstErrs = append(firstErrs, err.Error())
						}
					}
				}
				mu.Unlock()
				// Missed periods are skipped, as the prober's ticker does.
				for next.Before(time.Now()) {
					next = next.Add(*period)
				}
			}
		}(i, id)
	}
	wg.Wait()
	sort.Float64s(lat)
	rank := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		i := int(p/100*float64(len(lat)) + 0.999999)
		if i < 1 {
			i = 1
		}
		if i > len(lat) {
			i = len(lat)
		}
		return lat[i-1]
	}
	out, _ := json.Marshal(map[string]any{
		"side": "kubelet", "containers": len(containers), "period_ms": period.Milliseconds(),
		"duration_s": duration.Seconds(), "cmd": command, "timeout_s": timeout.Seconds(),
		"calls": calls, "errors": errs, "exit_nonzero": exitNonZero,
		"latency": map[string]float64{"p50_us": rank(50), "p99_us": rank(99)},
		"errors_first": firstErrs,
	})
	fmt.Println(string(out))
}
