#!/usr/bin/python3
"""Compare normlab's LayerNorm kernels with PyTorch's CPU LayerNorm.

For each shape (B, T, C) and thread count, runs `normlab bench layernorm --json` and times
torch.nn.functional.layer_norm the same way: median over `repeats` calls after warmup calls,
forward alone (under no_grad) and forward+backward (torch.autograd.grad of the output with a fixed
dout w.r.t. x, weight and bias: fresh gradients, no accumulation into .grad).
The ratio column is torch_ms / normlab_ms: above 1 means normlab is faster.
On a shared machine, --rounds N alternates normlab and torch N times per configuration and keeps
each side's lowest median (default 3), so a burst of load hits both sides alike. At 1 thread the
script also compares CPU time of the calling thread (normlab's *_cpu_ms, Python's
time.thread_time): when other processes compete for the cores, wall time counts the scheduler's
slices given to them, CPU time does not. At 2 threads only wall time means something. Under such
load, also set OMP_WAIT_POLICY=PASSIVE (inherited by both sides): libgomp's default spin-waiting
otherwise lets a waiting thread burn whole scheduler slices while the thread it waits for is
descheduled (seen as 0.3 ms kernels taking 12 ms).

PyTorch allocates its outputs and gradients afresh on every call. With glibc's defaults a 25 MB
buffer is mmap'ed and returned to the system on each call, so every call pays page faults for it
(very expensive in a VM: it can make torch's forward+backward 10-50x slower). That is allocator
behaviour, not LayerNorm, so by default the script re-executes itself with GLIBC_TUNABLES raising
glibc's mmap and trim thresholds, and torch reuses its heap memory like normlab does.
--default-malloc measures torch with glibc's defaults instead.

Usage: /usr/bin/python3 bench/bench_layernorm.py [build/normlab] [--repeats R] [--json OUT]
           [--threads 1,2] [--shapes "32,64,512;64,128,768"] [--default-malloc]
"""
import argparse
import json
import os
import statistics
import subprocess
import time

import torch
import torch.nn.functional as F

import torch_malloc  # bench/torch_malloc.py

SHAPES = [(32, 64, 512), (64, 128, 768)]
THREADS = [1, 2]
EPS = 1e-12
# 32 MiB is glibc's largest mmap threshold on 64-bit: allocations up to that size stay in the heap.


