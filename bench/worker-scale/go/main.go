// Command worker-scale-go is the Go anchor of podprobe's prober-core scale
// check (../run.sh): N goroutines, each shaped like the kubelet's probe
// worker loop (pkg/kubelet/prober/worker.go: start jitter, a time.Ticker,
// a select over stop, manual trigger and tick) with an instant "probe" that
// records when it ran. It measures what the Rust `substrate` mode measures,
// with the same schedule analysis, and prints one JSON line.
//
// It compares scheduling substrates (goroutine + Ticker against tokio task +
// Interval), not probers: there is no pod, status lookup or results cache.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

type worker struct {
	stopCh          chan struct{}
	manualTriggerCh chan struct{}
	times           []uint32 // microseconds since origin, preallocated
}

func main() {
	n := flag.Int("n", 10000, "workers")
	period := flag.Duration("period", 10*time.Second, "probe period")
	duration := flag.Duration("duration", 30*time.Second, "run length, a multiple of the period")
	flag.Parse()
	if *duration%*period != 0 || *duration <= *period {
		fmt.Fprintln(os.Stderr, "worker-scale-go: -duration must be a multiple of -period, above it")
		os.Exit(2)
	}
	capacity := int(*duration / *period) + 3
	workers := make([]*worker, *n)
	for i := range workers {
		times := make([]uint32, capacity)
		for j := range times {
			times[j] = ^uint32(0) // touch the memory, as the Rust side does
		}
		workers[i] = &worker{times: times[:0]}
	}
	goroutinesBase := runtime.NumGoroutine()
	base := readMemory()
	cpu0 := cpuSeconds()
	origin := time.Now()
	var wg sync.WaitGroup
	for _, w := range workers {
		w.stopCh = make(chan struct{}, 1)
		w.manualTriggerCh = make(chan struct{}, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(origin, *period)
		}()
	}
	add := time.Since(origin)
	afterAdd := readMemory()
	goroutinesAfterAdd := runtime.NumGoroutine()
	time.Sleep(time.Until(origin.Add(*period + time.Second)))
	firstPeriod := readMemory()
	time.Sleep(time.Until(origin.Add(*duration)))
	endUs := uint64(time.Since(origin).Microseconds())
	cpu1 := cpuSeconds()
	end := readMemory()
	stopStart := time.Now()
	for _, w := range workers {
		select {
		case w.stopCh <- struct{}{}:
		default:
		}
	}
	wg.Wait()
	stop := time.Since(stopStart)

	series := make([][]uint64, len(workers))
	for i, w := range workers {
		for _, t := range w.times {
			if uint64(t) < endUs {
				series[i] = append(series[i], uint64(t))
			}
		}
	}
	wallS := float64(endUs) / 1e6
	cpuS := cpu1[0] - cpu0[0] + cpu1[1] - cpu0[1]
	line := map[string]any{
		"mode":                    "real",
		"impl":                    "go-goroutines",
		"go":                      runtime.Version(),
		"gomaxprocs":              runtime.GOMAXPROCS(0),
		"workers":                 *n,
		"period_s":                period.Seconds(),
		"duration_s":              wallS,
		"add_ms":                  float64(add.Microseconds()) / 1e3,
		"stop_ms":                 float64(stop.Microseconds()) / 1e3,
		"cpu_user_s":              cpu1[0] - cpu0[0],
		"cpu_sys_s":               cpu1[1] - cpu0[1],
		"cpu_cores":               cpuS / wallS,
		"tasks_base":              goroutinesBase,
		"tasks_after_add":         goroutinesAfterAdd,
		"memory_base":             base,
		"memory_after_add":        afterAdd,
		"memory_first_period":     firstPeriod,
		"memory_end":              end,
		"per_worker_first_period": perWorker(base, firstPeriod, *n),
		"per_worker_end":          perWorker(base, end, *n),
	}
	for k, v := range schedule(series, uint64(period.Microseconds()), endUs) {
		line[k] = v
	}
	probes, _ := line["probes"].(uint64)
	line["cpu_us_per_probe"] = cpuS * 1e6 / float64(max(probes, 1))
	out, err := json.Marshal(line)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker-scale-go:", err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}

// run is the kubelet worker loop with nothing in it but the record.
func (w *worker) run(origin time.Time, period time.Duration) {
	time.Sleep(time.Duration(rand.Float64() * float64(period)))
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	for {
		if len(w.times) < cap(w.times) {
			w.times = append(w.times, uint32(time.Since(origin).Microseconds()))
		}
		select {
		case <-w.stopCh:
			return
		case <-ticker.C:
		case <-w.manualTriggerCh:
			ticker.Reset(period)
		}
	}
}

type memory struct {
	RSSKiB uint64 `json:"rss_kib"`
	// HeapBytes is live heap plus goroutine stacks, read after a GC.
	HeapBytes uint64 `json:"heap_bytes"`
}

func readMemory() memory {
	var m memory
	if f, err := os.Open("/proc/self/status"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			if rest, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
				m.RSSKiB, _ = strconv.ParseUint(strings.Fields(rest)[0], 10, 64)
			}
		}
		f.Close()
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.HeapBytes = ms.HeapAlloc + ms.StackInuse
	return m
}

