#!/usr/bin/env python3
"""normlab serve under clients and files that set their own sizes: peak RSS (VmHWM) and the time of a
normal request meanwhile. Scenarios, each on a fresh `normlab serve DIR --port 0`:

  files     256 slow readers of a 64 MiB file (half sending Accept-Encoding: gzip), each reading
            64 KiB every 50 ms; a normal GET timed every 0.2 s while they read.
  hostile   1,000 connections that hold the server: idle, half-sent, trickling a byte at a time;
            a normal GET timed meanwhile.
  metrics   a run with a valid metrics.jsonl of about 1.5 GB (9.5 M records) beside a small run:
            the first page, status.json and series.json timed while serve reads it, then four
            curves.csv downloads at once; peak RSS over all of it.
  budget    a run whose metrics.jsonl (125 MB, 780,000 records) fills the report's budget: the first
            page (the report reads it whole), four curves.csv at once; peak RSS.
  garbage   30 valid lines then 1 GB of NUL bytes: the page and the series, peak RSS.

Big files are written under /tmp (outside the lock) and deleted at the end; each scenario's
measurement holds the shared lock (BENCH_LOCK, default /work/bench.lock), a few minutes at most:
  python3 bench/serve_limits.py build/normlab [scenario ...]
"""
import contextlib
import fcntl
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

NORMLAB = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/normlab")
SCENARIOS = sys.argv[2:] or ["files", "hostile", "metrics", "budget", "garbage"]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # 1,000 hostile sockets and more


