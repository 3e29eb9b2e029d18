"""Many sessions on all cores (`make bench`; issue 16 item 10): `-j 1` against `-j <cores>` on the same sessions.

For prefix-diff (turn to turn), report economy and stats cache over a fixed synthetic corpus (SESSIONS sessions of
MESSAGES rows, written as JSONL), the library call each command makes is timed with one job and with every core,
in one run; the figure is the speed-up (time with 1 ÷ time with N), with the results checked equal (the same
JSON bytes), so a speed-up that changed the answer is reported as a failure. On an idle N-core machine the ideal
is N; fork, pickling the results and the per-worker warm-up (the tokenizer, the first render) cost the rest.
On a shared machine the figure says as much about the neighbours as about zhin: read it with `machine.py`'s line.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import describe  # noqa: E402

from zhin_cli.core.parallel import default_jobs  # noqa: E402
from zhin_cli.store.jsonl import write_session  # noqa: E402
from zhin_cli.tools.diff.prefix import run_prefix_diff  # noqa: E402
from zhin_cli.tools.fixtures.synth import SynthOptions, synthesize  # noqa: E402
from zhin_cli.tools.report.economy import run_economy  # noqa: E402
from zhin_cli.tools.stats.cache import run_cache_stats  # noqa: E402


def corpus(folder: Path, sessions: int, messages: int) -> list[str]:
    paths = []
    for seed in range(1, sessions + 1):
        path = folder / f"synth-{seed}.jsonl"
        with path.open("w", encoding="utf-8") as out:
            write_session(synthesize(SynthOptions(members=40, messages=messages, seed=seed)), out)
        paths.append(str(path))
    return paths


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the workers, once the pool is shut down)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(call: Callable[[int], Any], jobs: int) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (all processes) and the result's JSON."""
    started, cpu = time.perf_counter(), cpu_seconds()
    result = call(jobs)
    return time.perf_counter() - started, cpu_seconds() - cpu, json.dumps(result.as_dict(), sort_keys=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--messages", type=int, default=1500)
    parser.add_argument("--jobs", type=int, default=default_jobs(), help="the N of -j N (default: the cores)")
    args = parser.parse_args()
    print(f"parallel benchmark — machine: {describe()}")
    with tempfile.TemporaryDirectory() as folder:
        cwd = Path(folder)
        paths = corpus(cwd, args.sessions, args.messages)
        print(f"corpus: {args.sessions} synthetic sessions of {args.messages} rows (seeds 1…{args.sessions}); "
              f"-j 1 vs -j {args.jobs}")
        commands: dict[str, Callable[[int], Any]] = {
            "prefix-diff": lambda jobs: run_prefix_diff(paths, cwd=cwd, jobs=jobs),
            "report economy (openai)": lambda jobs: run_economy(paths, cwd=cwd, providers=["openai"], jobs=jobs),
            "stats cache": lambda jobs: run_cache_stats(paths, db=None, cwd=cwd, jobs=jobs),
        }
        failed = False
        for name, call in commands.items():
            one, one_cpu, one_result = timed(call, 1)
            many, many_cpu, many_result = timed(call, args.jobs)
            same = one_result == many_result
            failed |= not same
            # cores busy = CPU seconds ÷ wall seconds: what the pool got from the machine (neighbours take the rest)
            print(f"  {name:<24} -j 1 {one:7.2f} s ({one_cpu / one:3.1f} cores busy) · -j {args.jobs} {many:7.2f} s "
                  f"({many_cpu / many:3.1f} cores busy) · speed-up {one / many:4.2f}× (ideal {min(args.jobs, args.sessions)}×)"
                  f" · CPU {many_cpu / one_cpu:4.2f}× of -j 1 · results {'identical' if same else 'DIFFERENT'}")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
