#!/usr/bin/env python3
"""Churn soak (#27 item 2): does podprobe's memory level off?

    soak.py run --binary PATH [knobs]
        runs `podprobe run --mode gate` as a host process (optionally under
        heaptrack) against the local cluster for DURATION_S, re-creating
        PODS pods every CYCLE_S (a third of them failing their readiness
        probe, so Events flow; every one with a marker; a third with its
        liveness probe paused for half the cycle), editing the annotation of
        a third of them halfway through each cycle, and restarting podprobe
        halfway through the soak (with --single-life: never, #39). Samples
        podprobe's RSS every SAMPLE_S into rss.csv, writes rss.svg, and
        prints one JSON line.
    soak.py plot OUT [--duration-s S]
        (re)draws OUT/rss.svg from OUT/rss.csv and prints the verdict.

Every probe: HTTP readiness, periodSeconds 1, against the pod's busybox
httpd (bench/node's pods, side B: the `podprobe.io/probes` annotation and
the `podprobe.io/ready` gate). Failing pods probe a path the httpd does not
serve (404: a Warning `Unhealthy` Event per run, aggregated).

The verdict the issue asks for: the last hour's highest RSS within 5 % of
the second hour's first sample, and below 64 MiB. With a soak shorter than
two hours the same comparison is made on the second half against the first
sample after the restart's settling (`levels_off` in the JSON line says
which windows were compared).

A measurement, not a test: CI does not run it. Python 3 standard library
only; bench/node/node.py's API client and pod manifests are reused.
"""

import argparse
import csv
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "node"))
import node  # noqa: E402  (bench/node/node.py)

CLUSTER = node.CLUSTER
NODE_NAME = "podprobe-node"
SELECTOR_LABEL = "podprobe.io/soak"
MIB = 1024


def log(msg):
    print(f"soak.py: {msg}", file=sys.stderr, flush=True)


