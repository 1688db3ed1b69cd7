#!/usr/bin/python3
"""Equal work: one training step on 8 sequences of one length L, normlab against PyTorch.

With every sequence of the same length there is no padding, so PyTorch computes exactly what
normlab computes and the comparison measures the kernels, not the packing. The model is
configs/bench-step.json's (d_model 64, 4 heads, 4 layers, ffn 256, pre-LN with a final norm,
Adam); for each L the script runs, in one process and one after the other:

  torch      the step of bench_step_torch.py (nn.TransformerEncoderLayer, norm_first) on batches
             of 8 x L, and its attention core alone: softmax(q k^T / sqrt(hd)) v, forward and
             backward, on (8, 4, L, 16) tensors (the bmm, softmax, bmm that nn.MultiheadAttention
             runs between its projections)
  normlab    `normlab bench step --config configs/bench-step.json --set ...` with batches of 8 x L,
             and `normlab bench attention --shape 8,L,64,4` (the same attention core)

Attention's share of a step = layers x (attention forward+backward) / step, for each side. The
bound is the time of the step's counted products (bench step's flops_per_step) at this path's
fastest 1-thread 512^3 GEMM rate seen in the run (times the threads), the ceiling torch's step over
it: about the largest speed-up any kernels could reach, since the step also has norms, softmax,
exps and Adam, and its products are smaller than 512^3 (so they run no faster). Medians
throughout; the default is 1 thread; the machine should be idle (`uptime`).

--isa sets NORMLAB_ISA for the normlab runs only. PyTorch always runs at its best: the script
re-executes itself without OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE (a machine that sets them, say
to Haswell, would hold OpenBLAS to AVX2 and a smaller L2 blocking), and prints that it did.
--torch-isa avx2 holds PyTorch to AVX2 instead (OpenBLAS's Haswell kernels, oneDNN and ATen at AVX2):
with --isa avx2 that is the comparison a CPU without AVX-512 would see. It is not PyTorch's best on
an AVX-512 machine, and the script says which it ran.
--baseline BIN times a second normlab binary in the same run (its step beside ours for every L),
so a before/after table comes from one run. --rounds R repeats every L R times, the order of the
sides rotating each round, and reports each time's median over the rounds and each speed-up as the
median over the rounds of that round's torch step / normlab step (on a shared machine the two
sides of one round see the same neighbours).

Usage: /usr/bin/python3 bench/bench_equal_work.py [build/normlab] [--lengths 64 128 256 512 1024]
                 [--threads 1] [--steps 10] [--isa avx2|avx512] [--torch-isa native|avx2] [--baseline BIN] [--rounds 1] [--json OUT]
"""
import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

# OpenBLAS, oneDNN and ATen read these when torch loads, so they are set or dropped by
# re-executing before the import.
OPENBLAS_LIMITS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def torch_isa_from_argv(argv):
    """--torch-isa's value, read before argparse runs (it decides the environment torch loads in)."""
    for i, arg in enumerate(argv):
        if arg == "--torch-isa" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--torch-isa="):
            return arg.split("=", 1)[1]
    return "native"


