// Command kubelet-probes is the Go side of podprobe's probe-handler benchmark.
//
// It has two modes:
//
//	kubelet-probes serve
//	    starts the loopback servers both harnesses probe (an HTTP server
//	    answering 200, a TCP listener, a gRPC health server answering
//	    SERVING), prints their ports as one JSON line and runs until
//	    SIGTERM/SIGINT.
//	kubelet-probes load -kind http|tcp|grpc -n N -period P -duration D -port PORT
//	    runs N concurrent probers through the kubelet's own probe packages
//	    (k8s.io/kubernetes/pkg/probe/{http,tcp,grpc}), constructed and called
//	    the way pkg/kubelet/prober/prober.go does, and prints one JSON line.
//
// The Rust harness in ../probe-load runs the same workload through podprobe's
// handlers and prints the same JSON fields.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/kubernetes/pkg/probe"
	grpcprobe "k8s.io/kubernetes/pkg/probe/grpc"
	httpprobe "k8s.io/kubernetes/pkg/probe/http"
	tcpprobe "k8s.io/kubernetes/pkg/probe/tcp"
)

// kubernetesVersion is the k8s.io/kubernetes module version in go.mod; it
// labels the JSON output so a result cannot be mistaken for another release's.
const kubernetesVersion = "v1.35.8"

const loopback = "127.0.0.1"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kubelet-probes serve | load [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve()
	case "load":
		err = load(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q: expected serve or load", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubelet-probes:", err)
		os.Exit(1)
	}
}

// serve runs the three servers until SIGTERM or SIGINT.
func serve() error {
	httpLn, err := net.Listen("tcp", loopback+":0")
	if err != nil {
		return fmt.Errorf("http listener: %w", err)
	}
	tcpLn, err := net.Listen("tcp", loopback+":0")
	if err != nil {
		return fmt.Errorf("tcp listener: %w", err)
	}
	grpcLn, err := net.Listen("tcp", loopback+":0")
	if err != nil {
		return fmt.Errorf("grpc listener: %w", err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})
	go func() { _ = http.Serve(httpLn, mux) }()

	go acceptAndDrain(tcpLn)

	grpcServer := grpc.NewServer()
	healthServer := health.NewServer()
	healthServer.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(grpcServer, healthServer)
	go func() { _ = grpcServer.Serve(grpcLn) }()

	ports := map[string]int{
		"http": httpLn.Addr().(*net.TCPAddr).Port,
		"tcp":  tcpLn.Addr().(*net.TCPAddr).Port,
		"grpc": grpcLn.Addr().(*net.TCPAddr).Port,
	}
	if err := json.NewEncoder(os.Stdout).Encode(ports); err != nil {
		return err
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	grpcServer.Stop()
	return nil
}

// acceptAndDrain plays an application's TCP port: it keeps each connection
// open until the prober closes it, so the prober side closes first as it does
// against a real container.
func acceptAndDrain(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			_, _ = io.Copy(io.Discard, conn)
			_ = conn.Close()
		}()
	}
}

// loadConfig is one run of the workload.
type loadConfig struct {
	kind     string
	n        int
	period   time.Duration
	duration time.Duration
	timeout  time.Duration
	port     int
}

// runFunc is one probe through a kubelet handler.
type runFunc func() (probe.Result, string, error)

// report is the JSON line printed per run; ../probe-load prints the same fields.
type report struct {
	Impl         string  `json:"impl"`
	Kind         string  `json:"kind"`
	N            int     `json:"n"`
	PeriodMs     int64   `json:"period_ms"`
	DurationS    float64 `json:"duration_s"`
	Probes       int     `json:"probes"`
	Failures     int     `json:"failures"`
	FirstFailure string  `json:"first_failure,omitempty"`
	ProbesPerSec float64 `json:"probes_per_sec"`
	CPUUserS     float64 `json:"cpu_user_s"`
	CPUSysS      float64 `json:"cpu_sys_s"`
	CPUSPer1k    float64 `json:"cpu_s_per_1k"`
	MaxRSSKiB    int64   `json:"max_rss_kib"`
	P50Us        int64   `json:"p50_us"`
	P99Us        int64   `json:"p99_us"`
}

func load(args []string) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	cfg := loadConfig{}
	fs.StringVar(&cfg.kind, "kind", "http", "handler: http, tcp or grpc")
	fs.IntVar(&cfg.n, "n", 100, "concurrent probers")
	fs.DurationVar(&cfg.period, "period", 100*time.Millisecond, "probe period of each prober")
	fs.DurationVar(&cfg.duration, "duration", 20*time.Second, "length of the run")
	fs.DurationVar(&cfg.timeout, "timeout", time.Second, "probe timeout (timeoutSeconds)")
	fs.IntVar(&cfg.port, "port", 0, "port of the server for this kind on 127.0.0.1")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.port <= 0 || cfg.n <= 0 || cfg.period <= 0 || cfg.duration <= 0 {
		return fmt.Errorf("-port, -n, -period and -duration must be positive")
	}
	run, err := newRun(cfg)
	if err != nil {
		return err
	}

	before, err := rusage()
	if err != nil {
		return err
	}
	start := time.Now()
	samples := runProbers(cfg, start, run)
	elapsed := time.Since(start)
	after, err := rusage()
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(summarize(cfg, samples, elapsed, before, after))
}

