"""`zhin view` against idle connections: N sockets to 127.0.0.1 that never send a byte, opened one after another.

Prints the server process's thread count at its peak while they connect, how many were answered 503, how many
it closed while they were being opened (the idle timeout), and its threads after the idle timeout has passed.
Not part of the suite (it waits for the idle timeout); the suite's bounded version is tests/test_view_bounds.py.

    .venv/bin/python benchmarks/view_connections.py --connections 365                   # this checkout
    .venv/bin/python benchmarks/view_connections.py --tree /tmp/old --connections 365   # another checkout
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def threads(pid: int) -> int:
    found = re.search(r"^Threads:\s+(\d+)", Path(f"/proc/{pid}/status").read_text(encoding="ascii"), re.M)
    return int(found.group(1)) if found else -1


def start_view(tree: Path) -> tuple[subprocess.Popen[str], int]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    process = subprocess.Popen([sys.executable, "-m", "zhin_cli", "view", str(ROOT / "fixtures" / "private-chat.jsonl"),
                                "--no-economy"], cwd=tree, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    for line in process.stderr:
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        if found is not None:
            return process, int(found.group(1))
    raise SystemExit(f"zhin view did not start: {process.communicate()[1]}")


def state(connection: socket.socket) -> str:
    connection.setblocking(False)
    try:
        data = connection.recv(64)
    except BlockingIOError:
        return "open"
    except ConnectionResetError:
        return "reset"
    return "503" if data.startswith(b"HTTP/1.1 503") else "closed" if data == b"" else "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=365)
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose zhin view runs")
    parser.add_argument("--wait", type=float, default=11.0, help="seconds to wait before the last thread count")
    args = parser.parse_args()
    process, port = start_view(args.tree)
    sockets: list[socket.socket] = []
    try:
        before = peak = threads(process.pid)
        start = time.monotonic()
        for _ in range(args.connections):
            sockets.append(socket.create_connection(("127.0.0.1", port), timeout=10))
            peak = max(peak, threads(process.pid))
        elapsed = time.monotonic() - start
        time.sleep(0.5)
        kinds = Counter(state(s) for s in sockets)
        time.sleep(args.wait)
        print(f"{args.connections} idle connections in {elapsed:.1f} s: threads {before} -> peak {peak}; "
              f"{dict(kinds)}; {args.wait:g} s later: {threads(process.pid)} thread(s)")
    finally:
        for connection in sockets:
            connection.close()
        process.terminate()
        process.communicate(timeout=30)


if __name__ == "__main__":
    main()