class Podprobe:
    """`podprobe run` on the host, its log in OUT; stopped by PID."""

    def __init__(self, args, out, generation):
        self.log_path = os.path.join(out, f"podprobe-{generation}.log")
        cmd = [
            args.binary,
            "run",
            "--mode",
            "gate",
            "--node-name",
            NODE_NAME,
            "--kubeconfig",
            f"{CLUSTER}/admin.kubeconfig",
            "--cri-endpoint",
            args.cri_endpoint,
            "--pod-selector",
            f"{SELECTOR_LABEL}=1",
            "--listen",
            "127.0.0.1:0",
            "--metrics-auth",
            "none",
            "--log-level",
            "info",
            "--marker-keys",
            "role",
        ]
        if args.heaptrack:
            cmd = ["heaptrack", "-o", os.path.join(out, f"heaptrack-{generation}")] + cmd
        env = dict(os.environ)
        env.pop("RUST_LOG", None)
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=open(self.log_path, "w"), env=env
        )
        with open(os.path.join(out, f"podprobe-{generation}.pid"), "w") as f:
            f.write(f"{self.proc.pid}\n")
        self.pid = self._podprobe_pid()
        self.metrics = self._listen_addr()

    def _podprobe_pid(self):
        """The podprobe process itself (under heaptrack, a child of its shell)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for pid in node.pids_named("podprobe"):
                if self._descends(pid):
                    return pid
            time.sleep(0.2)
        raise SystemExit(f"podprobe did not start (see {self.log_path})")

    def _descends(self, pid):
        while pid > 1:
            if pid == self.proc.pid:
                return True
            try:
                with open(f"/proc/{pid}/stat") as f:
                    pid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                return False
        return False

    def _listen_addr(self):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = open(self.log_path).read()
            at = text.find("listen=")
            if at >= 0:
                return text[at + len("listen=") :].split()[0]
            time.sleep(0.2)
        raise SystemExit(f"podprobe logged no listen address (see {self.log_path})")

    def gauges(self):
        try:
            text = urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=5).read().decode()
        except OSError:
            return {}
        # The text's size beside the heap: the figure is read before the
        # text is written (src/server/metrics.rs), so a heap that moves with
        # it would be a measuring artefact. The Event caches and dropped
        # Events come from the same scrape: a second scraper's buffer
        # would count in this one's heap figure.
        out = {"scrape_bytes": len(text)}
        for name, labels, value in node.parse_prom(text):
            if name == "podprobe_event_cache_entries":
                out[f"cache_{labels.get('cache', '')}"] = value
            if name == "podprobe_events_total" and labels.get("outcome") == "dropped":
                out["events_dropped"] = value
            if name in (
                "podprobe_pods_tracked",
                "podprobe_pods_watched",
                "podprobe_workers",
                "podprobe_heap_in_use_bytes",
                "podprobe_heap_free_bytes",
                "podprobe_network_probes_in_flight",
            ):
                out[name] = value
            if name == "podprobe_per_pod_entries":
                out[name] = out.get(name, 0) + value
        return out

    def stop(self):
        # podprobe itself: heaptrack's shell passes no signal on, and
        # killing only the shell would leave this podprobe running beside
        # the next one.
        os.kill(self.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.kill(self.pid, signal.SIGKILL)
            self.proc.kill()
            self.proc.wait()


def probes(failing, period=1):
    """bench/node's HTTP readiness probe with a `role` marker (MK1), and a
    liveness probe of the same server."""
    probes = node.probes_of("http")
    readiness = probes["app"]["readinessProbe"]
    readiness["periodSeconds"] = period
    if failing:
        readiness["httpGet"]["path"] = "/missing"
    readiness["podprobe"] = {"markers": [{"label": "role", "onSuccess": "primary", "onFailure": "replica"}]}
    probes["app"]["livenessProbe"] = {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 5}
    return json.dumps(probes)


def manifest(name, failing, paused_until):
    pod = node.pod_manifest(name, "http", "B")
    pod["metadata"]["labels"][SELECTOR_LABEL] = "1"
    annotations = pod["metadata"]["annotations"]
    annotations["podprobe.io/probes"] = probes(failing)
    if paused_until:
        annotations["podprobe.io/pause-liveness-until"] = paused_until
    return pod


def create_pods(api, names, pause_s):
    node.host_dirs(names)
    until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + pause_s))
    for i, name in enumerate(names):
        pod = manifest(name, i % 3 == 2, until if i % 3 == 1 else None)
        status, body = api.request("POST", f"/api/v1/namespaces/{node.NS}/pods", pod)
        if status not in (201, 409):
            raise RuntimeError(f"create {name}: {status} {str(body)[:300]}")


def edit_annotations(api, names):
    """A third of the pods: readiness every 2 s instead of 1 s."""
    for i, name in enumerate(names):
        if i % 3 != 0:
            continue
        patch = {"metadata": {"annotations": {"podprobe.io/probes": probes(i % 3 == 2, period=2)}}}
        api.request(
            "PATCH",
            f"/api/v1/namespaces/{node.NS}/pods/{name}",
            patch,
            content_type="application/merge-patch+json",
        )


def delete_all(api, timeout=300):
    api.request("DELETE", f"/api/v1/namespaces/{node.NS}/pods", {"gracePeriodSeconds": 1})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not node.list_pods(api)["items"]:
            return
        time.sleep(2)
    log(f"pods still there after {timeout} s")


def api_connections(pid, port):
    """podprobe's established TCP connections to the API server: kube's
    HTTP/1 pool opens one per request in flight and keeps it idle for 90 s."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return ""
    count = 0
    for table in ("tcp", "tcp6"):
        try:
            lines = open(f"/proc/{pid}/net/{table}").read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            # remote address is ip:port in hex; state 01 is ESTABLISHED
            if f[3] == "01" and int(f[2].rsplit(":", 1)[1], 16) == port and f[9] in inodes:
                count += 1
    return count


