#!/usr/bin/python3
"""PyTorch reference for `normlab bench step`: the time of one training step of a small encoder.

Model: token Embedding(vocab, d_model) + sinusoidal positions + nn.TransformerEncoder of `layers`
post-LN (or --norm-first pre-LN) nn.TransformerEncoderLayer(d_model, heads, ffn, dropout 0, relu,
batch_first) + a per-token Linear(d_model, classes). A batch holds `batch` sequences with lengths
uniform in [min_len, max_len], padded to the batch maximum with src_key_padding_mask; the loss is
cross-entropy over real tokens only (padding targets are ignore_index); the optimizer is Adam.

A timed step is zero_grad + forward + loss + backward + optimizer step. Batches come from a pool
generated up front, so data generation is not timed. step_ms is the median over the timed steps;
tokens_per_s counts REAL tokens only: real tokens of the timed steps / their total time.

Like bench/bench_layernorm.py, the script re-executes itself with GLIBC_TUNABLES raising glibc's
mmap and trim thresholds (--default-malloc: glibc's defaults). PyTorch allocates every activation
and gradient afresh; with the defaults, each large one is mmap'ed and unmapped per step and pays
page faults (measured here: torch's 1-thread median 98 ms/step with the defaults, 51 ms with the
thresholds raised). The reference should be PyTorch at its best, not its allocator at its worst.
The normlab child inherits the same environment (it sets its own mallopt thresholds anyway).
With --normlab, `BIN bench step` times as many steps after as many untimed ones as PyTorch does
(--steps, --warmup), each side on its own batches of the same lengths' distribution.

On a shared, noisy machine a run's ratio moves with the machine's phases, which can change between
the PyTorch part and the normlab part of one run. --rounds R repeats both R times, alternating which
side goes first, and reports every round's best-vs-best ratio and their median; the detailed table
is that of the median round.

    /usr/bin/python3 bench/bench_step_torch.py [--threads 1 2] [--json]
    /usr/bin/python3 bench/bench_step_torch.py --normlab build/normlab --config configs/bench-step.json [--rounds 5]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_malloc  # bench/torch_malloc.py

IGNORE_INDEX = -100


class TokenEncoder(nn.Module):
    def __init__(self, vocab, d_model, heads, layers, ffn, classes, norm_first, max_len):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=ffn, dropout=0.0,
                                           activation="relu", batch_first=True,
                                           norm_first=norm_first)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, classes)
        self.register_buffer("positions", sinusoidal_positions(max_len, d_model))

    def forward(self, tokens, padding_mask):  # tokens (B, T) int64, padding_mask (B, T) bool
        x = self.embed(tokens) + self.positions[: tokens.shape[1]]
        x = self.encoder(x, src_key_padding_mask=padding_mask)
        return self.head(x)  # (B, T, classes)


def sinusoidal_positions(max_len, d_model):
    """pe[t, 2i] = sin(t / 10000^(2i/d)), pe[t, 2i+1] = cos(t / 10000^(2i/d)); shape (max_len, d)."""
    position = torch.arange(max_len, dtype=torch.float32)[:, None]
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * inv_freq)
    pe[:, 1::2] = torch.cos(position * inv_freq)[:, : d_model // 2]
    return pe


def make_batch_pool(args, gen):
    """Pool of padded batches; the target of a token is the token itself (a learnable task)."""
    pool = []
    for _ in range(args.pool):
        lengths = torch.randint(args.min_len, args.max_len + 1, (args.batch,), generator=gen)
        t_max = int(lengths.max())
        tokens = torch.randint(0, args.vocab, (args.batch, t_max), generator=gen)
        padding_mask = torch.arange(t_max)[None, :] >= lengths[:, None]  # True = padding
        tokens = tokens.masked_fill(padding_mask, 0)
        targets = (tokens % args.classes).masked_fill(padding_mask, IGNORE_INDEX)
        pool.append((tokens, padding_mask, targets, int(lengths.sum())))
    return pool


def bench_threads(args, threads, pool):
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)  # same initial weights for every thread count
    model = TokenEncoder(args.vocab, args.d_model, args.heads, args.layers, args.ffn, args.classes,
                         args.norm_first, args.max_len)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    def step(batch):
        tokens, padding_mask, targets, _ = batch
        optimizer.zero_grad(set_to_none=True)
        logits = model(tokens, padding_mask)
        loss = F.cross_entropy(logits.reshape(-1, args.classes), targets.reshape(-1),
                               ignore_index=IGNORE_INDEX)
        loss.backward()
        optimizer.step()
        return float(loss)

    losses = []
    for i in range(args.warmup):
        losses.append(step(pool[i % len(pool)]))
    times, real_tokens = [], 0
    for i in range(args.steps):
        batch = pool[(args.warmup + i) % len(pool)]
        start = time.perf_counter()
        losses.append(step(batch))
        times.append(time.perf_counter() - start)
        real_tokens += batch[3]
    return {
        "threads": threads,
        "step_ms": 1e3 * statistics.median(times),
        "step_ms_min": 1e3 * min(times),
        "tokens_per_s": real_tokens / sum(times),
        "real_tokens_per_step": real_tokens / args.steps,
        "loss_first": losses[0],
        "loss_last": losses[-1],
    }


def peak_rss_mib():
    """This process's peak resident set size so far, MiB: VmHWM, which starts afresh at exec
    (getrusage's ru_maxrss does not, so a child would report this script's size)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def current_rss_mib():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def run_normlab(args, threads):
    """Result dict from `BIN bench step --config FILE --threads N --json`, or None with a message."""
    # The same number of timed and untimed steps as the PyTorch side.
    command = [args.normlab, "bench", "step", "--config", args.config, "--threads", str(threads),
               "--repeats", str(args.steps), "--warmup", str(args.warmup), "--json"]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=args.normlab_timeout)
    except (OSError, subprocess.TimeoutExpired) as error:
        print("normlab: cannot run {}: {}".format(" ".join(command), error), file=sys.stderr)
        return None
    if proc.returncode != 0:
        print("normlab: {} exited with {}: {}".format(" ".join(command), proc.returncode,
                                                      proc.stderr.strip() or proc.stdout.strip()),
              file=sys.stderr)
        return None
    # The JSON object is the last non-empty line that parses (log lines may precede it).
    for line in reversed(proc.stdout.strip().splitlines()):
        try:
            result = json.loads(line)
        except ValueError:
            continue
        if isinstance(result, dict) and "step_ms" in result and "tokens_per_s" in result:
            return result
    try:
        result = json.loads(proc.stdout)
        if isinstance(result, dict) and "step_ms" in result and "tokens_per_s" in result:
            return result
    except ValueError:
        pass
    print("normlab: no JSON with step_ms and tokens_per_s in the output of {}".format(" ".join(command)),
          file=sys.stderr)
    return None


