"""glibc malloc settings for the PyTorch side of the benchmarks (bench/README.md).

PyTorch allocates its outputs and gradients afresh on every call. With glibc's defaults each large
buffer is mmap'ed and unmapped again, so every call pays page faults for it; that is allocator
behaviour, not the kernel being measured. The scripts therefore re-execute themselves with
GLIBC_TUNABLES raising the mmap and trim thresholds, unless --default-malloc is given.
"""
import os
import sys

MALLOC_TUNABLES = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296:glibc.malloc.mmap_max=0"


def add_argument(parser):
    parser.add_argument("--default-malloc", action="store_true",
                        help="do not set GLIBC_TUNABLES for torch (see bench/torch_malloc.py)")


def reexec_with_tunables(args):
    """Restarts this script with MALLOC_TUNABLES unless it already runs with them or
    args.default_malloc is set (GLIBC_TUNABLES is read once, when the process starts)."""
    if not args.default_malloc and os.environ.get("GLIBC_TUNABLES") != MALLOC_TUNABLES:
        os.environ["GLIBC_TUNABLES"] = MALLOC_TUNABLES
        os.execv(sys.executable, [sys.executable] + sys.argv)
