#!/usr/bin/env python3
"""Sums an ncu CSV of one profiled step (bench/train_step.lua with TC_BENCH_PROFILE_STEP=1 under
`ncu --profile-from-start off --graph-profiling node --metrics gpu__time_duration.sum --csv
--page raw`): kernel count, total device time, and the time per kernel name, largest first.
Usage: ncu_step.py FILE.csv [TOP (40)]"""
import csv
import re
import sys
from collections import defaultdict


def short(name):
    name = re.sub(r"\(.*", "", name)  # drop the argument list
    return name[:90]


def main():
    path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f)]
    head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
    cols = rows[head]
    name_at, time_at = cols.index("Kernel Name"), cols.index("gpu__time_duration.sum")
    unit = rows[head + 1][time_at]
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}[unit]
    by_name, count = defaultdict(lambda: [0, 0.0]), 0
    total = 0.0
    for r in rows[head + 2:]:
        if len(r) <= time_at or not r[time_at]:
            continue
        us = float(r[time_at].replace(",", "")) * scale
        key = short(r[name_at])
        by_name[key][0] += 1
        by_name[key][1] += us
        total += us
        count += 1
    print(f"kernels {count}, device time {total / 1e3:.3f} ms (sum of kernel durations)")
    for key, (n, us) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"{us / 1e3:8.3f} ms {n:5d} x {us / n:7.2f} us  {key}")


if __name__ == "__main__":
    main()