def main():
    parser = argparse.ArgumentParser(description="PyTorch reference for `normlab bench step`.")
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--ffn", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=32)
    parser.add_argument("--classes", type=int, default=32)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--min-len", type=int, default=1)
    parser.add_argument("--max-len", type=int, default=64)
    parser.add_argument("--norm-first", action="store_true", help="pre-LN instead of post-LN")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=30, help="timed steps")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--pool", type=int, default=16, help="pre-generated batches cycled through")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--json", action="store_true", help="print one JSON object only")
    parser.add_argument("--normlab", metavar="BIN", help="also time `BIN bench step` and compare")
    parser.add_argument("--config", metavar="FILE", help="config for `BIN bench step`")
    parser.add_argument("--normlab-timeout", type=float, default=600.0)
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat PyTorch and normlab this many times, alternating which goes first, and "
                             "report the median best-vs-best ratio (with --normlab)")
    parser.add_argument("--target", type=float, default=4.0,
                        help="the best-vs-best throughput ratio to print beside the result (4 for "
                             "configs/bench-step.json, 2 for configs/bench-step-large.json)")
    torch_malloc.add_argument(parser)
    args = parser.parse_args()
    torch_malloc.reexec_with_tunables(args)
    torch_malloc.require_openblas("bench_step_torch.py")
    if args.normlab and not args.config:
        parser.error("--normlab needs --config")
    if not (1 <= args.min_len <= args.max_len) or args.steps < 1 or args.d_model % args.heads:
        parser.error("need 1 <= min-len <= max-len, steps >= 1, heads dividing d-model")
    if args.rounds < 1 or (args.rounds > 1 and not args.normlab):
        parser.error("--rounds must be >= 1, and more than 1 only with --normlab")

    torch.set_num_interop_threads(1)
    rss_after_import = current_rss_mib()
    pool = make_batch_pool(args, torch.Generator().manual_seed(args.seed))

    def torch_side():
        return [bench_threads(args, threads, pool) for threads in args.threads]

    def normlab_side():
        ours = {}
        if args.normlab:
            for threads in args.threads:
                result = run_normlab(args, threads)
                if result is not None:
                    ours[threads] = result
        return ours

    def best_ratio(results, ours):
        if not ours:
            return float("nan")
        return max(m["tokens_per_s"] for m in ours.values()) / max(r["tokens_per_s"] for r in results)

    rounds = []  # (torch results, normlab results, best-vs-best ratio) per round
    for index in range(args.rounds):
        if index % 2 == 0:
            results = torch_side()
            ours = normlab_side()
        else:
            ours = normlab_side()
            results = torch_side()
        rounds.append((results, ours, best_ratio(results, ours)))
    torch_peak_rss = peak_rss_mib()
    # The round whose ratio is the median (the lower middle one for an even count) is shown in full.
    by_ratio = sorted(range(len(rounds)), key=lambda i: rounds[i][2])
    results, ours, _ = rounds[by_ratio[(len(rounds) - 1) // 2]]
    ratios = [r[2] for r in rounds]
    best = min(results, key=lambda r: r["step_ms"])

    config = {key: getattr(args, key) for key in ("d_model", "heads", "layers", "ffn", "vocab",
                                                  "classes", "batch", "min_len", "max_len",
                                                  "norm_first", "lr", "steps", "warmup", "seed")}
    if args.json:
        report = {"torch_version": torch.__version__, "config": config, "torch": results,
                  "best_threads": best["threads"], "torch_peak_rss_mib": torch_peak_rss,
                  "torch_rss_after_import_mib": rss_after_import, "openmp_wait": torch_malloc.openmp_wait()}
        if args.normlab:
            report["normlab"] = [dict(r, threads=t) for t, r in sorted(ours.items())]
            report["round_ratios"] = ratios
            report["median_ratio"] = statistics.median(ratios)
        print(json.dumps(report))
        return

    print("torch {}  {}  malloc: {}  OpenMP: {}".format(
        torch.__version__, " ".join("{}={}".format(k, v) for k, v in config.items()),
        os.environ.get("GLIBC_TUNABLES", "glibc defaults"), torch_malloc.openmp_wait()))
    print("{:>7s} {:>10s} {:>10s} {:>12s} {:>12s}".format("threads", "step_ms", "min_ms", "tokens/s", "real tok/step"))
    for r in results:
        print("{:7d} {:10.2f} {:10.2f} {:12.0f} {:12.1f}".format(
            r["threads"], r["step_ms"], r["step_ms_min"], r["tokens_per_s"], r["real_tokens_per_step"]))
    print("best: {} thread(s), {:.2f} ms/step, {:.0f} real tokens/s (loss {:.3f} -> {:.3f})".format(
        best["threads"], best["step_ms"], best["tokens_per_s"], best["loss_first"], best["loss_last"]))
    print("torch peak RSS {:.0f} MiB (process, all thread counts; {:.0f} MiB of it right after import torch)".format(
        torch_peak_rss, rss_after_import))
    if args.normlab:
        if not ours:
            print("normlab: no results (is `bench step` implemented?)")
        print("the normlab run uses {}; make sure its model and batch match the arguments above".format(args.config))
        for r in results:
            mine = ours.get(r["threads"])
            if mine is None:
                continue
            print("{} thread(s): normlab {:.2f} ms/step, {:.0f} tokens/s, peak RSS {:.0f} MiB; ours/torch step time "
                  "{:.2f}x, throughput {:.2f}x".format(r["threads"], mine["step_ms"], mine["tokens_per_s"],
                                                      mine["peak_rss_mib"], mine["step_ms"] / r["step_ms"],
                                                      mine["tokens_per_s"] / r["tokens_per_s"]))
        if ours:
            mine_best = max(ours.values(), key=lambda m: m["tokens_per_s"])
            best_tokens = max(r["tokens_per_s"] for r in results)
            print("best vs best: normlab {:.0f} real tokens/s / torch {:.0f} = {:.2f}x (target: >= {:g}x)".format(
                mine_best["tokens_per_s"], best_tokens, mine_best["tokens_per_s"] / best_tokens, args.target))
            print("peak RSS: normlab {:.0f} MiB (largest of its runs), torch {:.0f} MiB".format(
                max(m["peak_rss_mib"] for m in ours.values()), torch_peak_rss))
        if len(rounds) > 1:
            print("rounds (torch first in rounds 1, 3, ...), best vs best: {}; the table above is the median "
                  "round's".format(", ".join("{:.2f}x".format(x) for x in ratios)))
            print("median of {} rounds: {:.2f}x (target: >= {:g}x)".format(len(rounds), statistics.median(ratios),
                                                                          args.target))


if __name__ == "__main__":
    main()
