"""Replay benchmark: messages per second and how cost grows with session length (`make bench`).

Sessions of 1×, 2×, 4× and 8× the busy group fixture (copies shifted in time, ids re-mapped) are
replayed turn by turn. Linear growth means time per message stays flat: the report gives the ratio
(time per message at 8×) / (time per message at 1×), which should stay near 1. Peak Python memory per size
comes from tracemalloc in a separate pass. Ratios within one run are comparable; absolute numbers
depend on the machine.

``--old TREE`` (e.g. ``/tmp/old271``, an export of 271b824: before issue 16) also compares
this tree with that one in the same run, each in its own processes, interleaved, best of ``--repeats``, in CPU
seconds (the machine is shared): all-turn replay and all-turn prefix-diff of a 10k- and a 20k-message session in
messages/s (a replay resumes the previous request's projection: ``headers.ProjectionMemo``), and the last-turn
request of both (what ``zhin trace`` does by default) in seconds — the old engine replays every turn before it,
the Pipeline places only the turns since the last window move. Reported as new/old ratios and 20k/10k ratios
(linear: ≤ 2.2). ``--all-turn-only`` skips the last-turn runs.
"""

from __future__ import annotations

import copy
import gc
import json
import os
import subprocess
import sys
import time
import tracemalloc
from collections import deque
from pathlib import Path
from typing import Any

if __name__ == "__main__" and "--worker" in sys.argv:  # measure the tree named on the command line, not this one
    sys.path.insert(0, sys.argv[sys.argv.index("--worker") + 1])

from zhin_cli.core.model import AssistantMessage, Session, ToolResultMessage
from zhin_cli.pipeline.assemble import Assembler
from zhin_cli.pipeline.config import Config
from zhin_cli.store.jsonl import read_session

ROOT = Path(__file__).resolve().parent.parent
DAY = 86_400_000


def tiled(base: Session, copies: int) -> Session:
    span = base.messages[-1].timestamp - base.messages[0].timestamp + DAY
    rows = max(m.row_id for m in base.messages)
    session = copy.deepcopy(base)
    session.messages, session.summaries = [], []
    for n in range(copies):
        shift = n * span
        for message in copy.deepcopy(base.messages):
            message.timestamp += shift
            message.row_id += n * rows
            if isinstance(message, AssistantMessage):
                message.content = [
                    {**b, "id": f"{b['id']}_{n}"} if b.get("type") == "toolCall" else b for b in message.content
                ]
            if isinstance(message, ToolResultMessage):
                message.tool_call_id = f"{message.tool_call_id}_{n}"
            message_id = getattr(message, "message_id", None)
            if message_id:
                message.message_id = f"{message_id}_{n}"  # type: ignore[union-attr]
            # keep the stored form in step, so the tiled session can be written out as JSONL
            raw = {**message.raw, "id": message.row_id, "timestamp": message.timestamp}
            if message_id:
                raw["messageId"] = message.message_id  # type: ignore[union-attr]
            if isinstance(message, AssistantMessage):
                raw["content"] = message.content
            if isinstance(message, ToolResultMessage):
                raw["toolCallId"] = message.tool_call_id
            message.raw = raw
            session.messages.append(message)
        for summary in copy.deepcopy(base.summaries):
            summary.timestamp += shift
            summary.anchor_row_id += n * rows
            summary.raw = {**summary.raw, "timestamp": summary.timestamp, "anchor_message_id": summary.anchor_row_id}
            session.summaries.append(summary)
    return session


def replay_all(session: Session) -> int:
    config = Config()
    registry, _ = config.registry()
    return sum(1 for _ in Assembler(registry, config).replay(session))


def linearity() -> dict[str, Any]:
    base = read_session(ROOT / "fixtures" / "group-busy.jsonl")
    replay_all(base)  # warm up: tokenizer load, imports
    results = []
    for copies in (1, 2, 4, 8):
        session = tiled(base, copies)
        gc.collect()
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            turns = replay_all(session)
            best = min(best, time.perf_counter() - started)
        tracemalloc.start()
        replay_all(session)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        results.append({"copies": copies, "messages": len(session.messages), "turns": turns, "seconds": round(best, 4),
                        "messages_per_second": round(len(session.messages) / best), "peak_mib": round(peak / 2**20, 2)})
    per_message = [r["seconds"] / r["messages"] for r in results]
    report = {"benchmark": "replay", "results": results,
              "time_per_message_ratio_8x_over_1x": round(per_message[-1] / per_message[0], 3),
              "peak_memory_ratio_8x_over_1x": round(results[-1]["peak_mib"] / results[0]["peak_mib"], 3)}
    print(f"{'copies':>6} {'messages':>8} {'turns':>5} {'seconds':>8} {'msg/s':>8} {'peak MiB':>8}")
    for r in results:
        print(f"{r['copies']:>6} {r['messages']:>8} {r['turns']:>5} {r['seconds']:>8} {r['messages_per_second']:>8} {r['peak_mib']:>8}")
    print(f"time per message, 8x / 1x: {report['time_per_message_ratio_8x_over_1x']} (≈1 = linear)")
    print(f"peak memory, 8x / 1x: {report['peak_memory_ratio_8x_over_1x']}")
    return report


SIZES = {"10k": 70, "20k": 140}  # tiles of the fixture: 10,010 and 20,020 messages