@contextlib.contextmanager
def bench_lock():
    with open(os.environ.get("BENCH_LOCK", "/work/bench.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        print(f"  (lock held; load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f})")
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def make_run(path, steps=2):
    subprocess.run([NORMLAB, "train", "--config", os.path.join(REPO, "configs/bench-step.json"), "--set",
                    f"train.steps={steps}", "--out", path], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Serve:
    def __init__(self, directory):
        self.proc = subprocess.Popen([NORMLAB, "serve", directory, "--port", "0"], stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        self.port = int(re.search(r":(\d+)/", line).group(1))

    def hwm_mb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def rss_mb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def request(port, target, headers="", read=True, timeout=120):
    """Seconds to the whole answer, its status and body size."""
    start = time.monotonic()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{headers}\r\n".encode())
    data = bytearray()
    while True:
        chunk = s.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    s.close()
    status = int(data[9:12]) if data.startswith(b"HTTP/1.1 ") else 0
    return time.monotonic() - start, status, len(data)


def summary(name, times):
    times = sorted(times)
    if not times:
        return f"{name}: no samples"
    p = lambda q: times[min(len(times) - 1, int(q * len(times)))]
    return f"{name}: {len(times)} GETs, median {1000 * p(0.5):.1f} ms, p95 {1000 * p(0.95):.1f} ms, max {1000 * times[-1]:.1f} ms"


def timed_gets(port, target, stop, out, every=0.2):
    while not stop.is_set():
        seconds, status, _ = request(port, target)
        out.append(seconds if status in (200, 304) else float("inf"))
        time.sleep(every)


def scenario_files(tmp):
    run = os.path.join(tmp, "runs", "run1")
    make_run(run)
    with open(os.path.join(run, "big.log"), "wb") as f:
        block = os.urandom(1 << 20)
        for _ in range(64):
            f.write(block)
    with bench_lock():
        files_measure(tmp)


def files_measure(tmp):
    serve = Serve(os.path.join(tmp, "runs"))
    stop = threading.Event()
    done = []

    def slow_reader(i):
        s = socket.create_connection(("127.0.0.1", serve.port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        gzip = "Accept-Encoding: gzip\r\n" if i % 2 else ""
        s.sendall(f"GET /run1/big.log HTTP/1.1\r\nHost: 127.0.0.1\r\n{gzip}\r\n".encode())
        got = 0
        while not stop.is_set():
            chunk = s.recv(65536)
            if not chunk:
                break
            got += len(chunk)
            time.sleep(0.05)
        s.close()
        done.append(got)

    readers = [threading.Thread(target=slow_reader, args=(i,)) for i in range(256)]
    for t in readers:
        t.start()
    times = []
    timer = threading.Thread(target=timed_gets, args=(serve.port, "/run1/config.json", stop, times))
    time.sleep(2)  # all 256 connected and reading
    timer.start()
    time.sleep(20)
    stop.set()
    timer.join()
    for t in readers:
        t.join()
    print(f"files: 256 slow readers of a 64 MiB file (128 with gzip), 20 s: peak RSS {serve.hwm_mb():.1f} MB; "
          f"read {sum(done) / 2**20:.0f} MiB in all")
    print("  " + summary("a normal GET meanwhile", times))
    serve.stop()


def scenario_hostile(tmp):
    run = os.path.join(tmp, "runs", "run1")
    make_run(run)
    with bench_lock():
        hostile_measure(tmp)


def hostile_measure(tmp):
    serve = Serve(os.path.join(tmp, "runs"))
    stop = threading.Event()
    socks = []
    for i in range(1000):
        s = socket.create_connection(("127.0.0.1", serve.port))
        if i % 3 == 1:
            s.sendall(b"GET /run1/config.json HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        socks.append(s)
    trickling = [s for i, s in enumerate(socks) if i % 3 == 2]

    def trickle():
        while not stop.is_set():
            for s in trickling:
                try:
                    s.send(b"G")
                except OSError:
                    pass
            time.sleep(0.5)

    tricker = threading.Thread(target=trickle)
    tricker.start()
    time.sleep(1)
    times = []
    deadline = time.monotonic() + 4  # within the 5 s request deadline: all 1,000 still open
    while time.monotonic() < deadline:
        seconds, status, _ = request(serve.port, "/run1/config.json")
        times.append(seconds if status == 200 else float("inf"))
        time.sleep(0.05)
    page = [request(serve.port, "/")[0] for _ in range(5)]
    stop.set()
    tricker.join()
    print(f"hostile: 1,000 connections open (idle, half-sent, trickling): peak RSS {serve.hwm_mb():.1f} MB")
    print("  " + summary("a normal GET meanwhile", times))
    print("  " + summary("the page meanwhile", page))
    time.sleep(6)  # past the deadline: the server closed them
    closed = 0
    for s in socks:
        s.settimeout(0.01)
        try:
            if s.recv(4096)[:12] in (b"HTTP/1.1 408", b""):
                closed += 1
        except OSError:
            pass
        s.close()
    print(f"  after the 5 s request deadline: {closed} of 1000 answered 408 / closed by the server")
    serve.stop()


def write_big_metrics(path, records=9_500_000):
    with open(path, "w") as f:
        step = 0
        while step < records:
            lines = []
            for _ in range(10000):
                step += 1
                if step % 1000 == 0:
                    lines.append(json.dumps({"split": "valid", "step": step, "loss": 1.0, "accuracy": 0.5, "targets": 100,
                                             "trained": {"loss": 1.0, "accuracy": 0.5, "targets": 50}}) + "\n")
                else:
                    lines.append(f'{{"step":{step},"loss":{2.0 - step * 1e-7:.6f},"accuracy":0.5123,"grad_norm":1.2345,'
                                 f'"lr":0.001,"tokens":2048,"tokens_per_s":51234.5,"sequences":32,"shortest":1,"longest":64}}\n')
            f.write("".join(lines))


def scenario_metrics(tmp):
    big, small = os.path.join(tmp, "runs", "big"), os.path.join(tmp, "runs", "small")
    make_run(big)
    make_run(small, steps=20)
    t0 = time.monotonic()
    write_big_metrics(os.path.join(big, "metrics.jsonl"))
    size = os.path.getsize(os.path.join(big, "metrics.jsonl"))
    print(f"metrics: wrote a {size / 1e9:.2f} GB metrics.jsonl in {time.monotonic() - t0:.0f} s")
    with bench_lock():
        metrics_measure(tmp)


def metrics_measure(tmp):
    serve = Serve(os.path.join(tmp, "runs"))
    seconds, status, n = request(serve.port, "/")
    print(f"  first page: {1000 * seconds:.0f} ms, status {status}, {n / 1e3:.1f} kB")
    stop = threading.Event()
    status_times, series_times = [], []
    timers = [threading.Thread(target=timed_gets, args=(serve.port, "/_serve/status.json", stop, status_times)),
              threading.Thread(target=timed_gets, args=(serve.port, "/_serve/series.json?run=big&metric=train/loss", stop,
                                                        series_times, 0.5))]
    for t in timers:
        t.start()
    t0 = time.monotonic()
    records = 0
    while time.monotonic() - t0 < 300:
        body = json.loads(subprocess.run(["curl", "-s", f"http://127.0.0.1:{serve.port}/_serve/series.json?run=big&metric=train/loss"],
                                         capture_output=True, text=True).stdout)
        records = body["metrics"].get("train/loss", {}).get("records", 0)
        if body["lines"] >= 9_500_000:
            break
        time.sleep(1)
    caught_up = time.monotonic() - t0
    stop.set()
    for t in timers:
        t.join()
    print(f"  serve read the whole file in the background in {caught_up:.0f} s ({records} train/loss records charted); "
          f"peak RSS so far {serve.hwm_mb():.1f} MB")
    print("  " + summary("status.json meanwhile", status_times))
    print("  " + summary("series.json (the big run's loss) meanwhile", series_times))
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(request(serve.port, "/curves.csv", "Accept-Encoding: gzip\r\n" if i % 2 else "")))
               for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"  4 curves.csv at once: {', '.join(f'{r[2] / 1e3:.0f} kB in {1000 * r[0]:.0f} ms' for r in results)}")
    rows = json.loads(request_body(serve.port, "/_serve/status.json"))["runs"]
    big_row = next(r for r in rows if r["name"] == "big")
    print(f"  the big run's row: {big_row['state']}, step {big_row['step']}: {big_row['problem'][:90]}...")
    time.sleep(2)
    print(f"  peak RSS {serve.hwm_mb():.1f} MB; RSS now (idle) {serve.rss_mb():.1f} MB")
    serve.stop()


def scenario_budget(tmp):
    run = os.path.join(tmp, "runs", "full")
    make_run(run)
    write_big_metrics(os.path.join(run, "metrics.jsonl"), records=780_000)
    size = os.path.getsize(os.path.join(run, "metrics.jsonl"))
    print(f"budget: a run with a {size / 1e6:.0f} MB metrics.jsonl, read whole by the report")
    with bench_lock():
        serve = Serve(os.path.join(tmp, "runs"))
        seconds, status, n = request(serve.port, "/")
        print(f"  first page: {1000 * seconds:.0f} ms, status {status}, {n / 1e3:.1f} kB; peak RSS {serve.hwm_mb():.1f} MB")
        times = []
        for _ in range(20):
            times.append(request(serve.port, "/_serve/status.json")[0])
            time.sleep(0.1)
        print("  " + summary("status.json after it", times))
        results = []
        threads = [threading.Thread(target=lambda i=i: results.append(request(serve.port, "/curves.csv", "Accept-Encoding: gzip\r\n" if i % 2 else "")))
                   for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(f"  4 curves.csv at once (2 gzip): {', '.join(f'{r[2] / 1e6:.1f} MB in {r[0]:.1f} s' for r in results)}")
        time.sleep(2)
        print(f"  peak RSS {serve.hwm_mb():.1f} MB; RSS now (idle) {serve.rss_mb():.1f} MB")
        serve.stop()


def request_body(port, target):
    return subprocess.run(["curl", "-s", f"http://127.0.0.1:{port}{target}"], capture_output=True, text=True).stdout


def scenario_garbage(tmp):
    run = os.path.join(tmp, "runs", "nul")
    make_run(run)
    with open(os.path.join(run, "metrics.jsonl"), "ab") as f:
        for _ in range(28):
            f.write(b'{"step":3,"loss":1.5,"accuracy":0.5,"grad_norm":1.0}\n')
        zeros = bytes(1 << 20)
        for _ in range(1024):
            f.write(zeros)
    with bench_lock():
        garbage_measure(tmp)


def garbage_measure(tmp):
    serve = Serve(os.path.join(tmp, "runs"))
    seconds, status, n = request(serve.port, "/")
    s2, st2, _ = request(serve.port, "/_serve/series.json?run=nul&metric=train/loss")
    for _ in range(20):  # as the page polls: each poll gets the last drawing and asks for a new one
        row = json.loads(request_body(serve.port, "/_serve/status.json"))["runs"][0]
        if row["state"] == "error":
            break
        time.sleep(0.5)
    print(f"garbage: 30 lines then 1 GB of NUL bytes: page {1000 * seconds:.0f} ms ({status}), series {1000 * s2:.0f} ms ({st2}); "
          f"row: {row['state']} ({row['problem'][-70:]}); peak RSS {serve.hwm_mb():.1f} MB")
    serve.stop()


for name in SCENARIOS:
    tmp = tempfile.mkdtemp(prefix="normlab-serve-bench-", dir="/tmp")
    try:
        globals()[f"scenario_{name}"](tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    sys.stdout.flush()
