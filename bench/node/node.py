#!/usr/bin/env python3
"""One side of the node-level benchmark (bench/node/run.sh), and its tables.

    node.py run --workload mixed|http|tcp --side A|B|C --round N [knobs]
        creates the workload's pods in namespace podprobe-bench, waits for
        them to be Ready, measures a steady window, then a flip window, deletes
        the pods and prints one JSON line.
    node.py table RESULTS.jsonl...
        prints the Markdown tables of bench/RESULTS.md from those lines.

Side A: the probes are in the containers' spec, the kubelet runs them
(podprobe runs on the node but has no pod to probe). Side B: the same
probes in the `podprobe.io/probes` annotation with the readiness gate
`podprobe.io/ready`, and no spec probes: podprobe runs them. Side C (http
and tcp only): no probes at all; in the steady window the C floor prober
(bench/floor/floor.c, `--floor`) probes the pods' IPs at the same rate
over the same bridge, so the node's floor per probe is measured beside
what the kubelet and podprobe spend. Side C has no flip window.

Workloads (every probe periodSeconds 1, timeoutSeconds 1):
  mixed: PODS (100) pods x (container `app`: busybox httpd with readiness
         httpGet /healthz and liveness tcpSocket on its port; container
         `side`: a sleep with readiness exec `test -f /www/exec-ok`)
  http:  PODS (300) pods x (container `app`: busybox httpd, readiness httpGet)
  tcp:   PODS (300) pods x (container `app`: busybox httpd, readiness
         tcpSocket on its port); no flip window (nothing flips a TCP probe)
Each pod mounts its own host directory (hostPath) as /www, the httpd's root:
removing `healthz` there flips the HTTP readiness probe to failure (404), at
a time this process knows to the microsecond; putting it back flips it back.

What it reads (all on one clock, time.monotonic):
  - CPU (utime+stime) and RSS (VmRSS) of the kubelet (the cluster's PID
    file), podprobe (the process named podprobe in the DaemonSet pod's
    cgroup), containerd (its PID file) and the cluster's containerd shims
    (utime+stime+cutime+cstime: the shims reap runc and the exec'd probe
    command, so exec probes' runc and command land there);
  - API requests from the API server's own counter,
    apiserver_flowcontrol_dispatched_requests_total by flow schema: the
    kubelet's are `system-nodes` + `system-node-high` (group system:nodes),
    podprobe's `service-accounts` (its ServiceAccount; the controllers' are
    kube-system's and have their own schema), the benchmark's own requests
    are `exempt` (system:masters) and not counted;
  - probes run: prober_probe_total of the kubelet (/metrics/probes through
    the API server's node proxy) and of podprobe (its plain listener on
    127.0.0.1:9441), for this namespace;
  - for each flip, the receipt time of the first pod watch event showing
    `Ready` (and, on side B, `podprobe.io/ready`) at the expected status.

A measurement, not a test: CI does not run it. Python 3 standard library
only.
"""

import argparse
import base64
import heapq
import http.client
import json
import os
import re
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

NS = "podprobe-bench"
GATE = "podprobe.io/ready"
IMAGE = "docker.io/local/busybox:latest"
HOST_ROOT = "/tmp/podprobe-bench-node"
CLUSTER = "/tmp/podprobe-cluster"
CLK_TCK = os.sysconf("SC_CLK_TCK")
KUBELET_SCHEMAS = ("system-nodes", "system-node-high")
PODPROBE_SCHEMAS = ("service-accounts",)


def log(msg):
    print(f"node.py: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- API client


class Api:
    """A minimal client for the local cluster's API server, authenticated by
    the admin kubeconfig's client certificate (system:masters, exempt from
    API priority and fairness, so its requests are not counted as anyone's)."""

    def __init__(self, kubeconfig):
        text = open(kubeconfig).read()

        def field(name):
            m = re.search(rf"^\s*{name}:\s*(\S+)\s*$", text, re.M)
            if not m:
                raise SystemExit(f"{kubeconfig}: no {name}")
            return m.group(1)

        url = urllib.parse.urlparse(field("server"))
        self.host, self.port = url.hostname, url.port or 443
        self._dir = tempfile.mkdtemp(prefix="bench-node-")
        paths = {}
        for key in ("certificate-authority-data", "client-certificate-data", "client-key-data"):
            path = os.path.join(self._dir, key)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
            os.write(fd, base64.b64decode(field(key)))
            os.close(fd)
            paths[key] = path
        self.ctx = ssl.create_default_context(cafile=paths["certificate-authority-data"])
        self.ctx.load_cert_chain(paths["client-certificate-data"], paths["client-key-data"])
        self._local = threading.local()

    def connect(self, timeout=30):
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=timeout)

    def request(self, method, path, body=None, content_type="application/json", raw=False):
        for attempt in range(3):
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._local.conn = self.connect()
            try:
                headers = {"Accept": "application/json"}
                data = None
                if body is not None:
                    data = body if isinstance(body, bytes) else json.dumps(body).encode()
                    headers["Content-Type"] = content_type
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                payload = resp.read()
                if raw:
                    return resp.status, payload.decode()
                return resp.status, (json.loads(payload) if payload else None)
            except (OSError, http.client.HTTPException):
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
                time.sleep(0.5)

    def get(self, path, raw=False):
        status, body = self.request("GET", path, raw=raw)
        if status != 200:
            raise RuntimeError(f"GET {path}: {status} {str(body)[:300]}")
        return body


