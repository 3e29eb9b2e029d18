"""Replay benchmark: messages per second and how cost grows with session length (`make bench`).

Sessions of 1×, 2×, 4× and 8× the busy group fixture (copies shifted in time, ids re-mapped) are
replayed turn by turn. Linear growth means time per message stays flat: the report gives the ratio
(time per message at 8×) / (time per message at 1×), which should stay near 1. Peak Python memory per size
comes from tracemalloc in a separate pass. Ratios within one run are comparable; absolute numbers
depend on the machine.
"""

from __future__ import annotations

import copy
import gc
import json
import sys
import time
import tracemalloc
from pathlib import Path

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


def main() -> None:
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
    if "--json" in sys.argv:
        print(json.dumps(report))


if __name__ == "__main__":
    main()
