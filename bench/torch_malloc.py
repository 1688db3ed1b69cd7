"""glibc malloc settings for the PyTorch side of the benchmarks (bench/README.md).

PyTorch allocates its outputs and gradients afresh on every call. With glibc's defaults each large
buffer is mmap'ed and unmapped again, so every call pays page faults for it; that is allocator
behaviour, not the kernel being measured. The scripts therefore re-execute themselves with
GLIBC_TUNABLES raising the mmap and trim thresholds, unless --default-malloc is given. mmap_max=0
on top: a buffer above glibc's largest mmap threshold (32 MiB), such as the (8, 4, 1024, 1024)
attention probabilities of bench_equal_work.py at L = 1024, would otherwise still be mapped and
unmapped on every call (7.7 s instead of 0.78 s per step).

The same restart sets GOMP_SPINCOUNT=30000 when neither it nor OMP_WAIT_POLICY is set: PyTorch
threads on libgomp, whose default spin (300,000) stalls 2-thread runs on a shared VM
(docs/PERFORMANCE.md, "Threads"); normlab threads on its own pool, which spins about 40 us before
it sleeps. Like GLIBC_TUNABLES it is read when the process starts.

require_openblas() is every script's check that the reference side runs on OpenBLAS: Debian's
libblas.so.3 is an alternative, and when it points at the reference BLAS (package libblas3) NumPy's
and PyTorch's GEMMs are about 40x slower, so any ratio against them is meaningless.
"""
import os
import sys

MALLOC_TUNABLES = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296:glibc.malloc.mmap_max=0"
OPENMP_SPIN = "30000"  # spins before an idle libgomp thread sleeps


def add_argument(parser):
    parser.add_argument("--default-malloc", action="store_true",
                        help="do not set GLIBC_TUNABLES for torch (see bench/torch_malloc.py)")


def reexec_with_tunables(args):
    """Restarts this script with MALLOC_TUNABLES unless it already runs with them or
    args.default_malloc is set (GLIBC_TUNABLES is read once, when the process starts), and with
    GOMP_SPINCOUNT=OPENMP_SPIN unless GOMP_SPINCOUNT or OMP_WAIT_POLICY is set."""
    restart = False
    if not args.default_malloc and os.environ.get("GLIBC_TUNABLES") != MALLOC_TUNABLES:
        os.environ["GLIBC_TUNABLES"] = MALLOC_TUNABLES
        restart = True
    if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = OPENMP_SPIN
        restart = True
    if restart:
        os.execv(sys.executable, [sys.executable] + sys.argv)


def blas_problem(maps_lines):
    """Why the libraries mapped into this process (lines of /proc/self/maps) are not OpenBLAS, or
    None when they are: a libblas.so mapped from outside an OpenBLAS directory (Debian's reference
    BLAS is /usr/lib/x86_64-linux-gnu/blas/libblas.so.3), or no libopenblas mapped at all."""
    paths = sorted({line.split()[-1] for line in maps_lines if len(line.split()) >= 6})
    names = [(os.path.dirname(p), os.path.basename(p)) for p in paths]
    for directory, name in names:
        if name.startswith("libblas.so") and "openblas" not in directory:
            return "the BLAS loaded is {}/{}, not OpenBLAS".format(directory, name)
    if not any(name.startswith("libopenblas") for _, name in names):
        return "no libopenblas is loaded"
    return None


def require_openblas(script, modules=("numpy", "torch")):
    """Exits with status 2 and one line unless the reference side (NumPy, PyTorch: those of
    `modules` that are installed, imported here) computes its GEMMs with OpenBLAS."""
    import importlib
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            pass
    with open("/proc/self/maps") as maps:
        problem = blas_problem(maps)
    if problem is not None:
        print("{}: {}: a comparison against it is meaningless (its GEMMs are about 40x slower); install "
              "libopenblas0-pthread or point the alternative at it: update-alternatives --config "
              "libblas.so.3-x86_64-linux-gnu".format(script, problem), file=sys.stderr)
        sys.exit(2)


def openmp_wait():
    """The OpenMP wait setting both sides run with, for a header line."""
    return ", ".join("{}={}".format(name, os.environ[name]) for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
                     if name in os.environ) or "libgomp's default spin"