def parse_prom(text):
    """(name, labels, value) for each sample of a Prometheus/OpenMetrics text."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)", line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        try:
            out.append((m.group(1), labels, float(m.group(4))))
        except ValueError:
            pass
    return out


# ---------------------------------------------------------------- processes


def read_pid(path):
    with open(path) as f:
        return int(f.read().strip())


def proc_cpu_ticks(pid, children=False):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state): utime is field 14, stime 15, cutime 16, cstime 17.
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks


def proc_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def node_cpu_ticks():
    """The whole machine's busy time (/proc/stat: user, nice, system, irq,
    softirq; not idle, iowait or steal), its softirq share, and the time
    the hypervisor gave to others (steal). With tick accounting (no
    CONFIG_IRQ_TIME_ACCOUNTING) a process is charged the softirq work that
    interrupted it, so per-process figures can move work between
    processes; the machine's total cannot. Ticks stolen by the host are
    charged to no process: a window with much steal measures less CPU for
    the same work (round 3 of 2026-12-03's rounds in bench/RESULTS.md)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return {"node": user + nice + system + irq + softirq, "node_softirq": softirq, "node_steal": steal}


def cluster_shims():
    """PIDs of the containerd shims of the cluster's containerd (not of any
    other containerd on the machine)."""
    address = f"{CLUSTER}/containerd/containerd.sock"
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm") as f:
                if not f.read().startswith("containerd-shim"):
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if address.encode() in f.read():
                    pids.append(int(entry))
        except OSError:
            pass
    return pids


def pids_named(comm):
    """PIDs of the processes whose command name is `comm`."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm") as f:
                if f.read().strip() == comm:
                    yield int(entry)
        except OSError:
            continue


def podprobe_pid(api):
    pods = api.get("/api/v1/namespaces/podprobe-system/pods")["items"]
    uids = [p["metadata"]["uid"] for p in pods if p["status"].get("phase") == "Running"]
    for pid in pids_named("podprobe"):
        try:
            with open(f"/proc/{pid}/cgroup") as f:
                cgroup = f.read()
        except OSError:
            continue
        if any(uid in cgroup or uid.replace("-", "_") in cgroup for uid in uids):
            return pid
    raise SystemExit("no podprobe process in the DaemonSet's pod (hack/deploy.sh --helm bench/node)")


class Sampler:
    def __init__(self, api, node):
        self.api = api
        self.node = node
        self.kubelet = read_pid(f"{CLUSTER}/run/kubelet.pid")
        self.containerd = read_pid(f"{CLUSTER}/containerd/containerd.pid")
        self.podprobe = podprobe_pid(api)

    def sample(self):
        s = {"t": time.monotonic()}
        s["cpu_ticks"] = {
            "kubelet": proc_cpu_ticks(self.kubelet),
            "podprobe": proc_cpu_ticks(self.podprobe),
            "containerd": proc_cpu_ticks(self.containerd, children=True),
        }
        s["cpu_ticks"].update(node_cpu_ticks())
        shims = {}
        for pid in cluster_shims():
            try:
                shims[pid] = proc_cpu_ticks(pid, children=True)
            except OSError:
                pass
        s["shims"] = shims
        s["rss_kib"] = {
            "kubelet": proc_rss_kib(self.kubelet),
            "podprobe": proc_rss_kib(self.podprobe),
            "containerd": proc_rss_kib(self.containerd),
        }
        dispatched = {}
        for name, labels, value in parse_prom(self.api.get("/metrics", raw=True)):
            if name == "apiserver_flowcontrol_dispatched_requests_total":
                schema = labels.get("flow_schema", "")
                dispatched[schema] = dispatched.get(schema, 0) + value
        s["dispatched"] = dispatched
        s["probes"] = {
            "kubelet": self._probe_totals(
                self.api.get(f"/api/v1/nodes/{self.node}/proxy/metrics/probes", raw=True)
            ),
            "podprobe": self._podprobe_metrics(),
        }
        return s

    @staticmethod
    def _probe_totals(text):
        totals = {}
        for name, labels, value in parse_prom(text):
            if name == "prober_probe_total" and labels.get("namespace") == NS:
                kind = labels.get("probe_type", "?")
                totals[kind] = totals.get(kind, 0) + value
                if labels.get("result") == "failed":
                    totals["failed"] = totals.get("failed", 0) + value
        return totals

    def _podprobe_metrics(self):
        conn = http.client.HTTPConnection("127.0.0.1", 9441, timeout=10)
        try:
            conn.request("GET", "/metrics")
            text = conn.getresponse().read().decode()
        finally:
            conn.close()
        totals = self._probe_totals(text)
        for name, labels, value in parse_prom(text):
            for family in ("status_patches", "events"):
                if name == f"podprobe_{family}_total":
                    key = f"{family}_" + labels.get("outcome", labels.get("result", "?"))
                    totals[key] = totals.get(key, 0) + value
            if name == "podprobe_result_to_status_seconds_bucket":
                totals["r2s_le_" + labels["le"]] = value
            elif name == "podprobe_result_to_status_seconds_count":
                totals["r2s_count"] = value
        return totals


def delta(s0, s1):
    """What happened between two samples."""
    wall = s1["t"] - s0["t"]
    cpu = {k: (s1["cpu_ticks"][k] - s0["cpu_ticks"][k]) / CLK_TCK for k in s0["cpu_ticks"]}
    cpu["shims"] = sum(s1["shims"][p] - s0["shims"][p] for p in s0["shims"] if p in s1["shims"]) / CLK_TCK
    schemas = set(s0["dispatched"]) | set(s1["dispatched"])
    requests = {k: s1["dispatched"].get(k, 0) - s0["dispatched"].get(k, 0) for k in schemas}
    probes = {}
    for side in ("kubelet", "podprobe"):
        keys = set(s0["probes"][side]) | set(s1["probes"][side])
        probes[side] = {k: s1["probes"][side].get(k, 0) - s0["probes"][side].get(k, 0) for k in keys}
    return {
        "wall_s": round(wall, 3),
        "cpu_s": {k: round(v, 3) for k, v in cpu.items()},
        "requests": {
            "kubelet": sum(requests.get(k, 0) for k in KUBELET_SCHEMAS),
            "podprobe": sum(requests.get(k, 0) for k in PODPROBE_SCHEMAS),
            "by_flow_schema": requests,
        },
        "probes": probes,
        "shims": len([p for p in s0["shims"] if p in s1["shims"]]),
    }


# ---------------------------------------------------------------- pods


def probes_of(workload):
    """The probes per container, in the core/v1 schema both sides use."""
    http_ready = {
        "httpGet": {"path": "/healthz", "port": 8080},
        "periodSeconds": 1,
        "timeoutSeconds": 1,
        "successThreshold": 1,
        "failureThreshold": 1,
    }
    if workload == "http":
        return {"app": {"readinessProbe": http_ready}}
    if workload == "tcp":
        tcp_ready = {k: v for k, v in http_ready.items() if k != "httpGet"}
        return {"app": {"readinessProbe": dict(tcp_ready, tcpSocket={"port": 8080})}}
    return {
        "app": {
            "readinessProbe": http_ready,
            "livenessProbe": {
                "tcpSocket": {"port": 8080},
                "periodSeconds": 1,
                "timeoutSeconds": 1,
                "failureThreshold": 3,
            },
        },
        "side": {
            "readinessProbe": {
                "exec": {"command": ["test", "-f", "/www/exec-ok"]},
                "periodSeconds": 1,
                "timeoutSeconds": 1,
                "successThreshold": 1,
                "failureThreshold": 1,
            }
        },
    }


def pod_manifest(name, workload, side):
    probes = probes_of(workload)
    www = {"name": "www", "mountPath": "/www"}
    containers = [
        {
            "name": "app",
            "image": IMAGE,
            "imagePullPolicy": "Never",
            "command": ["httpd", "-f", "-p", "8080", "-h", "/www"],
            "volumeMounts": [www],
        }
    ]
    if workload == "mixed":
        containers.append(
            {
                "name": "side",
                "image": IMAGE,
                "imagePullPolicy": "Never",
                "command": ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait; done"],
                "volumeMounts": [dict(www, readOnly=True)],
            }
        )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "podprobe-bench", "side": side}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "containers": containers,
            "volumes": [
                {"name": "www", "hostPath": {"path": f"{HOST_ROOT}/{name}", "type": "Directory"}}
            ],
        },
    }
    if side == "A":
        for c in containers:
            c.update(probes[c["name"]])
    elif side == "B":
        pod["metadata"]["annotations"] = {"podprobe.io/probes": json.dumps(probes)}
        pod["spec"]["readinessGates"] = [{"conditionType": GATE}]
    return pod


def condition(pod, kind):
    for c in pod.get("status", {}).get("conditions", []) or []:
        if c.get("type") == kind:
            return c.get("status")
    return None


def ensure_namespace(api):
    status, body = api.request("GET", f"/api/v1/namespaces/{NS}")
    if status == 200:
        return
    status, body = api.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
    )
    if status not in (201, 409):
        raise RuntimeError(f"create namespace: {status} {body}")
    # Pods in the namespace need its default ServiceAccount.
    for _ in range(120):
        if api.request("GET", f"/api/v1/namespaces/{NS}/serviceaccounts/default")[0] == 200:
            return
        time.sleep(0.5)
    raise RuntimeError("no default ServiceAccount in the benchmark namespace")


def list_pods(api):
    return api.get(f"/api/v1/namespaces/{NS}/pods")


def delete_pods(api, baseline_shims, timeout, still_s=30):
    """Deletes the benchmark's pods and waits until they are gone and their
    shims with them: the shim count back at `baseline_shims`, or unchanged
    for `still_s` once the pods are gone (shims the kubelet's sandbox
    garbage collection has not reached cost nothing while they wait, and
    waiting the whole `timeout` for them made every side minutes longer)."""
    api.request("DELETE", f"/api/v1/namespaces/{NS}/pods", {"gracePeriodSeconds": 1})
    deadline = time.monotonic() + timeout
    shims, changed = None, time.monotonic()
    while time.monotonic() < deadline:
        count = len(cluster_shims())
        if count != shims:
            shims, changed = count, time.monotonic()
        if not list_pods(api)["items"]:
            if count <= baseline_shims:
                return
            if time.monotonic() - changed >= still_s:
                log(f"{count} shims left (baseline {baseline_shims}), none gone for {still_s} s: going on")
                return
        time.sleep(2)
    log(f"pods or shims still there after {timeout} s")


def host_dirs(names):
    for name in names:
        d = f"{HOST_ROOT}/{name}"
        os.makedirs(d, exist_ok=True)
        for f in ("healthz", "exec-ok"):
            with open(f"{d}/{f}", "w") as fh:
                fh.write("ok\n")


# ---------------------------------------------------------------- flips


class Watcher(threading.Thread):
    """Streams the namespace's pod events and records, per pod, when `Ready`
    and the gate changed status, on time.monotonic's clock."""

    def __init__(self, api, resource_version, state):
        super().__init__(daemon=True)
        self.api = api
        self.rv = resource_version
        self.state = dict(state)  # name -> (ready, gate)
        self.changes = []  # (t, pod, "Ready"|GATE, status)
        self.stopping = threading.Event()
        self.error = None
        self._conn = None

    def stop(self):
        self.stopping.set()
        conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def run(self):
        while not self.stopping.is_set():
            conn = self._conn = self.api.connect(timeout=None)
            try:
                path = f"/api/v1/namespaces/{NS}/pods?watch=1&resourceVersion={self.rv}&timeoutSeconds=600"
                conn.request("GET", path, headers={"Accept": "application/json"})
                resp = conn.getresponse()
                if resp.status != 200:
                    self.error = f"watch: {resp.status}"
                    return
                while not self.stopping.is_set():
                    line = resp.readline()
                    if not line:
                        break
                    t = time.monotonic()
                    event = json.loads(line)
                    obj = event.get("object", {})
                    if event.get("type") == "ERROR":
                        self.error = f"watch: {obj}"
                        return
                    self.rv = obj.get("metadata", {}).get("resourceVersion", self.rv)
                    name = obj.get("metadata", {}).get("name")
                    now = (condition(obj, "Ready"), condition(obj, GATE))
                    before = self.state.get(name, (None, None))
                    if now[0] != before[0]:
                        self.changes.append((t, name, "Ready", now[0]))
                    if now[1] != before[1]:
                        self.changes.append((t, name, GATE, now[1]))
                    self.state[name] = now
            except (OSError, http.client.HTTPException) as e:
                if self.stopping.is_set():
                    break
                log(f"watch interrupted ({e}); resuming")
                time.sleep(0.2)
            finally:
                conn.close()


def flip_pod(name, direction):
    """Turns pod `name`'s HTTP readiness down (removes the healthz its
    httpd serves) or up (puts it back, atomically)."""
    path = f"{HOST_ROOT}/{name}/healthz"
    if direction == "down":
        os.unlink(path)
    else:
        with open(path + ".tmp", "w") as fh:
            fh.write("ok\n")
        os.rename(path + ".tmp", path)


def run_flips(names, flips, interval, hold):
    """Removes pod i's healthz at T0 + i x interval and puts it back `hold`
    seconds later, round robin over the pods; returns the flips as
    (pod, direction, time)."""
    actions = []
    for i in range(flips):
        name = names[i % len(names)]
        heapq.heappush(actions, (i * interval, i, name, "down"))
        heapq.heappush(actions, (i * interval + hold, i, name, "up"))
    t0 = time.monotonic() + 0.5
    done = []
    while actions:
        at, i, name, direction = heapq.heappop(actions)
        delay = t0 + at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        flip_pod(name, direction)
        done.append((name, direction, time.monotonic()))
    return done


def latencies(flips, changes, kind, hold):
    """Per direction, the seconds from each flip to the first change of
    condition `kind` to the expected status on that pod (within `hold`)."""
    by_pod = {}
    for t, pod, k, status in changes:
        if k == kind:
            by_pod.setdefault(pod, []).append((t, status))
    out = {"down": [], "up": []}
    missed = {"down": 0, "up": 0}
    for pod, direction, t_flip in flips:
        want = "False" if direction == "down" else "True"
        hit = next(
            (t for t, status in by_pod.get(pod, []) if t >= t_flip and status == want and t - t_flip <= hold),
            None,
        )
        if hit is None:
            missed[direction] += 1
        else:
            out[direction].append(hit - t_flip)
    return out, missed


def percentile(values, p):
    """Nearest-rank percentile."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(-(-p * len(s) // 100)) - 1))
    return s[k]


def summarise(values):
    return {
        "n": len(values),
        "p50_ms": round(percentile(values, 50) * 1000, 1) if values else None,
        "p99_ms": round(percentile(values, 99) * 1000, 1) if values else None,
        "mean_ms": round(statistics.mean(values) * 1000, 1) if values else None,
        "max_ms": round(max(values) * 1000, 1) if values else None,
    }


# ---------------------------------------------------------------- run


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def start_floor(args, pods):
    """The C floor prober, probing every pod's IP for the steady window:
    one probe per pod per second, as the other sides' probes."""
    ips = [p["status"]["podIP"] for p in pods if p.get("status", {}).get("podIP")]
    if len(ips) != args.pods:
        raise RuntimeError(f"{len(ips)} pod IPs for {args.pods} pods")
    targets = tempfile.NamedTemporaryFile("w", prefix="floor-targets-", delete=False)
    targets.write("\n".join(ips) + "\n")
    targets.close()
    kind = "tcp" if args.workload == "tcp" else "http"
    cmd = [args.floor, kind, str(len(ips)), "1000", str(int(args.steady_s)), "8080", targets.name]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_bursts(names, bursts, burst_pods, hold):
    """`bursts` times, removes the healthz of `burst_pods` pods at one
    instant and puts them back `hold` seconds later, then waits `hold`
    seconds; each burst takes the next pods in order. Returns the flips as
    (pod, direction, time)."""
    done = []
    for b in range(bursts):
        group = [names[(b * burst_pods + i) % len(names)] for i in range(burst_pods)]
        for direction in ("down", "up"):
            t = time.monotonic()
            for name in group:
                flip_pod(name, direction)
            done.extend((name, direction, t) for name in group)
            time.sleep(hold)
    return done


def flip_latencies(args, flips, changes):
    """Flip → `Ready` (and → the gate on sides B): per direction, summary
    and raw milliseconds."""
    out = {}
    for kind, key in (("Ready", "ready"), (GATE, "gate")):
        if args.side == "A" and kind == GATE:
            continue
        lat, missed = latencies(flips, changes, kind, args.hold_s)
        out[key] = {d: dict(summarise(lat[d]), missed=missed[d]) for d in ("down", "up")}
        out[key + "_raw_ms"] = {d: [round(x * 1000, 1) for x in lat[d]] for d in ("down", "up")}
    return out


def flip_window(args, api, sampler, names):
    """HTTP readiness flips, both directions: latencies, API requests and
    podprobe's result-to-status histogram over the window. Then, with
    --bursts, pods flipped `--burst-pods` at a time (the same figures for
    the bursts alone), and with --events-tail-s, the window held open that
    long after the last flip, so that writes made later (podprobe's Event
    series counts, rule 9.4) are counted too."""
    load = loadavg()
    listing = list_pods(api)
    state = {p["metadata"]["name"]: (condition(p, "Ready"), condition(p, GATE)) for p in listing["items"]}
    watcher = Watcher(api, listing["metadata"]["resourceVersion"], state)
    watcher.start()
    f0 = sampler.sample()
    flips = run_flips(names, args.flips, args.flip_interval_s, args.hold_s)
    time.sleep(args.hold_s)
    f1 = sampler.sample()
    bursts = []
    if args.bursts:
        bursts = run_bursts(names, args.bursts, args.burst_pods, args.hold_s)
    f2 = sampler.sample() if bursts else f1
    watcher.stop()
    watcher.join(timeout=10)
    if watcher.error:
        raise RuntimeError(watcher.error)
    window = delta(f0, f1)
    window["loadavg_1m"] = load
    window["flips"] = {"down": args.flips, "up": args.flips}
    window.update(flip_latencies(args, flips, watcher.changes))
    log(f"flips: Ready {json.dumps(window['ready'])}")
    if bursts:
        burst = delta(f1, f2)
        burst["pods"] = args.burst_pods
        burst["flips"] = {"down": args.bursts * args.burst_pods, "up": args.bursts * args.burst_pods}
        burst.update(flip_latencies(args, bursts, watcher.changes))
        window["burst"] = burst
        log(f"bursts: Ready {json.dumps(burst['ready'])}")
    if args.events_tail_s:
        last = max(t for _, _, t in flips + bursts)
        time.sleep(max(0, last + args.events_tail_s - time.monotonic()))
        tail = delta(f2, sampler.sample())
        tail["after_last_flip_s"] = args.events_tail_s
        window["tail"] = tail
        log(f"tail: requests {json.dumps(tail['requests'])}")
    return window


def cmd_run(args):
    if args.side == "C" and not args.floor:
        raise SystemExit("side C needs --floor (the C floor prober's binary)")
    if args.side == "C" and args.workload == "mixed":
        raise SystemExit("side C runs the http and tcp workloads only")
    if args.bursts and not 0 < args.burst_pods <= args.pods:
        raise SystemExit("--burst-pods must be between 1 and --pods")
    if args.pods * args.flip_interval_s <= args.hold_s + 1:
        raise SystemExit("a pod's next flip would come before its last one settled: need pods x flip interval > hold + 1 s")
    api = Api(args.kubeconfig)
    ensure_namespace(api)
    if list_pods(api)["items"]:
        log("pods left in the benchmark namespace; deleting them first")
        delete_pods(api, 0, args.delete_timeout)
    sampler = Sampler(api, args.node)
    baseline_shims = len(cluster_shims())
    names = [f"{args.workload}-{i:03d}" for i in range(args.pods)]
    host_dirs(names)
    result = {
        "workload": args.workload,
        "side": args.side,
        "round": args.round,
        "pods": args.pods,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }

    log(f"{args.workload} side {args.side} round {args.round}: creating {args.pods} pods")
    t_create = time.monotonic()
    for name in names:
        status, body = api.request("POST", f"/api/v1/namespaces/{NS}/pods", pod_manifest(name, args.workload, args.side))
        if status != 201:
            raise RuntimeError(f"create {name}: {status} {str(body)[:300]}")
    deadline = time.monotonic() + args.ready_timeout
    while True:
        pods = list_pods(api)["items"]
        ready = sum(1 for p in pods if condition(p, "Ready") == "True")
        if ready == len(names):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {ready}/{len(names)} pods Ready after {args.ready_timeout} s")
        time.sleep(2)
    result["all_ready_s"] = round(time.monotonic() - t_create, 1)
    log(f"all {len(names)} pods Ready after {result['all_ready_s']} s; settling {args.settle_s} s")
    time.sleep(args.settle_s)

    # Steady window: probes pass, nothing changes.
    result["loadavg_1m_steady"] = loadavg()
    floor = None
    if args.side == "C":
        floor = start_floor(args, list_pods(api)["items"])
    s0 = sampler.sample()
    rss = []
    end = s0["t"] + args.steady_s
    while time.monotonic() < end:
        time.sleep(min(5, max(0, end - time.monotonic())))
        rss.append({k: proc_rss_kib(getattr(sampler, k)) for k in ("kubelet", "podprobe", "containerd")})
    s1 = sampler.sample()
    steady = delta(s0, s1)
    steady["rss_kib_max"] = {k: max(r[k] for r in rss) for k in rss[0]}
    steady["rss_kib_end"] = s1["rss_kib"]
    if floor is not None:
        out, err = floor.communicate(timeout=args.steady_s + 60)
        if floor.returncode != 0:
            raise RuntimeError(f"floor failed ({floor.returncode}): {err.strip()}")
        steady["floor"] = json.loads(out)
    result["steady"] = steady
    log(f"steady: {json.dumps(steady['cpu_s'])}{' floor: ' + json.dumps(steady['floor']) if floor else ''}")

    if args.side != "C" and args.workload != "tcp":
        result["flip"] = flip_window(args, api, sampler, names)

    log("deleting the pods")
    t_delete = time.monotonic()
    delete_pods(api, baseline_shims, args.delete_timeout)
    result["delete_s"] = round(time.monotonic() - t_delete, 1)
    print(json.dumps(result), flush=True)


# ---------------------------------------------------------------- tables


def bucket_quantile(buckets, q):
    """The q-quantile of a histogram's cumulative buckets [(le, count)],
    interpolated linearly within its bucket (as PromQL's
    histogram_quantile); None without observations."""
    total = buckets[-1][1] if buckets else 0
    if not total:
        return None
    rank = q * total
    lower, below = 0.0, 0
    for le, count in buckets:
        if count >= rank:
            if le == float("inf"):
                return lower
            inside = count - below
            return lower + (le - lower) * ((rank - below) / inside if inside else 1)
        lower, below = le, count
    return lower


def result_to_status(window):
    """podprobe_result_to_status_seconds over a window: [(le, count)]."""
    probes = window["probes"]["podprobe"]
    buckets = [(float(k[len("r2s_le_"):]), v) for k, v in probes.items() if k.startswith("r2s_le_")]
    return sorted(buckets)


def r2s_summary(buckets):
    """p50 and p99 (s) of podprobe_result_to_status_seconds' cumulative
    buckets, and the percentage within 100 ms (nan without observations)."""
    total = buckets[-1][1] if buckets else 0
    within = dict(buckets).get(0.1, 0) / total * 100 if total else float("nan")
    return bucket_quantile(buckets, 0.5), bucket_quantile(buckets, 0.99), within


def probes_total(run, side):
    """Probe runs of `side`'s prober (kubelet, podprobe) in the steady window."""
    return sum(v for k, v in run["steady"]["probes"][side].items() if k in ("Liveness", "Readiness", "Startup"))


def per_round(runs):
    """Every round's own ratios (A, B and C of one round ran back to back),
    with its sides' 1-minute loads: a round whose loads spread more than
    ±20 % around their mean is not at equal load and is marked."""
    rounds = {}
    for r in runs:
        rounds.setdefault((r["workload"], r["round"]), {})[r["side"]] = r
    print(
        "\nPer round, µs per probe (sides back to back; equal load: every side's 1-min load within "
        "±20 % of the round's mean):\n"
    )
    print(
        "| workload | round | load A / B / C | equal load | kubelet A−B | kubelet A−C | podprobe B−A "
        "| floor C | podprobe / floor | podprobe / kubelet (A−B) | podprobe / kubelet (A−C) "
        "| kubelet B − C | node A − B | node B − C | softirq B − C | steal % A / B / C |"
    )
    print("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for (workload, number), sides in sorted(rounds.items()):
        if not {"A", "B", "C"} <= sides.keys():
            continue
        pct = {}
        for side, r in sides.items():
            st = r["steady"]
            w = st["wall_s"]
            pct[side] = {k: st["cpu_s"].get(k, float("nan")) / w for k in ("kubelet", "podprobe", "node", "node_softirq", "node_steal")}
        a, b, c = (sides[x] for x in "ABC")
        probes_s = (
            probes_total(a, "kubelet") / a["steady"]["wall_s"]
            + probes_total(b, "podprobe") / b["steady"]["wall_s"]
        ) / 2
        floor = c["steady"]["floor"]
        floor_us = (floor["cpu_user_s"] + floor["cpu_sys_s"]) / floor["probes"] * 1e6
        saved_b = (pct["A"]["kubelet"] - pct["B"]["kubelet"]) / probes_s * 1e6
        saved_c = (pct["A"]["kubelet"] - pct["C"]["kubelet"]) / probes_s * 1e6
        spent = (pct["B"]["podprobe"] - pct["A"]["podprobe"]) / probes_s * 1e6
        idle_diff = (pct["B"]["kubelet"] - pct["C"]["kubelet"]) / probes_s * 1e6
        node = {
            "A − B": (pct["A"]["node"] - pct["B"]["node"]) / probes_s * 1e6,
            "B − C": (pct["B"]["node"] - pct["C"]["node"]) / probes_s * 1e6,
            "softirq": (pct["B"]["node_softirq"] - pct["C"]["node_softirq"]) / probes_s * 1e6,
        }
        loads = [sides[x]["loadavg_1m_steady"] for x in "ABC"]
        mean = sum(loads) / 3
        equal = all(abs(x - mean) <= 0.2 * mean for x in loads)
        # Of one core's time; "–" (NaN) for results recorded before steal was.
        steal = " / ".join("–" if v != v else format(v * 100, ".1f") for v in (pct[x]["node_steal"] for x in "ABC"))
        print(
            f"| {workload} | {number} | {' / '.join(format(x, '.1f') for x in loads)} | "
            f"{'yes' if equal else '**no**'} | {saved_b:.0f} | {saved_c:.0f} | {spent:.0f} | {floor_us:.0f} | "
            f"{spent / floor_us:.2f} | {spent / saved_b:.2f} | {spent / saved_c:.2f} | {idle_diff:+.0f} | "
            f"{node['A − B']:.0f} | {node['B − C']:+.0f} | {node['softirq']:+.0f} | {steal} |"
        )


def cmd_table(args):
    runs = [json.loads(line) for path in args.results for line in open(path) if line.strip()]

    def med(xs):
        xs = [x for x in xs if x == x]
        return statistics.median(xs) if xs else float("nan")

    print("Per side, medians over rounds (steady window; C: the floor prober's own CPU and probes):\n")
    print(
        "| workload | side | rounds | probes/s | kubelet CPU % | podprobe CPU % | floor CPU % "
        "| containerd+shims CPU % | kubelet RSS MiB | podprobe RSS MiB "
        "| API req/s kubelet | API req/s podprobe | load avg |"
    )
    print("|---|---|---:|" + "---:|" * 10)
    groups = {}
    for r in runs:
        groups.setdefault((r["workload"], r["side"]), []).append(r)
    summary = {}
    for (workload, side), rs in sorted(groups.items()):
        rows = []
        for r in rs:
            st = r["steady"]
            w = st["wall_s"]
            floor = st.get("floor")
            if side == "C":
                probes = floor["probes"] * w / floor["duration_s"]
            else:
                probes = probes_total(r, "kubelet" if side == "A" else "podprobe")
            floor_cpu = floor["cpu_user_s"] + floor["cpu_sys_s"] if floor else 0.0
            rows.append(
                {
                    "probes_s": probes / w,
                    "kubelet_pct": st["cpu_s"]["kubelet"] / w * 100,
                    "podprobe_pct": st["cpu_s"]["podprobe"] / w * 100,
                    "floor_pct": floor_cpu / (floor["duration_s"] if floor else w) * 100,
                    "cri_pct": (st["cpu_s"]["containerd"] + st["cpu_s"]["shims"]) / w * 100,
                    "kubelet_rss": st["rss_kib_max"]["kubelet"] / 1024,
                    "podprobe_rss": st["rss_kib_max"]["podprobe"] / 1024,
                    "req_kubelet": st["requests"]["kubelet"] / w,
                    "req_podprobe": st["requests"]["podprobe"] / w,
                    "load": r["loadavg_1m_steady"],
                    "flip": r.get("flip"),
                    "flip_load": r.get("loadavg_1m_flips", (r.get("flip") or {}).get("loadavg_1m")),
                }
            )
        m = {k: med([row[k] for row in rows]) for k in rows[0] if k not in ("load", "flip", "flip_load")}
        summary[(workload, side)] = (m, rows)
        print(
            f"| {workload} | {side} | {len(rows)} | {m['probes_s']:.0f} | {m['kubelet_pct']:.1f} | "
            f"{m['podprobe_pct']:.1f} | {m['floor_pct']:.1f} | {m['cri_pct']:.1f} | "
            f"{m['kubelet_rss']:.0f} | {m['podprobe_rss']:.0f} | "
            f"{m['req_kubelet']:.2f} | {m['req_podprobe']:.2f} | "
            f"{', '.join(format(row['load'], '.1f') for row in rows)} |"
        )

    print("\nCPU per probe, µs, from those medians: the kubelet's saved when podprobe probes (A − B), "
          "podprobe's spent (B − A), the floor's (C):\n")
    print(
        "| workload | probes/s | kubelet A−B | podprobe B−A | floor C | podprobe / kubelet "
        "| podprobe / floor | kubelet / floor | kubelet+podprobe CPU B / A | containerd+shims B / A "
        "| podprobe RSS B MiB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    nan = float("nan")
    for workload in sorted({w for w, _ in summary}):
        a = summary.get((workload, "A"), (None,))[0]
        b = summary.get((workload, "B"), (None,))[0]
        c = summary.get((workload, "C"), (None,))[0]
        if a is None or b is None:
            continue
        probes_s = (a["probes_s"] + b["probes_s"]) / 2
        kubelet = (a["kubelet_pct"] - b["kubelet_pct"]) / 100 / probes_s * 1e6
        podprobe = (b["podprobe_pct"] - a["podprobe_pct"]) / 100 / probes_s * 1e6
        floor = c["floor_pct"] / 100 / c["probes_s"] * 1e6 if c else nan
        total = (b["kubelet_pct"] + b["podprobe_pct"]) / (a["kubelet_pct"] + a["podprobe_pct"])
        print(
            f"| {workload} | {probes_s:.0f} | {kubelet:.0f} | {podprobe:.0f} | {floor:.0f} | "
            f"{podprobe / kubelet:.2f} | {podprobe / floor:.2f} | {kubelet / floor:.2f} | {total:.2f} | "
            f"{b['cri_pct'] / a['cri_pct']:.2f} | {b['podprobe_rss']:.0f} |"
        )

    per_round(runs)

    flipped = [(k, v) for k, v in sorted(summary.items()) if all(row["flip"] for row in v[1])]
    if not flipped:
        return
    print(
        "\nFlip to condition change, ms (all rounds pooled; n = flips seen; missed = no change "
        "within the hold; mean − 500: the mean less half the 1 s period, i.e. the average time "
        "after the probe that saw the flip):\n"
    )
    print("| workload | side | path | direction | n | missed | p50 | p99 | max | mean − 500 |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|")
    for (workload, side), (m, rows) in flipped:
        paths = [("ready", "kubelet: Ready" if side == "A" else "gate: Ready")]
        if side == "B":
            paths.append(("gate", "podprobe.io/ready alone"))
        for key, label in paths:
            for d in ("down", "up"):
                lat = [x / 1000 for row in rows for x in row["flip"][key + "_raw_ms"][d]]
                missed = sum(row["flip"][key][d]["missed"] for row in rows)
                s = summarise(lat)
                print(
                    f"| {workload} | {side} | {label} | {'to not-ready' if d == 'down' else 'to ready'} | "
                    f"{s['n']} | {missed} | {s['p50_ms']:.0f} | {s['p99_ms']:.0f} | {s['max_ms']:.0f} | "
                    f"{s['mean_ms'] - 500:.0f} |"
                )

    print(
        "\nAPI requests in the flip window (medians over rounds): per flip (down + up = 2 flips), "
        "and per 1,000 failed probes of the side's prober:\n"
    )
    print(
        "| workload | side | kubelet / flip | podprobe / flip | both / flip | failed probes / flip "
        "| prober's requests / 1k failed probes | podprobe patches / flip | podprobe Event writes / flip "
        "| load avg |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for (workload, side), (m, rows) in flipped:
        per = []
        for row in rows:
            f = row["flip"]
            n = 2 * f["flips"]["down"]
            prober = "kubelet" if side == "A" else "podprobe"
            failed = f["probes"][prober].get("failed", 0)
            own = f["probes"]["podprobe"]
            per.append(
                (
                    f["requests"]["kubelet"] / n,
                    f["requests"]["podprobe"] / n,
                    (f["requests"]["kubelet"] + f["requests"]["podprobe"]) / n,
                    failed / n,
                    f["requests"][prober] / failed * 1000 if failed else nan,
                    own.get("status_patches_sent", 0) / n,
                    (own.get("events_recorded", 0) + own.get("events_failed", 0)) / n,
                )
            )
        cols = [med([p[i] for p in per]) for i in range(7)]
        print(
            f"| {workload} | {side} | " + " | ".join(format(x, ".2f") for x in cols[:4])
            + f" | {cols[4]:.0f} | {cols[5]:.2f} | {cols[6]:.2f} | "
            + f"{', '.join(format(row['flip_load'], '.1f') for row in rows)} |"
        )

    bursts_and_tails(runs)
    r2s = [(k, v) for k, v in flipped if k[1] == "B"]
    if not r2s or not any(result_to_status(row["flip"]) for _, (_, rows) in r2s for row in rows):
        return
    print(
        "\nProbe result → status patch accepted (podprobe_result_to_status_seconds over the flip "
        "window, all rounds pooled; quantiles interpolated within its buckets):\n"
    )
    print("| workload | patches | p50 ms | p99 ms | ≤ 100 ms |")
    print("|---|---:|---:|---:|---:|")
    for (workload, _), (m, rows) in r2s:
        pooled = {}
        for row in rows:
            for le, count in result_to_status(row["flip"]):
                pooled[le] = pooled.get(le, 0) + count
        buckets = sorted(pooled.items())
        total = buckets[-1][1] if buckets else 0
        p50, p99, within = r2s_summary(buckets)
        print(f"| {workload} | {total:.0f} | {p50 * 1000:.1f} | {p99 * 1000:.1f} | {within:.1f} % |")


def bursts_and_tails(runs):
    """The bursts (many pods flipping at one instant) and the API requests
    of whole flip windows held open past the last flip, run by run."""
    bursts = [r for r in runs if (r.get("flip") or {}).get("burst")]
    if bursts:
        print(
            "\nBursts: flip → condition, ms (p50 / p99, down and up; missed = no change within the hold), "
            "podprobe's result → status patch over the bursts, API requests per flip during them:\n"
        )
        print(
            "| workload | side | round | pods at once × bursts | Ready down | Ready up | missed | gate down "
            "| gate up | result → status p50 / p99 ms, ≤ 100 ms | kubelet / flip | podprobe / flip | load |"
        )
        print("|---|---|---:|---|---|---|---:|---|---|---|---:|---:|---:|")
        for r in bursts:
            b = r["flip"]["burst"]
            n = 2 * b["flips"]["down"]

            def pair(key, d):
                x = b.get(key, {}).get(d)
                return f"{x['p50_ms']} / {x['p99_ms']}" if x and x["n"] else "–"

            missed = sum(b["ready"][d]["missed"] for d in ("down", "up"))
            r2s = "–"
            buckets = result_to_status(b)
            if r["side"] == "B" and buckets and buckets[-1][1]:
                p50, p99, within = r2s_summary(buckets)
                r2s = f"{p50 * 1000:.1f} / {p99 * 1000:.1f}, {within:.1f} %"
            print(
                f"| {r['workload']} | {r['side']} | {r['round']} | {b['pods']} × {b['flips']['down'] // b['pods']} "
                f"| {pair('ready', 'down')} | {pair('ready', 'up')} | {missed} | {pair('gate', 'down')} "
                f"| {pair('gate', 'up')} | {r2s} | {b['requests']['kubelet'] / n:.2f} "
                f"| {b['requests']['podprobe'] / n:.2f} | {r['flip']['loadavg_1m']:.1f} |"
            )
    tails = [r for r in runs if (r.get("flip") or {}).get("tail")]
    if not tails:
        return
    print(
        "\nAPI requests per readiness change over the whole flip window, held open past the last flip "
        "(flips, bursts and tail together; 'background' = the side's own rate in its steady window "
        "times the window's length):\n"
    )
    print(
        "| workload | side | round | window s | changes | kubelet | its background | podprobe | of which in the tail "
        "| podprobe background | both / change | both less background / change |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in tails:
        f = r["flip"]
        parts = [f] + ([f["burst"]] if f.get("burst") else []) + [f["tail"]]
        wall = sum(x["wall_s"] for x in parts)
        changes = sum(2 * x["flips"]["down"] for x in parts if "flips" in x)
        req = {k: sum(x["requests"][k] for x in parts) for k in ("kubelet", "podprobe")}
        st = r["steady"]
        bg = {k: st["requests"][k] / st["wall_s"] * wall for k in ("kubelet", "podprobe")}
        both = req["kubelet"] + req["podprobe"]
        print(
            f"| {r['workload']} | {r['side']} | {r['round']} | {wall:.0f} | {changes} | {req['kubelet']:.0f} "
            f"| {bg['kubelet']:.0f} | {req['podprobe']:.0f} | {f['tail']['requests']['podprobe']:.0f} "
            f"| {bg['podprobe']:.0f} | {both / changes:.2f} | {(both - bg['kubelet'] - bg['podprobe']) / changes:.2f} |"
        )


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--workload", choices=("mixed", "http", "tcp"), required=True)
    r.add_argument("--side", choices=("A", "B", "C"), required=True)
    r.add_argument("--floor", help="the C floor prober's binary (side C)")
    r.add_argument("--round", type=int, default=1)
    r.add_argument("--pods", type=int, required=True)
    r.add_argument("--kubeconfig", default=f"{CLUSTER}/admin.kubeconfig")
    r.add_argument("--node", default="podprobe-node")
    r.add_argument("--settle-s", type=float, default=30)
    r.add_argument("--steady-s", type=float, default=90)
    r.add_argument("--flips", type=int, default=200)
    r.add_argument("--flip-interval-s", type=float, default=0.25)
    r.add_argument("--hold-s", type=float, default=5)
    r.add_argument("--bursts", type=int, default=0, help="bursts of --burst-pods pods flipped at once")
    r.add_argument("--burst-pods", type=int, default=100)
    r.add_argument(
        "--events-tail-s", type=float, default=0, help="keep the flip window open this long after the last flip"
    )
    r.add_argument("--ready-timeout", type=float, default=600)
    r.add_argument("--delete-timeout", type=float, default=300)
    t = sub.add_parser("table")
    t.add_argument("results", nargs="+")
    args = p.parse_args()
    {"run": cmd_run, "table": cmd_table}[args.cmd](args)


if __name__ == "__main__":
    main()