class Sampler(threading.Thread):
    def __init__(self, out, period, api_port):
        super().__init__(daemon=True)
        self.period = period
        self.api_port = api_port
        self.podprobe = None
        self.restarts = []
        self.start_t = time.monotonic()
        self.stopping = threading.Event()
        self.file = open(os.path.join(out, "rss.csv"), "w", newline="")
        self.writer = csv.writer(self.file)
        self.writer.writerow(
            [
                "t_s",
                "rss_kib",
                "heap_in_use_kib",
                "heap_free_kib",
                "pods_watched",
                "pods_tracked",
                "workers",
                "generation",
                "cycle",
                "per_pod_entries",
                "api_connections",
                "scrape_bytes",
                "event_aggregates",
                "event_series",
                "event_spam",
                "events_dropped",
                "network_probes_in_flight",
            ]
        )
        self.generation = 0
        self.cycle = 0
        self.samples = 0

    def run(self):
        while not self.stopping.wait(self.period):
            p = self.podprobe
            if p is None:
                continue
            try:
                rss = node.proc_rss_kib(p.pid)
            except OSError:
                continue
            g = p.gauges()
            kib = lambda name: int(g[name] // 1024) if name in g else ""  # noqa: E731
            row = [
                round(time.monotonic() - self.start_t, 1),
                rss,
                kib("podprobe_heap_in_use_bytes"),
                kib("podprobe_heap_free_bytes"),
                g.get("podprobe_pods_watched", ""),
                g.get("podprobe_pods_tracked", ""),
                g.get("podprobe_workers", ""),
                self.generation,
                self.cycle,
                g.get("podprobe_per_pod_entries", ""),
                api_connections(p.pid, self.api_port),
                g.get("scrape_bytes", ""),
                g.get("cache_aggregates", ""),
                g.get("cache_series", ""),
                g.get("cache_spam", ""),
                g.get("events_dropped", ""),
                g.get("podprobe_network_probes_in_flight", ""),
            ]
            self.samples += 1
            self.writer.writerow(row)
            self.file.flush()


def plot(out):
    rows, heap = [], []
    with open(os.path.join(out, "rss.csv")) as f:
        for r in csv.DictReader(f):
            rows.append((float(r["t_s"]), int(r["rss_kib"]) / MIB, int(r["generation"])))
            if r["heap_in_use_kib"]:
                heap.append((float(r["t_s"]), int(r["heap_in_use_kib"]) / MIB, int(r["generation"])))
    if not rows:
        return
    w, h, pad = 900, 360, 50
    t_max = max(t for t, _, _ in rows) or 1
    y_max = max(64, max(m for _, m, _ in rows) * 1.1)

    def x(t):
        return pad + (w - 2 * pad) * t / t_max

    def y(m):
        return h - pad - (h - 2 * pad) * m / y_max

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<text x="{pad}" y="20">podprobe during the churn soak, MiB: RSS (blue), heap in use (orange);'
        " dashed: 64 MiB; grey: podprobe restarted</text>",
        f'<line x1="{pad}" y1="{y(64):.1f}" x2="{w - pad}" y2="{y(64):.1f}" stroke="#d62728" stroke-dasharray="4 4"/>',
    ]
    for gen in sorted({g for _, _, g in rows}):
        for series, colour in ((rows, "#1f77b4"), (heap, "#ff7f0e")):
            pts = " ".join(f"{x(t):.1f},{y(m):.1f}" for t, m, g in series if g == gen)
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{pts}"/>')
        if gen > 0:
            t0 = min(t for t, _, g in rows if g == gen)
            parts.append(f'<line x1="{x(t0):.1f}" y1="{pad}" x2="{x(t0):.1f}" y2="{h - pad}" stroke="#999"/>')
    for i in range(0, 5):
        m = y_max * i / 4
        parts.append(f'<text x="5" y="{y(m) + 4:.1f}">{m:.0f}</text>')
    for i in range(0, 6):
        t = t_max * i / 5
        parts.append(f'<text x="{x(t) - 10:.1f}" y="{h - pad + 18}">{t / 60:.0f} min</text>')
    parts.append(
        f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>'
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="black"/>'
    )
    parts.append("</svg>")
    with open(os.path.join(out, "rss.svg"), "w") as f:
        f.write("\n".join(parts) + "\n")


def verdict(rows, duration_s):
    """The issue's comparison where the soak is long enough (2 h: the
    second hour's first sample against the last hour's highest), else the
    same over the restarted podprobe's life: its first sample 2 min after
    the restart against its highest. Rows are rss.csv's, as read back."""
    if duration_s >= 7200:
        base_t, window_t = 3600, duration_s - 3600
        label = "second hour's first sample vs last hour's max"
    else:
        restarted = [r[0] for r in rows if r[7] == 1]
        if not restarted:
            return {"levels_off": None, "compared": "no restart"}
        base_t = window_t = restarted[0] + 120
        label = "sample 2 min after the restart vs the rest's max"
    base = next((r for r in rows if r[0] >= base_t), None)
    window = [r[1] for r in rows if r[0] >= window_t]
    if base is None or not window:
        return {"levels_off": None, "compared": label}
    heap_window = [r[2] for r in rows if r[0] >= window_t and r[2] != ""]
    return {
        "compared": label,
        "base_kib": base[1],
        "window_max_kib": max(window),
        "heap_base_kib": base[2],
        "heap_window_max_kib": max(heap_window) if heap_window else None,
        "growth_pct": round(100 * (max(window) - base[1]) / base[1], 1),
        "levels_off": max(window) <= base[1] * 1.05,
        "max_kib": max(r[1] for r in rows),
        "under_64_mib": max(r[1] for r in rows) < 64 * MIB,
    }


# Network probe attempts in flight (podprobe_network_probes_in_flight) at
# or under which a sample counts as taken with probe work at rest: an
# HTTP/1 attempt waiting for its answer held 20–38 KiB with hyper's client
# and holds about 8 KiB since (bench/RESULTS.md), so 16 of them are at most
# 0.6 MiB, inside 5 % of the heap at 300 pods.
AT_REST = 16