// newRun builds the probers once, as the kubelet's prober does in newProber,
// and returns a function doing what prober.runProbe does for one run.
func newRun(cfg loadConfig) (runFunc, error) {
	switch cfg.kind {
	case "http":
		prober := httpprobe.New(false)
		action := &v1.HTTPGetAction{
			Path:   "/healthz",
			Port:   intstr.FromInt32(int32(cfg.port)),
			Scheme: v1.URISchemeHTTP,
		}
		container := &v1.Container{Name: "app"}
		return func() (probe.Result, string, error) {
			req, err := httpprobe.NewRequestForHTTPGetAction(action, container, loopback, "probe")
			if err != nil {
				return probe.Unknown, "", err
			}
			return prober.Probe(req, cfg.timeout)
		}, nil
	case "tcp":
		prober := tcpprobe.New()
		return func() (probe.Result, string, error) {
			return prober.Probe(loopback, cfg.port, cfg.timeout)
		}, nil
	case "grpc":
		prober := grpcprobe.New()
		return func() (probe.Result, string, error) {
			return prober.Probe(loopback, "", cfg.port, cfg.timeout)
		}, nil
	default:
		return nil, fmt.Errorf("unknown -kind %q: expected http, tcp or grpc", cfg.kind)
	}
}

// sample is what one prober saw.
type sample struct {
	latenciesUs  []int64
	failures     int
	firstFailure string
}

// runProbers starts cfg.n probers, each first waiting a random part of one
// period (as a kubelet worker does) and then probing on a fixed schedule until
// the run ends. A probe that overruns its tick skips the missed ticks.
func runProbers(cfg loadConfig, start time.Time, run runFunc) []sample {
	end := start.Add(cfg.duration)
	samples := make([]sample, cfg.n)
	perProber := int(cfg.duration/cfg.period) + 1
	var wg sync.WaitGroup
	for i := range samples {
		wg.Add(1)
		go func(s *sample) {
			defer wg.Done()
			s.latenciesUs = make([]int64, 0, perProber)
			next := start.Add(time.Duration(rand.Int64N(int64(cfg.period))))
			for next.Before(end) {
				time.Sleep(time.Until(next))
				t0 := time.Now()
				result, output, err := run()
				t1 := time.Now()
				s.latenciesUs = append(s.latenciesUs, t1.Sub(t0).Microseconds())
				if err != nil || result != probe.Success {
					s.failures++
					if s.firstFailure == "" {
						s.firstFailure = fmt.Sprintf("%s: %s %v", result, output, err)
					}
				}
				next = next.Add(cfg.period)
				for !next.After(t1) {
					next = next.Add(cfg.period)
				}
			}
		}(&samples[i])
	}
	wg.Wait()
	return samples
}

func summarize(cfg loadConfig, samples []sample, elapsed time.Duration, before, after syscall.Rusage) report {
	var all []int64
	r := report{
		Impl:      "go-kubelet-" + kubernetesVersion,
		Kind:      cfg.kind,
		N:         cfg.n,
		PeriodMs:  cfg.period.Milliseconds(),
		DurationS: elapsed.Seconds(),
	}
	for _, s := range samples {
		all = append(all, s.latenciesUs...)
		r.Failures += s.failures
		if r.FirstFailure == "" {
			r.FirstFailure = s.firstFailure
		}
	}
	slices.Sort(all)
	r.Probes = len(all)
	r.ProbesPerSec = float64(r.Probes) / elapsed.Seconds()
	r.CPUUserS = timevalSeconds(after.Utime) - timevalSeconds(before.Utime)
	r.CPUSysS = timevalSeconds(after.Stime) - timevalSeconds(before.Stime)
	if r.Probes > 0 {
		r.CPUSPer1k = (r.CPUUserS + r.CPUSysS) / float64(r.Probes) * 1000
	}
	r.MaxRSSKiB = after.Maxrss // KiB on Linux
	r.P50Us = percentile(all, 50)
	r.P99Us = percentile(all, 99)
	return r
}

// percentile is the nearest-rank percentile of sorted values (0 when empty).
func percentile(sorted []int64, p int) int64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100
	return sorted[max(rank, 1)-1]
}

func rusage() (syscall.Rusage, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return ru, fmt.Errorf("getrusage: %w", err)
	}
	return ru, nil
}

func timevalSeconds(tv syscall.Timeval) float64 {
	return float64(tv.Sec) + float64(tv.Usec)/1e6
}
