"""Peak memory of `zhin trace` on long sessions, and the refusal beyond the message limit (`make bench`).

Sessions of 10k, 25k, 50k and 100k messages (tiles of the busy fixture) are written as JSONL and traced (last
turn) in a fresh process each; the report gives peak RSS per size and the ratios 100k / 10k and 100k / 50k. A
request reads its window (the JSONL source keeps an outline and byte offsets, not the messages), so memory should
be nearly flat in the session's length: the target is 100k ≤ 1.3× 10k (a session loaded whole was ≈ 7×). A file
over the limit (`ZHIN_MAX_MESSAGES`, default 200,000) is refused with a one-line message before it is read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay import tiled  # noqa: E402

from zhin_cli.store.jsonl import read_session, write_session  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# VmHWM (the process's peak resident set) rather than getrusage's ru_maxrss, which Linux carries across
# fork+exec from the parent (this script, which built the sessions).
PROBE = (
    "import sys\n"
    "from zhin_cli._cli import main\n"
    "sys.argv = ['zhin'] + sys.argv[1:]\n"
    "try:\n"
    "    main()\n"
    "except SystemExit as exit:\n"
    "    code = exit.code\n"
    "else:\n"
    "    code = 0\n"
    "peak = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:'))\n"
    "print(peak, code, file=sys.stderr)\n"
)


def traced(path: Path, env: dict[str, str] | None = None) -> tuple[float, int, float, str]:
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", PROBE, "trace", str(path), "--json"], capture_output=True, text=True,
                            env={**os.environ, **(env or {})})
    seconds = time.perf_counter() - started
    last = result.stderr.strip().splitlines()
    rss_kib, code = last[-1].split()
    return int(rss_kib) / 1024, int(code), seconds, "\n".join(last[:-1])


def main() -> None:
    base = read_session(ROOT / "fixtures" / "group-busy.jsonl")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for copies in (70, 175, 350, 700):  # ≈ 10k, 25k, 50k, 100k messages
            path = Path(folder) / f"s{copies}.jsonl"
            with path.open("w", encoding="utf-8") as out:
                write_session(tiled(base, copies), out)
            mib, code, seconds, message = traced(path)
            assert code == 0, message
            rows.append({"messages": copies * len(base.messages), "file_mib": round(path.stat().st_size / 2**20, 1),
                         "peak_rss_mib": round(mib, 1), "exit": code, "seconds": round(seconds, 2)})
        over = Path(folder) / "s700.jsonl"
        mib, code, seconds, message = traced(over, {"ZHIN_MAX_MESSAGES": "50000"})
    print(f"{'messages':>8} {'file MiB':>8} {'peak RSS MiB':>12} {'seconds':>8}")
    for row in rows:
        print(f"{row['messages']:>8} {row['file_mib']:>8} {row['peak_rss_mib']:>12} {row['seconds']:>8}")
    ratio = rows[3]["peak_rss_mib"] / rows[2]["peak_rss_mib"]
    flat = rows[3]["peak_rss_mib"] / rows[0]["peak_rss_mib"]
    print(f"peak RSS 100k / 50k messages: {ratio:.2f}x")
    print(f"peak RSS 100k / 10k messages: {flat:.2f}x (target <= 1.3)")
    print(f"over the limit (ZHIN_MAX_MESSAGES=50000, 100k messages): exit {code} in {seconds:.1f}s, peak RSS {mib:.0f} MiB: {message}")
    if "--json" in sys.argv:
        print(json.dumps({"benchmark": "memory", "results": rows, "rss_ratio_100k_over_50k": round(ratio, 3),
                          "rss_ratio_100k_over_10k": round(flat, 3),
                          "refusal": {"exit": code, "seconds": round(seconds, 2), "peak_rss_mib": round(mib, 1)}}))


if __name__ == "__main__":
    main()
