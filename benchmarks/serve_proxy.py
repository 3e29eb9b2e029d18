"""`zhin serve --upstream`: what the recorder adds in front of a provider.

Two server processes on 127.0.0.1: the upstream (`zhin serve`, the conformance server) and the recorder
(`zhin serve --upstream <it> --capture <temp dir>`). The same real `openai` client requests go once straight to the
upstream and once through the recorder:

* added latency per request: --sequential requests one after another (after a warm-up), alternating the two
  paths, p50/p90 of each and the difference of the medians (non-streamed, and streamed with include_usage);
* throughput at --clients concurrent clients × --requests each: requests per second and failures of each path.

Not part of the suite (it takes tens of seconds).

    .venv/bin/python benchmarks/serve_proxy.py --clients 32 --requests 50 --sequential 300
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import openai

ROOT = Path(__file__).resolve().parents[1]
MESSAGES = [{"role": "system", "content": "You are Zhin. " * 50}, {"role": "user", "content": "[id:m1] hi"}]


def start(*args: str) -> tuple[subprocess.Popen[str], str]:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env["PYTHONPATH"] = str(ROOT)
    process = subprocess.Popen([sys.executable, "-m", "zhin_cli", "serve", "--port", "0", *args], cwd=ROOT, env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    line = process.stderr.readline()
    match = re.search(r"listening on (http://\S+/v1)", line)
    if not match:
        process.kill()
        raise SystemExit(f"server did not start: {line!r}")
    threading.Thread(target=lambda: [None for _ in process.stderr or []], daemon=True).start()  # drain the log
    return process, match.group(1)


def api(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="bench", max_retries=0, timeout=60,
                         http_client=openai.DefaultHttpxClient(trust_env=False, timeout=60))


def ask(client: openai.OpenAI, index: int, stream: bool) -> None:
    messages: list[Any] = [*MESSAGES[:1], {"role": "user", "content": f"[id:m{index}] hi"}]
    if stream:
        for _ in client.chat.completions.create(model="gpt-4o", messages=messages, stream=True,
                                                stream_options={"include_usage": True}):
            pass
    else:
        client.chat.completions.create(model="gpt-4o", messages=messages)


def sequential(urls: tuple[str, str], count: int, stream: bool) -> tuple[list[float], list[float]]:
    """Alternating one request straight to the upstream and the same one through the recorder (so load drift on a
    shared machine hits both paths alike)."""
    took: tuple[list[float], list[float]] = ([], [])
    with api(urls[0]) as direct, api(urls[1]) as proxied:
        for n in range(20):  # warm-up (imports, tiktoken, the first connection)
            ask(direct, -n, stream)
            ask(proxied, -n, stream)
        for n in range(count):
            for client, times in ((direct, took[0]), (proxied, took[1])):
                started = time.perf_counter()
                ask(client, n, stream)
                times.append(time.perf_counter() - started)
    return took


def concurrent(base_url: str, clients: int, requests: int) -> tuple[float, Counter[str]]:
    failures: Counter[str] = Counter()
    lock = threading.Lock()
    barrier = threading.Barrier(clients + 1)

    def client(index: int) -> None:
        with api(base_url) as session:
            barrier.wait()
            for n in range(requests):
                try:
                    ask(session, index * requests + n, stream=False)
                except (openai.APIError, httpx2.HTTPError, OSError) as error:
                    with lock:
                        failures[type(error).__name__] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, failures


def ms(values: list[float], share: float) -> float:
    return sorted(values)[min(len(values) - 1, int(share * len(values)))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--requests", type=int, default=50, help="requests per client (throughput)")
    parser.add_argument("--sequential", type=int, default=300, help="requests one after another (latency)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="zhin-serve-proxy-"))
    upstream, direct_url = start()
    recorder, proxy_url = start("--upstream", direct_url.removesuffix("/v1"), "--capture", str(folder))
    try:
        for stream in (False, True):
            direct, proxied = sequential((direct_url, proxy_url), args.sequential, stream)
            added = statistics.median(proxied) - statistics.median(direct)
            print(f"{'streamed' if stream else 'non-streamed'}, {args.sequential} sequential requests: direct p50 "
                  f"{ms(direct, .5):.2f} ms p90 {ms(direct, .9):.2f} ms; through the recorder p50 {ms(proxied, .5):.2f} ms "
                  f"p90 {ms(proxied, .9):.2f} ms; added per request (median) {added * 1000:.2f} ms")
        runs: dict[str, Callable[[], tuple[float, Counter[str]]]] = {
            "direct": lambda: concurrent(direct_url, args.clients, args.requests),
            "through the recorder": lambda: concurrent(proxy_url, args.clients, args.requests),
        }
        total = args.clients * args.requests
        for name, run in runs.items():
            elapsed, failures = run()
            print(f"{name}: {args.clients} clients × {args.requests} = {total} requests in {elapsed:.1f} s "
                  f"({total / elapsed:.0f}/s), failures {sum(failures.values())} {dict(failures) if failures else ''}".rstrip())
        records = len(list(folder.glob("*.exchange.json")))
        print(f"recorded: {records} exchange records for {len(list(folder.glob('*.json'))) - records} captured bodies")
    finally:
        for process in (recorder, upstream):
            process.terminate()
            process.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
