#!/usr/bin/python3
"""Compare normlab's GEMM with OpenBLAS sgemm (through NumPy) on the encoder's shapes.

Shapes: the toy encoder (d_model 64, ffn 256; a batch of 32 sequences of lengths 1..64 packed into
~1040 tokens). Linear forward y = x W^T is `nt`, its input gradient dX = dY W is `nn`, its weight
gradient dW = dY^T X is `tn` (M = out features, K = tokens). Plus two larger square-ish products.

For each shape and thread count, runs `normlab bench gemm --json` and times numpy.matmul with the
same layouts (B.T / A.T views: NumPy hands the transpose flag to sgemm, nothing is copied) into a
preallocated output, the same way: median over `repeats` calls after warmup calls. The pair is run
`rounds` times, alternating, and the best round of each side is kept: the machine has 2 cores
shared with other jobs, and the least disturbed round is the one that measures the code.
ratio = ours / OpenBLAS in GFLOP/s (2*M*N*K / seconds); > 1 means normlab is faster.

--isa generic|avx2|avx512 runs normlab with NORMLAB_ISA set to that kernel path and OpenBLAS
with the matching kernel: OPENBLAS_CORETYPE=Haswell for avx2 (so the AVX2 path can be measured
against an AVX2 OpenBLAS on an AVX-512 machine), Nehalem (SSE only) for generic. Without --isa, or
with avx512, OpenBLAS runs with its own CPU detection. Either way the script re-executes itself
with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE set to exactly that (the machine may set them for
older OpenBLAS builds; they would force a kernel other than the one asked for). Threads are set
with threadpoolctl when it is installed, else with openblas_set_num_threads from the loaded
library. The CPU model, normlab's kernel path and OpenBLAS's core are printed (and kept in --json).

Usage: /usr/bin/python3 bench/bench_gemm.py [build/normlab] [--isa PATH] [--threads 1 2]
                                            [--repeats R] [--rounds N] [--only LABEL_TEXT]
                                            [--json OUT]
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

FORCED_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
# normlab kernel path -> the OpenBLAS core of the same instruction set (None: OpenBLAS detects).
OPENBLAS_CORE_FOR_ISA = {"generic": "Nehalem", "avx2": "Haswell", "avx512": None, None: None}


def isa_from_argv(argv):
    """--isa's value, read before argparse: OpenBLAS reads its environment when NumPy loads it."""
    for i, arg in enumerate(argv):
        if arg == "--isa" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--isa="):
            return arg.split("=", 1)[1]
    return None


WANTED_CORE = OPENBLAS_CORE_FOR_ISA.get(isa_from_argv(sys.argv[1:]))
if any(os.environ.get(name) != (WANTED_CORE if name == "OPENBLAS_CORETYPE" else None) for name in FORCED_ENV):
    env = {k: v for k, v in os.environ.items() if k not in FORCED_ENV}
    if WANTED_CORE is not None:
        env["OPENBLAS_CORETYPE"] = WANTED_CORE
    os.execve(sys.executable, [sys.executable] + sys.argv, env)

import numpy as np  # noqa: E402  (after the re-exec: OpenBLAS reads the environment when loaded)
import torch_malloc  # noqa: E402  (bench/torch_malloc.py)

torch_malloc.require_openblas("bench_gemm.py", modules=("numpy",))

TOKENS, D_MODEL, FFN = 1040, 64, 256
# (label, variant, M, K, N): C (M,N) = op(A) (M,K) @ op(B) (K,N)
MODEL_SHAPES = []
for name, c_in, c_out in (("qkv proj", D_MODEL, 3 * D_MODEL), ("out proj", D_MODEL, D_MODEL),
                          ("ffn1", D_MODEL, FFN), ("ffn2", FFN, D_MODEL)):
    MODEL_SHAPES.append((f"{name} fwd y=xW^T", "nt", TOKENS, c_in, c_out))
    MODEL_SHAPES.append((f"{name} dX=dY W", "nn", TOKENS, c_out, c_in))
    MODEL_SHAPES.append((f"{name} dW=dY^T X", "tn", c_out, TOKENS, c_in))
BIG_SHAPES = [("square 512", "nn", 512, 512, 512), ("1024x768x768", "nn", 1024, 768, 768),
              ("1024x768x768", "nt", 1024, 768, 768)]


class OpenBlas:
    """The OpenBLAS NumPy loaded: its name, and a way to set its thread count."""

    def __init__(self):
        self.controller = None
        try:
            import threadpoolctl
            self.controller = threadpoolctl.ThreadpoolController()
        except ImportError:
            pass
        paths = sorted({line.split()[-1] for line in open("/proc/self/maps")
                        if os.path.basename(line.split()[-1]).startswith("libopenblas")})
        if not paths:
            sys.exit("bench_gemm.py: NumPy does not use OpenBLAS here (no libopenblas mapped); "
                     "see numpy.show_config()")
        self.path = paths[0]
        self.lib = ctypes.CDLL(self.path)
        self.lib.openblas_get_config.restype = ctypes.c_char_p
        self.lib.openblas_get_corename.restype = ctypes.c_char_p

    def describe(self):
        text = (f"numpy {np.__version__} -> {self.path}: {self.lib.openblas_get_config().decode()}, "
                f"core {self.lib.openblas_get_corename().decode()}")
        if self.controller is not None:
            text += f"; threadpoolctl: {[i.get('internal_api') for i in self.controller.info()]}"
        return text

    def set_threads(self, n):
        if self.controller is not None:
            self.controller.limit(limits=n, user_api="blas")
        else:
            self.lib.openblas_set_num_threads(n)