def torch_bench(B, T, C, threads, repeats):
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(B, T, C, generator=g)
    dout = torch.randn(B, T, C, generator=g)
    weight = 1.0 + 0.1 * torch.randn(C, generator=g)
    bias = 0.1 * torch.randn(C, generator=g)
    warmup = max(2, repeats // 10)

    def forward():
        with torch.no_grad():
            F.layer_norm(x, (C,), weight, bias, EPS)

    xr = x.clone().requires_grad_(True)
    wr = weight.clone().requires_grad_(True)
    br = bias.clone().requires_grad_(True)

    def forward_backward():
        y = F.layer_norm(xr, (C,), wr, br, EPS)
        torch.autograd.grad(y, (xr, wr, br), dout)

    def median_ms(body):  # (wall, CPU time of this thread), medians in ms
        for _ in range(warmup):
            body()
        wall, cpu = [], []
        for _ in range(repeats):
            start, start_cpu = time.perf_counter(), time.thread_time()
            body()
            cpu.append((time.thread_time() - start_cpu) * 1e3)
            wall.append((time.perf_counter() - start) * 1e3)
        return statistics.median(wall), statistics.median(cpu)

    forward_ms, forward_cpu_ms = median_ms(forward)
    forward_backward_ms, forward_backward_cpu_ms = median_ms(forward_backward)
    return {"forward_ms": forward_ms, "forward_backward_ms": forward_backward_ms,
            "forward_cpu_ms": forward_cpu_ms, "forward_backward_cpu_ms": forward_backward_cpu_ms}


def normlab_bench(binary, B, T, C, threads, repeats):
    cmd = [binary, "bench", "layernorm", "--shape", f"{B},{T},{C}", "--threads", str(threads),
           "--repeats", str(repeats), "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binary", nargs="?", default="build/normlab")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; the best median is kept")
    parser.add_argument("--threads", default=",".join(map(str, THREADS)), help="comma-separated thread counts")
    parser.add_argument("--shapes", default=";".join(",".join(map(str, s)) for s in SHAPES),
                        help="semicolon-separated B,T,C shapes")
    parser.add_argument("--json", help="also write all figures to this file")
    torch_malloc.add_argument(parser)
    args = parser.parse_args()
    torch_malloc.reexec_with_tunables(args)
    torch_malloc.require_openblas("bench_layernorm.py")

    rows = []
    malloc = os.environ.get("GLIBC_TUNABLES", "glibc defaults")
    print(f"torch {torch.__version__}, best of {args.rounds} rounds of the median of {args.repeats}, eps {EPS}; "
          "ratio = torch / normlab (>1: normlab faster)")
    print(f"malloc for torch: {malloc}")
    header = f"{'shape':>14} {'thr':>3} | {'fwd normlab':>11} {'fwd torch':>9} {'ratio':>5} | " \
             f"{'f+b normlab':>11} {'f+b torch':>9} {'ratio':>5} | {'fwd GB/s':>8}"
    print(header)
    print("-" * len(header))
    shapes = [tuple(int(v) for v in shape.split(",")) for shape in args.shapes.split(";")]
    thread_counts = [int(v) for v in args.threads.split(",")]
    for B, T, C in shapes:
        for threads in thread_counts:
            ours, theirs = None, None
            for _ in range(args.rounds):
                o = normlab_bench(args.binary, B, T, C, threads, args.repeats)
                t = torch_bench(B, T, C, threads, args.repeats)
                ours = o if ours is None else {k: min(ours[k], o[k]) if k.endswith("_ms") else ours[k] for k in ours}
                theirs = t if theirs is None else {k: min(theirs[k], t[k]) for k in theirs}
            ours["forward_gbps"] = ours["forward_bytes"] / (ours["forward_ms"] * 1e-3) / 1e9
            row = {"shape": [B, T, C], "threads": threads, "repeats": args.repeats, "rounds": args.rounds,
                   "normlab_forward_ms": ours["forward_ms"], "torch_forward_ms": theirs["forward_ms"],
                   "normlab_forward_backward_ms": ours["forward_backward_ms"],
                   "torch_forward_backward_ms": theirs["forward_backward_ms"],
                   "normlab_forward_gbps": ours["forward_gbps"],
                   "normlab_forward_cpu_ms": ours["forward_cpu_ms"], "torch_forward_cpu_ms": theirs["forward_cpu_ms"],
                   "normlab_forward_backward_cpu_ms": ours["forward_backward_cpu_ms"],
                   "torch_forward_backward_cpu_ms": theirs["forward_backward_cpu_ms"]}
            rows.append(row)
            print(f"{f'{B}x{T}x{C}':>14} {threads:>3} | "
                  f"{ours['forward_ms']:>8.3f} ms {theirs['forward_ms']:>6.3f} ms "
                  f"{theirs['forward_ms'] / ours['forward_ms']:>5.2f} | "
                  f"{ours['forward_backward_ms']:>8.3f} ms {theirs['forward_backward_ms']:>6.3f} ms "
                  f"{theirs['forward_backward_ms'] / ours['forward_backward_ms']:>5.2f} | "
                  f"{ours['forward_gbps']:>8.1f}", flush=True)
            if threads == 1:
                print(f"{'(1-thread CPU)':>18} | "
                      f"{ours['forward_cpu_ms']:>8.3f} ms {theirs['forward_cpu_ms']:>6.3f} ms "
                      f"{theirs['forward_cpu_ms'] / ours['forward_cpu_ms']:>5.2f} | "
                      f"{ours['forward_backward_cpu_ms']:>8.3f} ms {theirs['forward_backward_cpu_ms']:>6.3f} ms "
                      f"{theirs['forward_backward_cpu_ms'] / ours['forward_backward_cpu_ms']:>5.2f} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
