#!/usr/bin/env python3
"""Turns the JSON lines of bench/run.sh into markdown tables.

For each (kind, N) it takes the median of each metric over the rounds of
each side, then prints the Rust/Go ratios and, below, the medians themselves,
and CPU per probe round by round. Ratios below 1 mean Rust used less (or, for
probes/s, achieved less). A line's `side` (bench/run.sh sets it: `rust-1t`
with RUST_THREADS=1) names it; lines without one are sided by `impl`.
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


def side(r):
    if "side" in r:
        return r["side"]
    impl = r["impl"]
    if impl.startswith("c-"):
        return "floor"
    return "go" if impl.startswith("go") else "rust"


def rust_sides(sides):
    return sorted(s for s in sides if s.startswith("rust"))


def load(path):
    runs = defaultdict(lambda: defaultdict(list))
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                runs[(r["kind"], r["n"], r["period_ms"])][side(r)].append(r)
    return runs


def median(rs, field):
    return statistics.median(r[field] for r in rs)


def ratio(rust, go):
    return f"{rust / go:.2f}" if go else "n/a"


def main(path):
    runs = load(path)
    keys = sorted(runs, key=lambda k: (KIND_ORDER.get(k[0], 9), k[1], k[2]))

    print("Rust/Go ratios (medians over rounds; < 1 means Rust used less):\n")
    print("| kind | N | period | target probes/s | side | " + " | ".join(h for _, h, _ in METRICS) + " | failures Go / Rust |")
    print("|---|---:|---:|---:|---|" + "---:|" * len(METRICS) + "---|")
    for key in keys:
        kind, n, period = key
        go = runs[key]["go"]
        for s in rust_sides(runs[key]):
            rust = runs[key][s]
            if not go or not rust:
                continue
            cells = [ratio(median(rust, f), median(go, f)) for f, _, _ in METRICS]
            fails = f"{sum(r['failures'] for r in go)} / {sum(r['failures'] for r in rust)}"
            print(f"| {kind} | {n} | {period} ms | {n * 1000 // period} | {s} | " + " | ".join(cells) + f" | {fails} |")

    print("\nMedians per side (rounds per cell in the last column):\n")
    print("| kind | N | side | " + " | ".join(h for _, h, _ in METRICS) + " | load avg before | rounds |")
    print("|---|---:|---|" + "---:|" * len(METRICS) + "---|---:|")
    for key in keys:
        kind, n, _ = key
        for s in ["go", *rust_sides(runs[key]), "floor"]:
            rs = runs[key][s]
            if not rs:
                continue
            cells = [f"{median(rs, f) * scale:.3g}" for f, _, scale in METRICS]
            loads = ", ".join(f"{r['loadavg_1m_before']:.1f}" for r in rs)
            print(f"| {kind} | {n} | {s} | " + " | ".join(cells) + f" | {loads} | {len(rs)} |")

    floors = [k for k in keys if runs[k]["floor"]]
    if floors:
        print("\nCPU per probe against the machine's floor (bench/floor, medians):\n")
        print("| kind | N | side | floor µs / probe | Rust / floor | Go / floor | Rust / Go |")
        print("|---|---:|---|---:|---:|---:|---:|")
        for key in floors:
            kind, n, _ = key
            cpu = {s: median(rs, "cpu_s_per_1k") for s, rs in runs[key].items() if rs}
            floor = cpu["floor"]
            for s in rust_sides(cpu):
                cells = [
                    f"{floor * 1000:.1f}",
                    ratio(cpu[s], floor),
                    ratio(cpu["go"], floor) if "go" in cpu else "n/a",
                    ratio(cpu[s], cpu["go"]) if "go" in cpu else "n/a",
                ]
                print(f"| {kind} | {n} | {s} | " + " | ".join(cells) + " |")

    print("\nCPU per probe, µs (user / sys), round by round; Rust / Go beside:\n")
    for key in keys:
        kind, n, _ = key
        sides = ["floor", "go", *rust_sides(runs[key])]
        sides = [s for s in sides if runs[key][s]]
        rust = rust_sides(runs[key])
        print(f"{kind}, N = {n}:\n")
        print("| round | " + " | ".join(sides) + "".join(f" | {s} / go" for s in rust if "go" in sides) + " |")
        print("|---:|" + "---:|" * (len(sides) + (len(rust) if "go" in sides else 0)))
        rounds = sorted({r["round"] for s in sides for r in runs[key][s]})
        for rnd in rounds:
            one = {s: next((r for r in runs[key][s] if r["round"] == rnd), None) for s in sides}
            us = {s: (r["cpu_user_s"] + r["cpu_sys_s"]) / r["probes"] * 1e6 for s, r in one.items() if r and r["probes"]}
            cells = [
                f"{us[s]:.0f} ({one[s]['cpu_user_s'] / one[s]['probes'] * 1e6:.0f} / {one[s]['cpu_sys_s'] / one[s]['probes'] * 1e6:.0f})"
                if s in us else "–"
                for s in sides
            ]
            cells += [f"{us[s] / us['go']:.3f}" if s in us and "go" in us else "–" for s in rust if "go" in sides]
            print(f"| {rnd} | " + " | ".join(cells) + " |")
        print()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: table.py results.jsonl")
    main(sys.argv[1])
