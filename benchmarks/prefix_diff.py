"""prefix-diff benchmark (`make bench`): messages per second over every turn of long sessions, the
scaling ratio 20k vs 10k messages (linear ⇒ ≈ 2), and the speed-up over a naive diff that serialises and
tokenizes every request from scratch. Ratios within one run compare; absolute numbers depend on the machine.

``--before DIR`` (or ``ZHIN_BENCH_BEFORE``): also measure the same sessions with the code in DIR (an export of
an older commit, e.g. ``git archive 271b824 | tar -x -C /tmp/old271``) in the same run, each size in its own
cold process, and report after ÷ before messages per second (issue 16's target: ≥ 4× at 20k messages).
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay import tiled  # noqa: E402

from zhin_cli.cache.diff import diff_turns  # noqa: E402
from zhin_cli.core.tokens import TokenCounter  # noqa: E402
from zhin_cli.pipeline.assemble import Assembler  # noqa: E402
from zhin_cli.pipeline.config import Config  # noqa: E402
from zhin_cli.store.jsonl import read_session  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def incremental(session) -> float:  # type: ignore[no-untyped-def]
    """CPU seconds of an all-turn prefix-diff (CPU time, not wall time: the machine may be shared)."""
    config = Config()
    registry, _ = config.registry()
    started = time.process_time()
    result = diff_turns(session.session_id, Assembler(registry, config).replay(session))
    assert result.pairs
    return time.process_time() - started


def naive(session) -> float:  # type: ignore[no-untyped-def]
    """The baseline: every request re-rendered with nothing remembered from the turn before (a fresh
    token counter per request), and each whole body tokenized from scratch to find the common prefix."""
    import zhin_cli.pipeline.assemble as assemble_module

    config = Config()
    registry, _ = config.registry()
    started = time.process_time()
    previous: list[int] | None = None
    shared = assemble_module.shared_counter
    assemble_module.shared_counter = TokenCounter  # type: ignore[assignment]
    try:
        requests = list(Assembler(registry, config).replay(session))
    finally:
        assemble_module.shared_counter = shared
    for request in requests:
        fresh = TokenCounter(request.encoding)  # no memo: every request re-tokenized
        tokens = fresh.encode(json.dumps(request.request, ensure_ascii=False))
        if previous is not None:
            common = 0
            for x, y in zip(previous, tokens, strict=False):
                if x != y:
                    break
                common += 1
        previous = tokens
    return time.process_time() - started


def measure(copies: int) -> dict[str, float]:
    """One cold run (fresh process state, as a CLI invocation has) on ``copies`` tiles of the fixture."""
    base = read_session(ROOT / "fixtures" / "group-busy.jsonl")
    session = tiled(base, copies)
    gc.collect()
    gc.freeze()  # as the CLI does after loading: the loaded session is not garbage, stop rescanning it
    seconds = incremental(session)
    turns = sum(1 for m in session.messages if m.role == "assistant")
    return {"messages": len(session.messages), "turns": turns, "seconds": seconds}


def cold(copies: int, repeats: int = 2, code: str | None = None) -> dict[str, float]:
    """Best of ``repeats`` cold runs, each in its own process; ``code``: a source tree to run instead of this one."""
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = code + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    runs = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, __file__, "--measure", str(copies)], capture_output=True, text=True, check=True,
                             env=env)
        runs.append(json.loads(out.stdout))
    return min(runs, key=lambda r: r["seconds"])


def _row(row: dict[str, float]) -> dict[str, float]:
    return {**row, "seconds": round(row["seconds"], 2), "messages_per_second": round(row["messages"] / row["seconds"])}


def before_tree() -> str | None:
    if "--before" in sys.argv:
        return sys.argv[sys.argv.index("--before") + 1]
    return os.environ.get("ZHIN_BENCH_BEFORE") or None


def compare(before: str) -> list[dict[str, float]]:
    """10k and 20k messages, the old tree and this one alternately (same machine state), in one run."""
    rows = []
    for copies in (70, 140):  # ≈ 10k, 20k messages
        old, new = _row(cold(copies, repeats=1, code=before)), _row(cold(copies, repeats=1))
        rows.append({"messages": new["messages"], "before_messages_per_second": old["messages_per_second"],
                     "after_messages_per_second": new["messages_per_second"], "before_seconds": old["seconds"],
                     "after_seconds": new["seconds"],
                     "speedup": round(new["messages_per_second"] / old["messages_per_second"], 2)})
    return rows


def main() -> None:
    rows = []
    for copies in (35, 70, 140):  # ≈ 5k, 10k, 20k messages
        rows.append(_row(cold(copies)))
    base = read_session(ROOT / "fixtures" / "group-busy.jsonl")
    small = tiled(base, 8)
    incremental(base)  # load the tokenizer once for both sides
    speedup = naive(small) / incremental(small)
    ratio = rows[2]["seconds"] / rows[1]["seconds"]
    print(f"{'messages':>8} {'turns':>6} {'seconds':>8} {'msg/s':>7}")
    for row in rows:
        print(f"{row['messages']:>8} {row['turns']:>6} {row['seconds']:>8} {row['messages_per_second']:>7}")
    print(f"scaling 20k / 10k messages: {ratio:.2f}x time for 2x length (linear ≈ 2.0; gate ≤ 2.2)")
    print(f"speed-up over the naive re-render ({len(small.messages)} messages): {speedup:.1f}x")
    before = before_tree()
    against: list[dict[str, float]] = []
    if before is not None:
        against = compare(before)
        print(f"before ({before}) → after, messages/s:")
        for row in against:
            print(f"{row['messages']:>8} {row['before_messages_per_second']:>7} → {row['after_messages_per_second']:>7}"
                  f"  {row['speedup']:.2f}x (target ≥ 4x at 20k)")
        print(f"before scaling 20k / 10k: {against[1]['before_seconds'] / against[0]['before_seconds']:.2f}x; "
              f"after: {against[1]['after_seconds'] / against[0]['after_seconds']:.2f}x")
    if "--json" in sys.argv:
        print(json.dumps({"benchmark": "prefix-diff", "results": rows, "scaling_20k_over_10k": round(ratio, 3),
                          "speedup_over_naive": round(speedup, 2), "before_after": against}))


if __name__ == "__main__":
    if "--measure" in sys.argv:
        print(json.dumps(measure(int(sys.argv[sys.argv.index("--measure") + 1]))))
    elif "--compare-only" in sys.argv:  # just the before/after table (needs --before)
        tree = before_tree()
        assert tree is not None, "--compare-only needs --before DIR"
        print(json.dumps(compare(tree)))
    else:
        main()
