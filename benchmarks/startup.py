"""Start-up benchmark: how long ``zhin`` takes before it does any work (`make bench`).

A command line tool is started again and again (by hand, in CI gates, in shell loops), so its start-up is part of
every command. Each command is timed as a fresh process, best of N, and reported as a ratio to a bare
``python -c "import json"`` of the same interpreter in the same run: the interpreter's own start (and the
site-packages hooks) is what no change to zhin can remove, and the ratio is comparable across machines and load.

Targets (issue 16): ``zhin --version`` ≤ 6×, a one-turn trace of a small session (fixtures/private-chat.jsonl) ≤ 15×.
Issue 17: a shell's TAB (``_ZHIN_COMPLETE=complete_bash``, which runs the CLI) answers in < 0.3 s — an absolute
target, since it is a person waiting: provider names, command names, and session ids from a database.

``--tree DIR`` times a second source tree too (e.g. an export of an older commit: ``git archive REV | tar -x -C DIR``),
run as ``PYTHONPATH=DIR python -m zhin_cli``, interleaved with the checkout so both see the same load.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMALL_SESSION = ROOT / "fixtures" / "private-chat.jsonl"

# What is timed: a label and the arguments after ``python -m zhin_cli``; the target ratio, if the issue sets one.
COMMANDS: list[tuple[str, list[str], float | None]] = [
    ("zhin --version", ["--version"], 6.0),
    ("zhin --help", ["--help"], None),
    ("zhin trace private-chat (last turn)", ["trace", str(SMALL_SESSION)], 15.0),
    ("zhin trace private-chat --json", ["trace", str(SMALL_SESSION), "--turn", "1", "--json"], 15.0),
]
# TAB completions: a label, the bash words typed (the last one incomplete) and the target in seconds. Session ids are
# read from a database of fixtures/private-chat.jsonl (ZHIN_DB), imported once before timing.
COMPLETIONS: list[tuple[str, str, float]] = [
    ("TAB: zhin trace --provider op", "zhin trace --provider op", 0.3),
    ("TAB: zhin tr (command names)", "zhin tr", 0.3),
    ("TAB: zhin trace icqq (session ids)", "zhin trace icqq", 0.3),
]
BASELINE = ["-c", "import json"]
# What every command that counts tokens pays before zhin does anything: tiktoken building its o200k_base encoder (the
# Rust BPE over 200k ranks). Shown as a floor for the trace targets, not as a zhin figure.
TOKENIZER_FLOOR = ["-c", "import os; from zhin_cli.core.tokens import seed_cache; os.environ['TIKTOKEN_CACHE_DIR'] = "
                         "str(seed_cache()); import tiktoken; tiktoken.get_encoding('o200k_base')"]


@dataclass
class Timing:
    label: str
    tree: str  # "baseline", "checkout" or the --tree path
    best: float
    target: float | None = None
    target_seconds: float | None = None  # an absolute target (completion), instead of a ratio


def run_once(arguments: Sequence[str], env: dict[str, str], cwd: Path) -> float:
    """Wall time of one fresh process, output discarded (it is checked once, before timing, by ``check_runs``)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, *arguments], env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   stdin=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def environment(tree: Path | None, bytecode: Path) -> dict[str, str]:
    """A clean environment; bytecode is cached in ``bytecode`` (PYTHONPYCACHEPREFIX), even where the caller set
    PYTHONDONTWRITEBYTECODE: a user's second start reads it, and without it every start would time the compiler."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZHIN_")}
    env.update(NO_COLOR="1", ZHIN_NO_PROGRESS="1", PYTHONPYCACHEPREFIX=str(bytecode))
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    return env


def check_runs(arguments: Sequence[str], env: dict[str, str], cwd: Path) -> None:
    """A command that fails would time its error path: refuse to report it."""
    result = subprocess.run([sys.executable, *arguments], env=env, cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"startup: {' '.join(arguments)} exited {result.returncode}: {result.stderr.strip()[-400:]}")


def measure(trees: Sequence[tuple[str, Path | None]], repeats: int) -> list[Timing]:
    """Best of ``repeats`` for the baseline and every (command, tree), interleaved round by round so that a burst of
    load on the machine hits all of them alike."""
    with tempfile.TemporaryDirectory() as folder:
        cwd = Path(folder) / "run"  # no zhin.yaml or .zhin upward, nothing of the checkout on sys.path but the package
        cwd.mkdir()
        bytecode = Path(folder) / "bytecode"
        jobs: list[tuple[str, str, list[str], dict[str, str], float | None]] = [
            ("python -c 'import json'", "baseline", BASELINE, environment(None, bytecode), None),
            ("tiktoken o200k_base load alone", "floor", TOKENIZER_FLOOR, environment(None, bytecode), None)]
        for label, arguments, target in COMMANDS:
            for name, tree in trees:
                jobs.append((label, name, ["-m", "zhin_cli", *arguments], environment(tree, bytecode), target))
        absolute: dict[int, float] = {}
        database = Path(folder) / "sessions.sqlite"
        check_runs(["-m", "zhin_cli", "import", str(SMALL_SESSION), "--db", str(database)], environment(None, bytecode), cwd)
        for label, words, seconds in COMPLETIONS:
            for name, tree in trees:
                env = environment(tree, bytecode)
                env.update(_ZHIN_COMPLETE="complete_bash", COMP_WORDS=words, COMP_CWORD=str(len(words.split()) - 1),
                           ZHIN_DB=str(database))
                absolute[len(jobs)] = seconds
                jobs.append((label, name, ["-m", "zhin_cli"], env, None))
        for _, _, arguments, env, _ in jobs:  # also the warm-up that writes the bytecode
            check_runs(arguments, env, cwd)
        best = [float("inf")] * len(jobs)
        for _ in range(repeats):
            for index, (_, _, arguments, env, _) in enumerate(jobs):
                best[index] = min(best[index], run_once(arguments, env, cwd))
    return [Timing(label, name, seconds, target, absolute.get(index))
            for index, ((label, name, _, _, target), seconds) in enumerate(zip(jobs, best, strict=True))]


def report(timings: Sequence[Timing]) -> list[str]:
    baseline = timings[0].best
    lines = [f"startup: bare python {baseline * 1000:.0f} ms (best of the run); ratios to it:"]
    for timing in timings[1:]:
        ratio = timing.best / baseline
        verdict = ""
        if timing.target is not None and timing.tree == "checkout":
            verdict = f"  target ≤ {timing.target:g}×: {'ok' if ratio <= timing.target else 'MISSED'}"
        if timing.target_seconds is not None and timing.tree == "checkout":
            verdict = (f"  target < {timing.target_seconds * 1000:.0f} ms: "
                       f"{'ok' if timing.best < timing.target_seconds else 'MISSED'}")
        lines.append(f"  {timing.label:<40} {timing.tree:<14} {timing.best * 1000:7.0f} ms  {ratio:5.1f}×{verdict}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=15, help="runs per command; the best counts (default 15)")
    parser.add_argument("--tree", type=Path, action="append", default=[],
                        help="another source tree to time alongside the checkout (repeatable)")
    options = parser.parse_args(argv)
    trees: list[tuple[str, Path | None]] = [("checkout", None)]
    trees += [(str(tree), tree.resolve()) for tree in options.tree]
    for line in report(measure(trees, options.repeats)):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
