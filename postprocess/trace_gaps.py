#!/usr/bin/env python3
"""Where the GPU waits for the host, from a phase trace that `quartet train` saved
(the deck's profile.iteration = N writes <run>/profile/<phase>_rank<R>.json, Kineto's chrome trace).

A gap is a stretch with no kernel, copy or memset on the device. Each gap ends with a device
activity whose launch (matched by correlation id) happened at some host time L. When L falls
inside the gap, the device waited for the host: the host work between the gap's start and L is
what it waited on. This charges that wait to the outermost host operations (aten ops or
quartet's annotations) running then, and prints the largest charges:

    python3 postprocess/trace_gaps.py runs/x/profile/train_rank0.json [--min-us 2] [--top 25]

A trace of device activity only (profile.host = false) has no host operations to charge;
--by-kernel then charges each wait to the device activity that ends it (what came late).
"""
import argparse
import bisect
import collections
import json


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--min-us", type=float, default=2.0, help="ignore gaps shorter than this (µs)")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--by-kernel", action="store_true", help="charge each wait to the activity that ends it")
    a = ap.parse_args()
    with open(a.trace) as f:
        events = json.load(f)["traceEvents"]

    device, launches, host = [], {}, collections.defaultdict(list)
    for e in events:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat", "")
        ts, dur = float(e["ts"]), float(e.get("dur", 0))
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            device.append((ts, ts + dur, e.get("args", {}).get("correlation"), e["name"]))
        elif cat == "cuda_runtime" or cat == "cuda_driver":
            c = e.get("args", {}).get("correlation")
            if c is not None:
                launches[c] = ts
            host[(e["pid"], e["tid"])].append((ts, ts + dur, "runtime " + e["name"]))
        elif cat in ("cpu_op", "user_annotation"):
            host[(e["pid"], e["tid"])].append((ts, ts + dur, e["name"]))
    if not device:
        raise SystemExit(f"{a.trace}: no device activity in this trace")
    device.sort()

    # Outermost host intervals per thread (an op inside another is charged to the outer one).
    outer = []
    for spans in host.values():
        spans.sort(key=lambda s: (s[0], -s[1]))
        end = -1.0
        for s in spans:
            if s[0] >= end:
                outer.append(s)
                end = s[1]
    outer.sort()
    starts = [s[0] for s in outer]

    busy_end = device[0][1]
    first, last = device[0][0], max(d[1] for d in device)
    charged = collections.Counter()
    waits = collections.Counter()
    total_gap = host_wait = 0.0
    for begin, end, corr, kname in device[1:]:
        if begin > busy_end:
            gap = begin - busy_end
            if gap >= a.min_us:
                total_gap += gap
                launched = launches.get(corr)
                if launched is not None and launched > busy_end:
                    lo, hi = busy_end, min(launched, begin)
                    host_wait += hi - lo
                    if a.by_kernel:
                        charged[kname[:90]] += hi - lo
                        waits[kname[:90]] += 1
                        busy_end = max(busy_end, end)
                        continue
                    # Charge [lo, hi] to the outermost host spans overlapping it.
                    i = max(0, bisect.bisect_right(starts, lo) - 1)
                    while i < len(outer) and outer[i][0] < hi:
                        s0, s1, name = outer[i]
                        ov = min(s1, hi) - max(s0, lo)
                        if ov > 0:
                            charged[name] += ov
                            waits[name] += 1
                        i += 1
        busy_end = max(busy_end, end)

    span = last - first
    print(f"{a.trace}: device span {span / 1e3:.1f} ms, idle {total_gap / 1e3:.1f} ms in gaps >= {a.min_us:g} us, "
          f"of which the device waited for a later launch {host_wait / 1e3:.1f} ms")
    print("| " + ("device activity that came late" if a.by_kernel else "outermost host operation during the waits") +
          " | ms | gaps |")
    print("|---|---:|---:|")
    for name, us in charged.most_common(a.top):
        print(f"| {name[:90]} | {us / 1e3:.2f} | {waits[name]} |")


if __name__ == "__main__":
    main()
