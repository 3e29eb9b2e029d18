"""`zhin serve` under load: N concurrent real `openai` clients × M requests against a server process on 127.0.0.1.

Counts connection resets (and any other failure), latency percentiles and the server's peak RSS (VmHWM).
Not part of the suite (it takes tens of seconds); the suite's bounded version is tests/test_serve_load.py.

    .venv/bin/python benchmarks/serve_load.py --clients 32 --requests 100            # this checkout
    .venv/bin/python benchmarks/serve_load.py --tree /tmp/old --clients 32 --requests 100   # another checkout
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="checkout whose zhin_cli runs the server")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--requests", type=int, default=100, help="requests per client")
    args = parser.parse_args()
    process, base_url = start_server(args.tree)
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
