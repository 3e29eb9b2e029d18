"""`zhin serve` under load: N concurrent real `openai` clients × M requests against a server process on 127.0.0.1.

Counts connection resets (and any other failure), latency percentiles and the server's peak RSS (VmHWM).
Not part of the suite (it takes tens of seconds); the suite's bounded version is tests/test_serve_load.py.

    .venv/bin/python benchmarks/serve_load.py --clients 32 --requests 100            # this checkout
    .venv/bin/python benchmarks/serve_load.py --tree /tmp/old --clients 32 --requests 100   # another checkout
    .venv/bin/python benchmarks/serve_load.py --uploads 8 --upload-mb 70   # peak RSS under concurrent big bodies
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx2
import openai

ROOT = Path(__file__).resolve().parents[1]


def peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def start_server(tree: Path) -> tuple[subprocess.Popen[str], str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_proxy") and not k.endswith("_PROXY")}
    env["PYTHONPATH"] = str(tree)
    process = subprocess.Popen([sys.executable, "-m", "zhin_cli", "serve", "--port", "0"], cwd=tree, env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    line = process.stderr.readline()
    match = re.search(r"listening on (http://\S+/v1)", line)
    if not match:
        process.kill()
        raise SystemExit(f"server did not start: {line!r}")
    threading.Thread(target=lambda: [None for _ in process.stderr or []], daemon=True).start()  # drain the log
    return process, match.group(1)


def classify(error: BaseException) -> str:
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ConnectionResetError) or "reset" in str(seen).lower():
            return "reset"
        seen = seen.__cause__ or seen.__context__
    return type(error).__name__


def uploads(process: subprocess.Popen[str], base_url: str, args: argparse.Namespace) -> None:
    """N concurrent chunked uploads of --upload-mb MiB (1 MiB chunks): answers and the server's peak RSS."""
    import socket

    port = int(base_url.rsplit(":", 1)[1].split("/", 1)[0])
    piece = b" " * (1 << 20)
    frame = b"%x\r\n%s\r\n" % (len(piece), piece)
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()

    def upload() -> None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
                sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n")
                for _ in range(args.upload_mb):
                    sock.sendall(frame)
                sock.sendall(b"0\r\n\r\n")
                answer = sock.recv(100).split(b" ", 2)[1].decode()
        except OSError as error:
            answer = type(error).__name__
        with lock:
            outcomes[answer] += 1

    before = peak_rss_mib(process.pid)
    started = time.perf_counter()
    threads = [threading.Thread(target=upload) for _ in range(args.uploads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    rss = peak_rss_mib(process.pid)
    process.terminate()
    process.wait(timeout=10)
    print(f"tree {args.tree}: {args.uploads} concurrent chunked uploads of {args.upload_mb} MiB in "
          f"{time.perf_counter() - started:.1f} s: {dict(outcomes)}; server peak RSS {before:.0f} → {rss:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="checkout whose zhin_cli runs the server")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--requests", type=int, default=100, help="requests per client")
    parser.add_argument("--uploads", type=int, default=0, help="instead: this many concurrent chunked uploads")
    parser.add_argument("--upload-mb", type=int, default=70)
    args = parser.parse_args()
    process, base_url = start_server(args.tree)
    if args.uploads:
        uploads(process, base_url, args)
        return
    latencies: list[float] = []
    failures: Counter[str] = Counter()
    lock = threading.Lock()
    barrier = threading.Barrier(args.clients)

    def client(index: int) -> None:
        http = openai.DefaultHttpxClient(trust_env=False, timeout=60)
        with openai.OpenAI(base_url=base_url, api_key="bench", max_retries=0, timeout=60, http_client=http) as api:
            barrier.wait()
            for n in range(args.requests):
                start = time.perf_counter()
                try:
                    api.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": f"client {index} request {n}"}])
                except (openai.APIError, httpx2.HTTPError, OSError) as error:
                    with lock:
                        failures[classify(error)] += 1
                    continue
                with lock:
                    latencies.append(time.perf_counter() - start)

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    rss = peak_rss_mib(process.pid)
    process.terminate()
    process.wait(timeout=10)
    latencies.sort()
    total = args.clients * args.requests

    def percentile(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000 if latencies else float("nan")

    print(f"tree {args.tree}: {args.clients} clients × {args.requests} requests = {total} in {elapsed:.1f} s "
          f"({total / elapsed:.0f}/s)")
    print(f"ok {len(latencies)}, resets {failures.get('reset', 0)}, other failures "
          f"{sum(failures.values()) - failures.get('reset', 0)} {dict(failures) if failures else ''}".rstrip())
    print(f"latency p50 {percentile(0.50):.1f} ms, p99 {percentile(0.99):.1f} ms, max {percentile(1.0):.1f} ms; "
          f"server peak RSS {rss:.0f} MiB")


if __name__ == "__main__":
    main()
