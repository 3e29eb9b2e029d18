"""Anthropic breakpoint placement: what each placement of the (at most 4) ``cache_control`` breakpoints costs
(issue 18 §4; docs/design-notes.md "Anthropic breakpoint placement").

Every placement of ``zhin_cli.pipeline.providers.anthropic.PLACEMENTS`` renders the same sessions — the fixed
synthetic corpus of benchmarks/economy.py (3 seeds × 2,500 rows) and fixtures/group-busy.jsonl — under the default
window, plus the same corpus 4× busier (every time divided by 4 from the session's start: more member messages
between two bot turns inside the 5-minute cache lifetime, where the 20-block look-back misses), through the one
replay loop (``cache.replay.replay_cache``, a cold cache at each cache group, min_tokens
1,024 as economy's case) and the one cost definition (``Cost.of``, the built-in claude-sonnet-5 row). Printed per
placement: cost per request, the later requests' hit rate (cached ÷ prompt tokens), cache-write tokens per request.
Every figure is a ratio or a token count; none depends on the machine. ``--json`` prints the same as JSON.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from economy import CORPUS  # noqa: E402

from zhin_cli.cache import cached_share  # noqa: E402
from zhin_cli.cache.cost import Cost, CostTotals  # noqa: E402
from zhin_cli.cache.replay import replay_cache  # noqa: E402
from zhin_cli.core.model import Session  # noqa: E402
from zhin_cli.core.tokens import DEFAULT_ENCODING  # noqa: E402
from zhin_cli.pipeline.config import Config  # noqa: E402
from zhin_cli.pipeline.facade import Pipeline  # noqa: E402
from zhin_cli.pipeline.providers import anthropic  # noqa: E402
from zhin_cli.store.jsonl import read_session  # noqa: E402
from zhin_cli.tools.fixtures.synth import synthesize  # noqa: E402
from zhin_cli.tools.report.economy import CASES  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BUSIER = 4  # the "busier" set: the corpus with its clock running this many times faster


def busier(session: Session, factor: int = BUSIER) -> Session:
    """``session`` with every time moved ``factor`` times closer to its first message (same rows, same order)."""
    start = session.messages[0].timestamp

    def moved(timestamp: int) -> int:
        return start + (timestamp - start) // factor

    for timed in (*session.messages, *session.summaries, *session.scene_changes, *session.members):
        timed.timestamp = moved(timed.timestamp)
    return session


@contextmanager
def placement(name: str) -> Iterator[None]:
    """Render with ``name``'s breakpoints for the duration (the module's PLACEMENT is the renderer's behaviour)."""
    kept = anthropic.PLACEMENT
    anthropic.PLACEMENT = name
    try:
        yield
    finally:
        anthropic.PLACEMENT = kept


def measure(sessions: list[Session], name: str) -> dict[str, Any]:
    case = CASES["anthropic"]
    config = Config()
    choice = config.price_table().choose(case.provider, case.model)
    assert choice is not None, "the built-in table has Anthropic rows"
    totals = CostTotals()
    later: list[tuple[int, int]] = []
    breakpoints = requests = 0
    with placement(name):
        for session in sessions:
            with Pipeline.open(config, provider=case.provider, model=case.model) as pipeline:
                for replayed in replay_cache(session, pipeline, DEFAULT_ENCODING, min_tokens=case.min_tokens, limit=False):
                    totals.add(Cost.of(replayed.outcome, choice.price))
                    if not replayed.first:
                        later.append((replayed.outcome.prompt_tokens, replayed.outcome.read))
                    breakpoints += len(replayed.request.cache_breakpoints)
                    requests += 1
    return {"placement": name, "rules": list(anthropic.PLACEMENTS[name]), "requests": requests,
            "cost_per_request": totals.per_request, "hit_rate_later": cached_share(later),
            "writes_per_request": totals.cache_write_tokens / requests if requests else 0.0,
            "uncached_per_request": totals.uncached_tokens / requests if requests else 0.0,
            "breakpoints_per_request": breakpoints / requests if requests else 0.0, "cost": totals.as_dict()}


def main() -> None:
    corpus = {f"synthetic seed {o.seed}": synthesize(o) for o in CORPUS}
    busy = {"group-busy": read_session(ROOT / "fixtures" / "group-busy.jsonl")}
    report: dict[str, Any] = {"benchmark": "anthropic_breakpoints", "model": CASES["anthropic"].model,
                              "chosen": anthropic.PLACEMENT, "sets": {}}
    sets = (("corpus", list(corpus.values())), ("group-busy", list(busy.values())),
            (f"corpus {BUSIER}x busier", [busier(synthesize(o)) for o in CORPUS]))
    for label, sessions in sets:
        report["sets"][label] = [measure(sessions, name) for name in anthropic.PLACEMENTS]
    if "--json" in sys.argv:
        print(json.dumps(report, indent=2))
        return
    print(f"Anthropic {report['model']}, default window, built-in prices; chosen placement: {report['chosen']}")
    for label, rows in report["sets"].items():
        base = rows[0]["cost_per_request"]
        print(f"\n{label} ({rows[0]['requests']} requests)")
        print(f"{'placement':<24} {'$/request':>10} {'vs tail':>8} {'later hit':>9} {'writes/req':>10} "
              f"{'uncached/req':>12} {'bp/req':>6}")
        for row in rows:
            print(f"{row['placement']:<24} {row['cost_per_request']:>10.6f} {row['cost_per_request'] / base:>8.3f} "
                  f"{row['hit_rate_later']:>9.1%} {row['writes_per_request']:>10.0f} {row['uncached_per_request']:>12.0f} "
                  f"{row['breakpoints_per_request']:>6.2f}")


if __name__ == "__main__":
    main()