func perWorker(before, after memory, n int) map[string]float64 {
	return map[string]float64{
		"rss_bytes":  (float64(after.RSSKiB) - float64(before.RSSKiB)) * 1024 / float64(n),
		"heap_bytes": (float64(after.HeapBytes) - float64(before.HeapBytes)) / float64(n),
	}
}

func cpuSeconds() [2]float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	sec := func(tv syscall.Timeval) float64 { return float64(tv.Sec) + float64(tv.Usec)/1e6 }
	return [2]float64{sec(ru.Utime), sec(ru.Stime)}
}

// schedule is the Rust harness's `schedule`, line for line: each worker's
// grid anchor is the earliest of its first probe and every later probe moved
// back by its nearest whole number of periods; a later probe is due at the
// first grid point after the previous probe; the rate comes from
// [period/2, period/2 + m*period).
func schedule(series [][]uint64, periodUs, endUs uint64) map[string]any {
	var lateness []int64
	windowPeriods := max((endUs-min(periodUs, endUs))/periodUs, 1)
	winStart, winEnd := periodUs/2, periodUs/2+periodUs*windowPeriods
	var inWindow, offSchedule, withoutProbe, probes uint64
	for _, times := range series {
		if len(times) == 0 {
			withoutProbe++
			continue
		}
		first := times[0]
		anchor := first
		for _, t := range times {
			periods := (t - first + periodUs/2) / periodUs
			anchor = min(anchor, t-periods*periodUs)
		}
		probes += uint64(len(times))
		previous := anchor
		for _, t := range times[1:] {
			due := anchor + ((previous-anchor)/periodUs+1)*periodUs
			lateness = append(lateness, int64(t)-int64(due))
			previous = t
		}
		var count uint64
		for _, t := range times {
			if t >= winStart && t < winEnd {
				count++
			}
		}
		inWindow += count
		if count != windowPeriods {
			offSchedule++
		}
	}
	slices.Sort(lateness)
	windowS := float64(winEnd-winStart) / 1e6
	over := func(ms int64) (c int) {
		for _, l := range lateness {
			if l > ms*1000 {
				c++
			}
		}
		return c
	}
	early := 0
	for _, l := range lateness {
		if l < 0 {
			early++
		}
	}
	var maxLate int64
	if len(lateness) > 0 {
		maxLate = lateness[len(lateness)-1]
	}
	return map[string]any{
		"probes":                probes,
		"window_s":              windowS,
		"probes_in_window":      inWindow,
		"expected_in_window":    windowPeriods * uint64(len(series)),
		"probes_per_s":          float64(inWindow) / windowS,
		"expected_per_s":        float64(len(series)) * 1e6 / float64(periodUs),
		"workers_off_schedule":  offSchedule,
		"workers_without_probe": withoutProbe,
		"lateness_samples":      len(lateness),
		"lateness_p50_us":       percentile(lateness, 500),
		"lateness_p99_us":       percentile(lateness, 990),
		"lateness_p999_us":      percentile(lateness, 999),
		"lateness_max_us":       maxLate,
		"early":                 early,
		"late_over_1ms":         over(1),
		"late_over_10ms":        over(10),
		"late_over_100ms":       over(100),
	}
}

// percentile is the nearest-rank percentile (per mille) of sorted values.
func percentile(sorted []int64, perMille int) int64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := max((perMille*len(sorted)+999)/1000, 1)
	return sorted[rank-1]
}
