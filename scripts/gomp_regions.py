#!/usr/bin/env python3
# Summarizes scripts/gomp_regions.c's output: per outlined function (named from the binary's
# symbols), calls per step and the medians per call of wall time, each thread's busy time, the
# second thread's start lag and the serial gap before the region; then the per-step totals.
# Medians, not sums, so that a few preempted regions on a noisy machine do not dominate.
#   usage: gomp_regions.py REGIONS.txt BINARY STEPS [--trace FIRST COUNT]
import sys, subprocess, bisect, re, statistics as st
from collections import defaultdict
shim, binary, steps = sys.argv[1], sys.argv[2], float(sys.argv[3])
trace = sys.argv[5:7] if len(sys.argv) > 4 and sys.argv[4] == '--trace' else None
syms = []
for line in subprocess.run(['nm', '-C', '--defined-only', binary], capture_output=True, text=True).stdout.splitlines():
    p = line.split(' ', 2)
    if len(p) == 3 and p[1] in 'tTwW': syms.append((int(p[0], 16), p[2]))
syms.sort(); addrs = [a for a, _ in syms]
groups = defaultdict(list); names = {}
lines = open(shim).read().splitlines()
for line in lines:
    f, off, wall, b0, b1, lag, gap = line.split()
    key = (f, off)
    if key not in names:
        o = int(off, 16); name = f
        if not f.startswith('/lib') and not f.startswith('/usr'):
            i = bisect.bisect_right(addrs, o) - 1; name = syms[i][1] + ' +' + hex(o - syms[i][0])
        name = name.replace('(anonymous namespace)::', '').replace('normlab::', '').replace('kernels::', '')
        names[key] = re.sub(r'\(.*?\)', '', name)[:100]
    groups[key].append(tuple(map(float, (wall, b0, b1, lag, gap))))
rows = []
for key, recs in groups.items():
    n = len(recs) / steps
    med = [st.median(r[i] for r in recs) for i in range(5)]
    rows.append((med[0] * n, n, med, names[key]))
rows.sort(reverse=True)
print(f"{'us/step':>8} {'calls':>6} {'wall':>7} {'busy0':>7} {'busy1':>7} {'lag1':>6} {'gap':>6}  name   (medians per call, us)")
tot = [0]*5
for total, n, med, name in rows:
    for i in range(5): tot[i] += med[i] * n
    if total < 10: continue
    print(f"{total:8.1f} {n:6.1f} {med[0]:7.2f} {med[1]:7.2f} {med[2]:7.2f} {med[3]:6.2f} {med[4]:6.2f}  {name}")
print(f"per step: wall {tot[0]:.0f}  busy0 {tot[1]:.0f}  busy1 {tot[2]:.0f}  lag1 {tot[3]:.0f}  gaps {tot[4]:.0f} us")
if trace:  # the regions in call order, one line each
    first, count = int(trace[0]), int(trace[1])
    for i, line in enumerate(lines[first:first + count]):
        f, off, wall, b0, b1, lag, gap = line.split()
        print(f"{first + i:6d} gap {float(gap):7.1f} wall {float(wall):7.1f} busy {float(b0):7.1f} {float(b1):7.1f}  {names[(f, off)]}")