def single_life(rows, pods):
    """#39's verdict on one podprobe's life: the heap in use at each cycle's
    peak within 5 % of the fourth cycle's from then on (the first three
    fill caches and the allocator's pools), also read as the peaks from the
    fourth on within a band of ±5 % around its middle; RSS with every pod
    up under 64 MiB. Cycles whose pods were not all up are left out.

    The same verdict on each cycle's peak among the samples taken with at
    most AT_REST network probes in flight, beside the heap's slope against
    probes in flight: a cycle's highest sample is otherwise a draw on how
    many probes of its dying pods wait for their timeout at that instant."""
    cycles = sorted({r[8] for r in rows if len(r) > 8 and r[8]})
    peaks, rest_peaks, medians, rss_full = [], [], [], []
    for c in cycles:
        of = [r for r in rows if r[8] == c]
        full = [r for r in of if r[4] != "" and r[4] >= pods]
        if not full:
            continue
        peaks.append((c, max(r[2] for r in of if r[2] != "")))
        at_rest = [r[2] for r in of if r[2] != "" and in_flight(r) is not None and in_flight(r) <= AT_REST]
        if at_rest:
            rest_peaks.append((c, max(at_rest)))
        heap_full = sorted(r[2] for r in full if r[2] != "")
        medians.append((c, heap_full[len(heap_full) // 2] if heap_full else None))
        rss_full.extend(r[1] for r in full)
    result = {
        "cycle_heap_peaks_kib": peaks,
        "cycle_heap_median_at_full_kib": medians,
        "rss_at_full_max_kib": max(rss_full, default=None),
    }
    result.update(peak_verdict(peaks, "heap"))
    if len(peaks) >= 5:
        full = [(c, m) for c, m in medians[3:] if m is not None]
        if len(full) >= 2:
            base = full[0][1]
            result["heap_medians_vs_4th_pct"] = [round(100 * (m - base) / base, 1) for _, m in full]
            result["heap_median_trend_kib_per_cycle"] = slope(full)
    if rest_peaks:
        result["probes_at_rest_at_most"] = AT_REST
        result["cycle_heap_peaks_at_rest_kib"] = rest_peaks
        result.update(peak_verdict(rest_peaks, "heap_at_rest"))
        cycles_judged = {c for c, _ in peaks}
        judged = [r for r in rows if r[8] in cycles_judged and r[2] != "" and in_flight(r) is not None]
        result["network_probes_in_flight_max"] = max(in_flight(r) for r in judged)
        per_probe = kib_per_probe_in_flight(judged)
        result["heap_kib_per_probe_in_flight"] = per_probe
        if per_probe is not None:
            result.update(less_in_flight(rows, pods, cycles_judged, per_probe))
    if rss_full:
        result["rss_under_64_mib"] = max(rss_full) < 64 * MIB
    return result


def less_in_flight(rows, pods, cycles, per_probe):
    """The same verdict on each sample's heap less what its network probes
    in flight hold (`per_probe` KiB each, this run's own slope), with every
    pod up: the level the probes waiting at that instant ride on. Also the
    band of the cycles' medians of that level."""
    peaks, medians = [], []
    for c in sorted(cycles):
        level = sorted(
            r[2] - per_probe * in_flight(r)
            for r in rows
            if r[8] == c and r[2] != "" and r[4] != "" and r[4] >= pods and in_flight(r) is not None
        )
        if level:
            peaks.append((c, round(level[-1])))
            medians.append((c, round(level[len(level) // 2])))
    result = peak_verdict(peaks, "heap_less_in_flight")
    result.update(peak_verdict(medians, "heap_less_in_flight_median"))
    return result


def kib_per_probe_in_flight(rows):
    """What the heap holds for each network probe in flight: the slope of
    each sample's heap over the median of its six neighbours against its
    probes in flight over theirs. Across cycles the two move apart (the
    waves' probes wait while their pods' state is freed), so only the
    sample-to-sample difference isolates the probes' share."""
    points = []
    for i in range(3, len(rows) - 3):
        near = rows[i - 3 : i] + rows[i + 1 : i + 4]
        points.append(
            (
                in_flight(rows[i]) - statistics.median(in_flight(r) for r in near),
                rows[i][2] - statistics.median(r[2] for r in near),
            )
        )
    return slope(points) if len(points) >= 2 else None


def in_flight(row):
    """A sample's network probes in flight, None where not recorded."""
    return row[16] if len(row) > 16 and row[16] != "" else None


def peak_verdict(peaks, name):
    """The 5 % rule on per-cycle peaks from the fourth cycle on, against
    the fourth and as a band around their middle, with their trend."""
    if len(peaks) < 5:
        return {}
    base = peaks[3][1]
    spread = [round(100 * (p - base) / base, 1) for _, p in peaks[3:]]
    low, high = min(p for _, p in peaks[3:]), max(p for _, p in peaks[3:])
    band = round(100 * (high - low) / (high + low), 1)
    return {
        f"{name}_peaks_vs_4th_pct": spread,
        f"{name}_flat": all(abs(d) <= 5 for d in spread),
        # The band's middle as reference in place of one cycle's peak: a
        # low or high 4th wave alone no longer decides; growth still
        # widens the band.
        f"{name}_peaks_band_pct": band,
        f"{name}_peaks_in_5pct_band": band <= 5,
        # Growth shows as a trend across cycles.
        f"{name}_peak_trend_kib_per_cycle": slope(peaks[3:]),
    }


def slope(points):
    """Least-squares slope of (x, y) points, rounded to 0.1."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    return round(sxy / sxx, 1) if sxx else 0.0


def read_rows(out):
    def num(v):
        return "" if v == "" else float(v) if "." in v else int(v)

    with open(os.path.join(out, "rss.csv")) as f:
        reader = csv.reader(f)
        next(reader)
        return [[num(v) for v in r] for r in reader]


def run(args):
    os.makedirs(args.out, exist_ok=True)
    api = node.Api(f"{CLUSTER}/admin.kubeconfig")
    node.ensure_namespace(api)
    delete_all(api)
    names = [f"soak-{i:03d}" for i in range(args.pods)]
    sampler = Sampler(args.out, args.sample_s, api.port)
    sampler.podprobe = Podprobe(args, args.out, 0)
    sampler.start()
    log(f"podprobe pid {sampler.podprobe.pid}, metrics {sampler.podprobe.metrics}")
    end = time.monotonic() + args.duration_s
    restart_at = end if args.single_life else time.monotonic() + args.duration_s / 2
    cycles = 0

    def wait_until(t):
        """Sleeps until `t`, restarting podprobe once the soak is half over."""
        while time.monotonic() < min(t, end):
            if sampler.generation == 0 and time.monotonic() >= restart_at:
                log("restarting podprobe")
                old = sampler.podprobe
                sampler.podprobe = None
                old.stop()
                sampler.generation = 1
                sampler.podprobe = Podprobe(args, args.out, 1)
                log(f"podprobe pid {sampler.podprobe.pid}")
            time.sleep(1)

    try:
        while time.monotonic() < end:
            cycles += 1
            sampler.cycle = cycles
            log(f"cycle {cycles}: creating {args.pods} pods")
            create_pods(api, names, args.cycle_s / 2)
            half = time.monotonic() + args.cycle_s / 2
            wait_until(half)
            edit_annotations(api, names)
            wait_until(half + args.cycle_s / 2)
            log(f"cycle {cycles}: deleting")
            delete_all(api)
    finally:
        sampler.stopping.set()
        sampler.join()
        if sampler.podprobe is not None:
            sampler.podprobe.stop()
        delete_all(api)
    plot(args.out)
    result = {
        "pods": args.pods,
        "cycle_s": args.cycle_s,
        "duration_s": args.duration_s,
        "cycles": cycles,
        "heaptrack": bool(args.heaptrack),
        "samples": sampler.samples,
    }
    if args.single_life:
        result.update(single_life(read_rows(args.out), args.pods))
    else:
        result.update(verdict(read_rows(args.out), args.duration_s))
    print(json.dumps(result))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--binary", required=True)
    r.add_argument("--cri-endpoint", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--pods", type=int, default=300)
    r.add_argument("--cycle-s", type=float, default=240)
    r.add_argument("--duration-s", type=float, default=7200)
    r.add_argument("--sample-s", type=float, default=10)
    r.add_argument("--heaptrack", action="store_true")
    r.add_argument("--single-life", action="store_true")
    pl = sub.add_parser("plot")
    pl.add_argument("out")
    pl.add_argument("--duration-s", type=float, default=7200)
    pl.add_argument("--single-life", action="store_true")
    pl.add_argument("--pods", type=int, default=300)
    args = p.parse_args()
    if args.cmd == "run":
        run(args)
    else:
        plot(args.out)
        rows = read_rows(args.out)
        judged = single_life(rows, args.pods) if args.single_life else verdict(rows, args.duration_s)
        print(json.dumps(judged))


if __name__ == "__main__":
    main()