# --torch-isa avx2: PyTorch held to AVX2 everywhere, as on a CPU without AVX-512: OpenBLAS's
# Haswell kernels, oneDNN's and ATen's AVX2 code.
TORCH_AVX2 = {"OPENBLAS_CORETYPE": "Haswell", "DNNL_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
if torch_isa_from_argv(sys.argv[1:]) == "avx2":
    if any(os.environ.get(name) != value for name, value in TORCH_AVX2.items()) or "OPENBLAS_L2_SIZE" in os.environ:
        os.environ.pop("OPENBLAS_L2_SIZE", None)
        os.environ.update(TORCH_AVX2)
        os.execv(sys.executable, [sys.executable] + sys.argv)
elif any(name in os.environ for name in OPENBLAS_LIMITS):
    dropped = ",".join("{}={}".format(name, os.environ.pop(name))
                       for name in OPENBLAS_LIMITS if name in os.environ)
    os.environ["BENCH_EQUAL_WORK_DROPPED"] = dropped
    os.execv(sys.executable, [sys.executable] + sys.argv)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_step_torch  # noqa: E402
import torch_malloc  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

BATCH, D_MODEL, HEADS, LAYERS, FFN, VOCAB = 8, 64, 4, 4, 256, 32


def cpu_model():
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def torch_step(L, threads, steps):
    args = argparse.Namespace(d_model=D_MODEL, heads=HEADS, layers=LAYERS, ffn=FFN, vocab=VOCAB, classes=VOCAB,
                              batch=BATCH, min_len=L, max_len=L, norm_first=True, lr=1e-3, steps=steps,
                              warmup=3, pool=4, seed=1234)
    pool = bench_step_torch.make_batch_pool(args, torch.Generator().manual_seed(args.seed))
    return bench_step_torch.bench_threads(args, threads, pool)["step_ms"]


def torch_attention(L, threads, repeats):
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(7)
    hd = D_MODEL // HEADS
    q, k, v = (torch.randn(BATCH, HEADS, L, hd, generator=gen, requires_grad=True) for _ in range(3))
    dout = torch.randn(BATCH, HEADS, L, hd, generator=gen)
    scale = 1.0 / math.sqrt(hd)

    def forward_backward():
        p = F.softmax(torch.matmul(q, k.transpose(-2, -1)) * scale, dim=-1)
        out = torch.matmul(p, v)
        torch.autograd.grad(out, (q, k, v), dout)

    for _ in range(2):
        forward_backward()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        forward_backward()
        times.append(1e3 * (time.perf_counter() - start))
    return statistics.median(times)


def run_json(command, isa=None):
    env = dict(os.environ)
    if isa:
        env["NORMLAB_ISA"] = isa
    proc = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        sys.exit("{} exited with {}: {}".format(" ".join(command), proc.returncode, proc.stderr.strip()))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def normlab_step(binary, config, L, threads, steps, isa):
    sets = ["task.min_len={}".format(L), "task.max_len={}".format(L), "task.eval_max_len={}".format(L),
            "model.max_len={}".format(L), "train.batch_size={}".format(BATCH)]
    command = [binary, "bench", "step", "--config", config, "--threads", str(threads), "--repeats", str(steps),
               "--json"]
    for s in sets:
        command += ["--set", s]
    return run_json(command, isa)


def normlab_attention(binary, L, threads, repeats, isa):
    return run_json([binary, "bench", "attention", "--shape", "{},{},{},{}".format(BATCH, L, D_MODEL, HEADS),
                     "--threads", str(threads), "--repeats", str(repeats), "--json"], isa)["forward_backward_ms"]


def measure_length(args, L):
    """Every figure of one length: each side's step and attention core, medians over args.rounds rounds
    whose order of sides rotates."""
    repeats = max(3, min(50, 20000 // L))
    bound = {"flops": 0.0, "gemm_gflops": 0.0}

    def ours():
        step = normlab_step(args.binary, args.config, L, args.threads, args.steps, args.isa)
        # the fastest 1-thread GEMM rate seen: a slower measurement is a noisier one, not a lower bound
        bound["flops"] = step["flops_per_step"]
        bound["gemm_gflops"] = max(bound["gemm_gflops"], step["gemm_1t_gflops"])
        return step["step_ms"], normlab_attention(args.binary, L, args.threads, repeats, args.isa)

    sides = {
        "normlab": ours,
        "torch": lambda: (torch_step(L, args.threads, args.steps), torch_attention(L, args.threads, repeats)),
    }
    if args.baseline:
        sides["baseline"] = lambda: (
            normlab_step(args.baseline, args.config, L, args.threads, args.steps, args.isa)["step_ms"],
            normlab_attention(args.baseline, L, args.threads, repeats, args.isa))
    names = list(sides)
    figures = {name: ([], []) for name in names}
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            step_ms, attention_ms = sides[name]()
            figures[name][0].append(step_ms)
            figures[name][1].append(attention_ms)
    result = {name: (statistics.median(steps), statistics.median(attention)) for name, (steps, attention) in
              figures.items()}
    # speed-ups: torch's step over each normlab binary's within a round, median over the rounds
    for name in names:
        if name != "torch":
            ratios = [t / n for t, n in zip(figures["torch"][0], figures[name][0])]
            result[name + "_speedup"] = statistics.median(ratios)
    # The step's counted products (bench step's flops_per_step) at the path's 1-thread 512^3 GEMM
    # rate times the threads: a lower bound on the step while no product runs faster than 512^3,
    # so torch's step over it is about the largest speed-up any kernels could reach here.
    result["bound_ms"] = bound["flops"] / (bound["gemm_gflops"] * 1e6 * args.threads)
    result["ceiling"] = result["torch"][0] / result["bound_ms"]
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("binary", nargs="?", default="build/normlab")
    parser.add_argument("--config", default="configs/bench-step.json")
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256, 512, 1024])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per side and length")
    parser.add_argument("--isa", choices=["generic", "avx2", "avx512"], help="NORMLAB_ISA for the normlab runs")
    parser.add_argument("--torch-isa", choices=["native", "avx2"], default="native",
                        help="native (default): PyTorch at its best on this CPU; avx2: PyTorch held to AVX2, "
                             "the like-for-like partner of --isa avx2 on an AVX-512 machine")
    parser.add_argument("--baseline", help="a second normlab binary, timed in the same run")
    parser.add_argument("--rounds", type=int, default=1, help="measurements of every length (medians)")
    parser.add_argument("--json", help="also write all figures to this file")
    torch_malloc.add_argument(parser)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    torch_malloc.reexec_with_tunables(args)
    torch_malloc.require_openblas("bench_equal_work.py")
    torch.set_num_interop_threads(1)

    rows = []
    kernels = run_json([args.binary, "bench", "attention", "--shape", "1,1,4,1", "--repeats", "1", "--json"],
                       args.isa)["kernels"]
    print("CPU {}; normlab kernels {}; torch {}; {} thread(s) ({} on both sides); 8 sequences of L tokens, "
          "d_model 64, 4 heads, 4 layers; median ms over {} round(s)".format(
              cpu_model(), kernels, torch.__version__, args.threads, torch_malloc.openmp_wait(), args.rounds))
    dropped = os.environ.get("BENCH_EQUAL_WORK_DROPPED")
    if args.torch_isa == "avx2":
        print("torch side: held to AVX2 ({}); GLIBC_TUNABLES={}".format(
            " ".join("{}={}".format(name, value) for name, value in TORCH_AVX2.items()),
            os.environ.get("GLIBC_TUNABLES", "(glibc defaults)")))
    else:
        print("torch side: OpenBLAS at its defaults{}; GLIBC_TUNABLES={}".format(
            " (unset for this run: {})".format(dropped) if dropped else "",
            os.environ.get("GLIBC_TUNABLES", "(glibc defaults)")))
    header = "{:>6} | {:>10} {:>10} {:>8} | {:>10} {:>10} {:>9} {:>9} | {:>8} {:>8}".format(
        "L", "normlab", "torch", "speed-up", "attn ours", "attn torch", "share us", "share pt", "bound", "ceiling")
    if args.baseline:
        header += " | {:>10} {:>8} {:>10}".format("baseline", "speed-up", "attn base")
    print(header)
    for L in args.lengths:
        figures = measure_length(args, L)
        (ours, ours_attention), (theirs, theirs_attention) = figures["normlab"], figures["torch"]
        row = {
            "L": L,
            "normlab_step_ms": ours,
            "torch_step_ms": theirs,
            "speedup": figures["normlab_speedup"],
            "normlab_attention_ms": ours_attention,
            "torch_attention_ms": theirs_attention,
            "normlab_attention_share": LAYERS * ours_attention / ours,
            "torch_attention_share": LAYERS * theirs_attention / theirs,
            "bound_ms": figures["bound_ms"],
            "ceiling": figures["ceiling"],
        }
        line = "{:6d} | {:10.2f} {:10.2f} {:7.2f}x | {:10.3f} {:10.3f} {:8.0f}% {:8.0f}% | {:8.2f} {:7.2f}x".format(
            L, row["normlab_step_ms"], row["torch_step_ms"], row["speedup"], row["normlab_attention_ms"],
            row["torch_attention_ms"], 100 * row["normlab_attention_share"], 100 * row["torch_attention_share"],
            row["bound_ms"], row["ceiling"])
        if args.baseline:
            base, base_attention = figures["baseline"]
            row.update({"baseline_step_ms": base, "baseline_speedup": figures["baseline_speedup"],
                        "baseline_attention_ms": base_attention})
            line += " | {:10.2f} {:7.2f}x {:10.3f}".format(base, row["baseline_speedup"], base_attention)
        rows.append(row)
        print(line, flush=True)
    print("attn = the attention core, forward+backward, per layer; share = 4 layers x attn / step; speed-up = "
          "median over the rounds of torch step / normlab step")
    print("bound = the step's counted matrix and attention products (bench step's flops_per_step) at this path's "
          "fastest 1-thread 512^3 GEMM rate x threads (a lower bound on the step while no product runs faster than "
          "512^3); ceiling = torch step / bound, about the largest speed-up any kernels could show in this run")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"cpu": cpu_model(), "threads": args.threads, "torch": torch.__version__, "isa": kernels,
                       "rounds": args.rounds, "openblas_unset": dropped, "torch_isa": args.torch_isa, "rows": rows}, out, indent=1)


if __name__ == "__main__":
    main()
