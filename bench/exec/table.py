#!/usr/bin/env python3
"""Markdown tables from bench/exec's JSON lines: python3 table.py FILE..."""

import json
import sys

SIDES = ["bare", "bare_with_status", "podprobe", "podprobe_no_identity"]


def ms(us):
    return f"{us / 1000:.2f}"


def main(paths):
    lines = [json.loads(l) for p in paths for l in open(p) if l.strip()]
    overhead = [l for l in lines if l["mode"] == "overhead"]
    if overhead:
        print("| build | load | side | n | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | failures |")
        print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
        for l in overhead:
            for side in SIDES:
                s = l["sides"].get(side)
                if s:
                    print(f"| {l['label'].split(':')[0]} | {l['loadavg_1m']} | {side} | {s['n']} | "
                          f"{ms(s['p50_us'])} | {ms(s['p90_us'])} | {ms(s['p99_us'])} | "
                          f"{ms(s['p99_9_us'])} | {ms(s['max_us'])} | {s['failures']} |")
        print()
        print("| build | difference | p50 ms | p90 ms | p99 ms | mean ms |")
        print("|---|---|---:|---:|---:|---:|")
        for l in overhead:
            for key in ["podprobe_minus_bare", "podprobe_minus_bare_with_status",
                        "podprobe_no_identity_minus_bare"]:
                d = l[key]
                print(f"| {l['label'].split(':')[0]} | {key} | {ms(d['p50_us'])} | "
                      f"{ms(d['p90_us'])} | {ms(d['p99_us'])} | {ms(d['mean_us'])} |")
        print()
        print("| build | calls/s | containerd cores | shims cores | bench cores |")
        print("|---|---:|---:|---:|---:|")
        for l in overhead:
            print(f"| {l['label'].split(':')[0]} | {l['calls_per_s']:.1f} | "
                  f"{l['containerd_cpu_cores']:.3f} | {l['shims_cpu_cores']:.3f} | "
                  f"{l['bench_cpu_cores']:.4f} |")
        print()
    fake = [l for l in lines if l["mode"] == "fake"]
    if fake:
        print("| build | load | side | n | p50 µs | p90 µs | p99 µs | p99.9 µs | CPU µs / call |")
        print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
        for l in fake:
            for side in SIDES:
                s = l["sides"][side]
                print(f"| {l['label'].split(':')[0]} | {l['loadavg_1m']} | {side} | {s['n']} | "
                      f"{s['p50_us']:.0f} | {s['p90_us']:.0f} | {s['p99_us']:.0f} | "
                      f"{s['p99_9_us']:.0f} | {s['cpu_us_per_call']:.0f} |")
        print()
    cap = [l for l in lines if l["mode"] == "cap"]
    if cap:
        print("| cap | load | probes | peak in flight | drain s (mean) | runtime cores during burst (mean, max) "
              "| runtime CPU ms / probe | p50 s | p99 s | max s | retried | outcomes |")
        print("|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---|")
        for l in cap:
            drains = l["burst_drain_s"]
            cores = l["runtime_cores_during_burst"]
            lat = l["latency"]
            print(f"| {l['cap']} | {l['loadavg_1m']} | {l['probes']} | "
                  f"{max(l['peak_exec_in_flight_per_round'])} | {sum(drains) / len(drains):.2f} | "
                  f"{sum(cores) / len(cores):.2f}, {max(cores):.2f} | "
                  f"{l['runtime_cpu_ms_per_probe']:.1f} | {lat['p50_us'] / 1e6:.2f} | "
                  f"{lat['p99_us'] / 1e6:.2f} | {lat['max_us'] / 1e6:.2f} | {l['probes_retried']} | "
                  + ", ".join(f"{k} {v}" for k, v in sorted(l["outcomes"].items())) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