def numpy_bench(variant, M, K, N, repeats):
    rng = np.random.default_rng(1234)
    if variant == "nn":
        a, b = rng.standard_normal((M, K), np.float32), rng.standard_normal((K, N), np.float32)
    elif variant == "nt":
        a, b = rng.standard_normal((M, K), np.float32), rng.standard_normal((N, K), np.float32).T
    else:
        a, b = rng.standard_normal((K, M), np.float32).T, rng.standard_normal((K, N), np.float32)
    c = np.empty((M, N), np.float32)
    for _ in range(max(3, repeats // 10)):
        np.matmul(a, b, out=c)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.matmul(a, b, out=c)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def normlab_env(isa):
    env = dict(os.environ)
    if isa is not None:
        env["NORMLAB_ISA"] = isa
    return env


def normlab_bench(binary, isa, variant, M, K, N, threads, repeats):
    cmd = [binary, "bench", "gemm", "--shape", f"{M},{K},{N}", "--variant", variant,
           "--threads", str(threads), "--repeats", str(repeats), "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=normlab_env(isa)).stdout
    return json.loads(out)["median_ms"]


def normlab_kernels(binary, isa):
    """The 'kernels: ...' line of `normlab --version` (exits with normlab's message if refused)."""
    run = subprocess.run([binary, "--version"], capture_output=True, text=True, env=normlab_env(isa))
    if run.returncode != 0:
        sys.exit(run.stderr.strip())
    return next((line for line in run.stdout.splitlines() if line.startswith("kernels:")), "kernels: ?")


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binary", nargs="?", default="build/normlab")
    parser.add_argument("--isa", choices=["generic", "avx2", "avx512"],
                        help="normlab kernel path (NORMLAB_ISA) and the matching OpenBLAS core")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", help="run only the shapes whose label contains this text")
    parser.add_argument("--json", help="also write all figures to this file")
    args = parser.parse_args()
    shapes = [s for s in MODEL_SHAPES + BIG_SHAPES if args.only is None or args.only in s[0]]

    blas = OpenBlas()
    kernels = normlab_kernels(args.binary, args.isa)
    print(f"CPU: {cpu_model()}; normlab {kernels}")
    print(blas.describe())
    print(f"load average at start: {os.getloadavg()[0]:.2f}; median of {args.repeats} calls, "
          f"best of {args.rounds} rounds; ratio = ours / OpenBLAS GFLOP/s")
    rows = []
    for threads in args.threads:
        blas.set_threads(threads)
        header = f"{'threads ' + str(threads):<22} {'var':>3} {'M,K,N':>15} | {'ours':>7} {'OpenBLAS':>8} GFLOP/s | {'ratio':>5}"
        print()
        print(header)
        print("-" * len(header))
        model_ratios = []
        for label, variant, M, K, N in shapes:
            ours_ms, theirs_ms = [], []
            for _ in range(args.rounds):
                # OpenBLAS's idle threads spin for a moment after a call: let them go to sleep
                # before normlab's threads need the cores.
                time.sleep(0.2)
                ours_ms.append(normlab_bench(args.binary, args.isa, variant, M, K, N, threads, args.repeats))
                theirs_ms.append(numpy_bench(variant, M, K, N, args.repeats))
            flops = 2.0 * M * N * K
            ours = flops / (min(ours_ms) * 1e-3) / 1e9
            theirs = flops / (min(theirs_ms) * 1e-3) / 1e9
            ratio = ours / theirs
            if (label, variant, M, K, N) in MODEL_SHAPES:
                model_ratios.append(ratio)
            rows.append({"label": label, "variant": variant, "shape": [M, K, N], "threads": threads,
                         "normlab_ms": min(ours_ms), "openblas_ms": min(theirs_ms),
                         "normlab_gflops": ours, "openblas_gflops": theirs, "ratio": ratio})
            print(f"{label:<22} {variant:>3} {f'{M},{K},{N}':>15} | {ours:>7.1f} {theirs:>8.1f}         | "
                  f"{ratio:>5.2f}", flush=True)
        if model_ratios:
            geomean = float(np.exp(np.mean(np.log(model_ratios))))
            print(f"model shapes: geometric mean ratio {geomean:.2f}, min {min(model_ratios):.2f}")
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu_model(), "normlab_kernels": kernels, "blas": blas.describe(),
                       "repeats": args.repeats, "rounds": args.rounds, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
