#!/usr/bin/env python3
"""Turns the JSON lines of bench/run.sh into markdown tables.

For each (kind, N) it takes the median of each metric over the rounds of
each side, then prints the Rust/Go ratios and, below, the medians themselves.
Ratios below 1 mean Rust used less (or, for probes/s, achieved less).
"""

import json
import statistics
import sys
from collections import defaultdict

METRICS = [
    # (field, heading, scale)
    ("probes_per_sec", "probes/s", 1.0),
    ("cpu_s_per_1k", "CPU s / 1k probes", 1.0),
    ("max_rss_kib", "peak RSS MiB", 1 / 1024),
    ("p50_us", "p50 ms", 1 / 1000),
    ("p99_us", "p99 ms", 1 / 1000),
]
KIND_ORDER = {"http": 0, "tcp": 1, "grpc": 2}


def side(impl):
    if impl.startswith("c-"):
        return "floor"
    return "go" if impl.startswith("go") else "rust"


def load(path):
    runs = defaultdict(lambda: defaultdict(list))
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                runs[(r["kind"], r["n"], r["period_ms"])][side(r["impl"])].append(r)
    return runs


def median(rs, field):
    return statistics.median(r[field] for r in rs)


def ratio(rust, go):
    return f"{rust / go:.2f}" if go else "n/a"


def main(path):
    runs = load(path)
    keys = sorted(runs, key=lambda k: (KIND_ORDER.get(k[0], 9), k[1], k[2]))

    print("Rust/Go ratios (medians over rounds; < 1 means Rust used less):\n")
    print("| kind | N | period | target probes/s | " + " | ".join(h for _, h, _ in METRICS) + " | failures Go / Rust |")
    print("|---|---:|---:|---:|" + "---:|" * len(METRICS) + "---|")
    for key in keys:
        kind, n, period = key
        go, rust = runs[key]["go"], runs[key]["rust"]
        if not go or not rust:
            continue
        cells = [ratio(median(rust, f), median(go, f)) for f, _, _ in METRICS]
        fails = f"{sum(r['failures'] for r in go)} / {sum(r['failures'] for r in rust)}"
        print(f"| {kind} | {n} | {period} ms | {n * 1000 // period} | " + " | ".join(cells) + f" | {fails} |")

    print("\nMedians per side (rounds per cell in the last column):\n")
    print("| kind | N | side | " + " | ".join(h for _, h, _ in METRICS) + " | load avg before | rounds |")
    print("|---|---:|---|" + "---:|" * len(METRICS) + "---|---:|")
    for key in keys:
        kind, n, _ = key
        for s in ("go", "rust", "floor"):
            rs = runs[key][s]
            if not rs:
                continue
            cells = [f"{median(rs, f) * scale:.3g}" for f, _, scale in METRICS]
            loads = ", ".join(f"{r['loadavg_1m_before']:.1f}" for r in rs)
            print(f"| {kind} | {n} | {s} | " + " | ".join(cells) + f" | {loads} | {len(rs)} |")

    floors = [k for k in keys if runs[k]["floor"]]
    if floors:
        print("\nCPU per probe against the machine's floor (bench/floor, medians):\n")
        print("| kind | N | floor µs / probe | Rust / floor | Go / floor | Rust / Go |")
        print("|---|---:|---:|---:|---:|---:|")
        for key in floors:
            kind, n, _ = key
            cpu = {s: median(runs[key][s], "cpu_s_per_1k") for s in ("go", "rust", "floor") if runs[key][s]}
            floor = cpu["floor"]
            cells = [
                f"{floor * 1000:.1f}",
                ratio(cpu["rust"], floor) if "rust" in cpu else "n/a",
                ratio(cpu["go"], floor) if "go" in cpu else "n/a",
                ratio(cpu["rust"], cpu["go"]) if "rust" in cpu and "go" in cpu else "n/a",
            ]
            print(f"| {kind} | {n} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: table.py results.jsonl")
    main(sys.argv[1])