def worker(tree: str, what: str, copies: int) -> dict[str, Any]:
    """One measurement on ``tree`` (already first on sys.path), in a fresh process as a CLI run has it."""
    import zhin_cli

    assert Path(zhin_cli.__file__).resolve().is_relative_to(Path(tree).resolve()), zhin_cli.__file__
    base = read_session(ROOT / "fixtures" / "group-busy.jsonl")
    session = tiled(base, copies)
    config = Config()
    registry, _ = config.registry()
    replay_all(base)  # tokenizer and imports loaded before timing
    gc.collect()
    gc.freeze()  # as the CLI does after loading
    started = time.process_time()  # CPU time: the machine is shared
    if what == "replay":
        count = sum(1 for _ in Assembler(registry, config).replay(session))
    elif what == "prefix-diff":
        from zhin_cli.cache.diff import diff_turns

        count = len(diff_turns(session.session_id, Assembler(registry, config).replay(session)).pairs) + 1
    else:  # the last turn, as `zhin trace` computes it in each tree
        try:
            from zhin_cli.pipeline.facade import Pipeline
        except ImportError:  # before the Pipeline: trace replayed every turn up to the wanted one
            kept = deque(Assembler(registry, config).replay(session), maxlen=1)  # keep only the last, as trace did
            count = len(kept)
        else:
            with Pipeline.open(config) as pipeline:
                count = 1 if pipeline.request(session, turn=-1) is not None else 0
    seconds = time.process_time() - started
    return {"messages": len(session.messages), "requests": count, "seconds": seconds}


def measured(tree: Path, what: str, copies: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, __file__, "--worker", str(tree), what, str(copies)], capture_output=True,
                         text=True, check=True, env=env)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


ALL_TURN = [("replay", SIZES["10k"]), ("replay", SIZES["20k"]), ("prefix-diff", SIZES["10k"]), ("prefix-diff", SIZES["20k"])]
LAST_TURN = [("last-turn", SIZES["10k"]), ("last-turn", SIZES["20k"])]


def compare(old: Path, repeats: int, cases: list[tuple[str, int]] | None = None) -> dict[str, Any]:
    """Best of ``repeats`` per tree, old and new runs interleaved (the machine's load hits both alike). Seconds
    are the worker's CPU time (``time.process_time``: the machine is shared)."""
    new = ROOT
    cases = cases or ALL_TURN + LAST_TURN
    rows = []
    for what, copies in cases:
        best: dict[str, float] = {"old": float("inf"), "new": float("inf")}
        messages = 0
        for _ in range(repeats):
            for label, tree in (("old", old), ("new", new)):
                result = measured(tree, what, copies)
                best[label] = min(best[label], result["seconds"])
                messages = result["messages"]
        row: dict[str, Any] = {"what": what, "messages": messages, "old_seconds": round(best["old"], 3),
                               "new_seconds": round(best["new"], 3), "speedup": round(best["old"] / best["new"], 2)}
        if what != "last-turn":
            row["old_messages_per_second"] = round(messages / best["old"])
            row["new_messages_per_second"] = round(messages / best["new"])
        rows.append(row)
    report: dict[str, Any] = {"old_tree": str(old), "results": rows}
    for what in ("replay", "prefix-diff", "last-turn"):
        # 20k / 10k messages: ≤ 2.2 is linear for the all-turn runs (issue 16), ≤ 1.25 the last-turn target
        sized = {r["messages"]: r for r in rows if r["what"] == what}
        if len(sized) == 2:
            small, large = sorted(sized)
            key = "last_turn_20k_over_10k" if what == "last-turn" else f"{what.replace('-', '_')}_20k_over_10k"
            report[key] = {"old": round(sized[large]["old_seconds"] / sized[small]["old_seconds"], 2),
                           "new": round(sized[large]["new_seconds"] / sized[small]["new_seconds"], 2)}
    return report


def main() -> None:
    report: dict[str, Any] = {"benchmark": "replay", **linearity()}
    old = Path(sys.argv[sys.argv.index("--old") + 1]) if "--old" in sys.argv else None
    repeats = int(sys.argv[sys.argv.index("--repeats") + 1]) if "--repeats" in sys.argv else 2
    if old is not None and (old / "zhin_cli").is_dir():
        cases = ALL_TURN if "--all-turn-only" in sys.argv else None
        comparison = compare(old, repeats, cases)
        report["compared_with"] = comparison
        print(f"\nthis tree vs {old} (best of {repeats}, interleaved):")
        print(f"{'what':>12} {'messages':>8} {'old s':>8} {'new s':>8} {'speed-up':>8}")
        for row in comparison["results"]:
            print(f"{row['what']:>12} {row['messages']:>8} {row['old_seconds']:>8} {row['new_seconds']:>8} {row['speedup']:>7}x")
        for row in comparison["results"]:
            if "new_messages_per_second" in row:
                print(f"{row['what']:>12} {row['messages']:>8} messages/s: old {row['old_messages_per_second']}, "
                      f"new {row['new_messages_per_second']} (new/old {row['speedup']}x)")
        for key, label in (("replay_20k_over_10k", "all-turn replay"), ("prefix_diff_20k_over_10k", "all-turn prefix-diff"),
                           ("last_turn_20k_over_10k", "last-turn request")):
            if key in comparison:
                ratio = comparison[key]
                print(f"{label}, 20k / 10k messages: old {ratio['old']}x, new {ratio['new']}x")
    elif old is not None:
        raise SystemExit(f"no zhin_cli in {old}: --old names an export of an older tree (git archive <ref> | tar -x)")
    if "--json" in sys.argv:
        print(json.dumps(report))


if __name__ == "__main__":
    if "--worker" in sys.argv:
        at = sys.argv.index("--worker")
        print(json.dumps(worker(sys.argv[at + 1], sys.argv[at + 2], int(sys.argv[at + 3]))))
    else:
        main()
