#!/usr/bin/env python3
"""What a heaptrack recording's live heap gained between two instants, by
what holds it (#39 item 2).

heaptrack_print ranks call sites by their own peak or by what is left at
the end; neither shows what a transient of a few seconds is made of. This
replays the recording (heaptrack's text format, v3: `a` allocation infos,
`+`/`-` allocations and frees by info, `c` timestamps in ms, `t` trace
nodes, `i` instruction pointers, `s` strings), counts the live allocations
of every info at each instant asked for, and for each pair FROM:TO prints
the net bytes gained by category (the first of CATEGORIES whose pattern
the demangled stack matches) and the largest allocation sites.

    heap_diff.py OUT/heaptrack-0.zst 207.0:210.66 541.0:542.18

A measurement tool, not a test: needs zstd and c++filt (binutils).
"""

import collections
import re
import subprocess
import sys

CATEGORIES = [
    ("probe runs in flight", re.compile(r"run_probe|send_http1|probe::http|probe::dial|ProbeStream|do_probe")),
    ("pod watch", re.compile(r"pods::watch|WatchedPod|watcher")),
    ("status patcher", re.compile(r"patcher")),
    ("events", re.compile(r"event_broadcaster|correlator")),
]

# Frames of the allocator and of std's collections, skipped when naming a site.
PLUMBING = re.compile(
    r"^(finish_grow|allocate|alloc_impl\w*|alloc|realloc|do_reserve_and_handle|grow_\w+|reserve\w*"
    r"|try_allocate_in|with_capacity\w*|new_uninit|exchange_malloc|box_new_uninit|__rust_\w+|\?)$"
)


def replay(path, instants):
    """Strings, instruction pointers, traces, infos and, per instant, the
    live count of every info (taken at the first timestamp past it)."""
    strings, ips, traces, infos, counts = [None], [None], [None], [], []
    live, pending = {}, sorted(instants)
    data = subprocess.Popen(["zstd", "-dc", path], stdout=subprocess.PIPE).stdout
    for line in data:
        kind = line[:1]
        if kind == b"+":
            counts[int(line[2:], 16)] += 1
        elif kind == b"-":
            counts[int(line[2:], 16)] -= 1
        elif kind == b"c":
            now = int(line[2:], 16) / 1000.0
            while pending and now > pending[0]:
                live[pending.pop(0)] = list(counts)
        elif kind == b"a":
            size, trace = line[2:].split()
            infos.append((int(size, 16), int(trace, 16)))
            counts.append(0)
        elif kind == b"t":
            ip, parent = line[2:].split()
            traces.append((int(ip, 16), int(parent, 16)))
        elif kind == b"i":
            fields = line[2:].split()
            function = int(fields[2], 16) if len(fields) > 2 else 0
            inlined = [int(fields[j], 16) for j in range(5, len(fields), 3)]
            ips.append((function, inlined))
        elif kind == b"s":
            text = line[2:].rstrip(b"\n").split(b" ", 1)
            strings.append(text[1].decode("utf-8", "replace") if len(text) > 1 else "")
    if pending:
        sys.exit(f"heap_diff: the recording ends before {pending[0]} s")
    names = subprocess.run(
        ["c++filt"], input="\n".join(s or "" for s in strings[1:]), capture_output=True, text=True
    ).stdout.split("\n")
    names = [None] + [re.sub(r"\[[0-9a-f]{16}\]", "", n) for n in names]
    return names, ips, traces, infos, live


def stack(trace, names, ips, traces):
    """The frames of `trace`, innermost first (inlined ones included)."""
    frames = []
    while trace:
        ip, trace = traces[trace]
        function, inlined = ips[ip]
        frames.extend(names[f] if f else "?" for f in reversed(inlined))
        frames.append(names[function] if function else "?")
    return frames


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    pairs = [tuple(float(t) for t in arg.split(":")) for arg in sys.argv[2:]]
    names, ips, traces, infos, live = replay(sys.argv[1], [t for pair in pairs for t in pair])
    for start, end in pairs:
        by_category, by_site, sites = collections.Counter(), collections.Counter(), collections.Counter()
        before, after = live[start], live[end]
        for info, (size, trace) in enumerate(infos):
            gained = (after[info] if info < len(after) else 0) - (before[info] if info < len(before) else 0)
            if not gained:
                continue
            frames = stack(trace, names, ips, traces)
            joined = ";".join(frames)
            category = next((name for name, pattern in CATEGORIES if pattern.search(joined)), "other")
            by_category[category] += gained * size
            short = [re.sub(r"<.*", "", f) for f in frames]
            site = " < ".join([f for f in short if f and not PLUMBING.match(f)][:3])
            by_site[(site, size)] += gained * size
            sites[(site, size)] += gained
        total = sum(by_category.values())
        print(f"{start} s -> {end} s: {total / 2**20:+.2f} MiB live")
        for category, gained in by_category.most_common():
            print(f"  {gained / 2**20:+7.2f} MiB  {category}")
        for (site, size), gained in by_site.most_common(8):
            print(f"  {gained / 2**10:+8.0f} KiB  {sites[(site, size)]:5d} x {size:6d} B  {site[:110]}")


if __name__ == "__main__":
    main()
