"""Window-sweep benchmark (`make bench`): on the fixed synthetic corpus (benchmarks/economy.py's CORPUS) and on
fixtures/group-busy.jsonl, per provider, the input cost per request of `report window`'s recommended policy,
the default window and upstream's sliding window, checked against issue 18's targets: recommended ≤ 0.5× sliding
and ≤ the default, at a mean context ≥ the default's (the recommendation's floor). Costs depend on the price
table (zhin_cli/pipeline/prices.json), not on the machine; a miss is printed with its size, and the corpus is never
tuned to pass (docs/economy.md).

`--speed`: the sweep's wall time on issue 18's 10k-message session (synth --members 80 --messages 10000
--seed 1, 889 requests), OpenAI, at jobs 1 and 2, against the target (jobs 2 well under a minute); it depends
on the machine and its load, so the load average is printed beside it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from economy import CORPUS  # noqa: E402
from machine import describe  # noqa: E402

from zhin_cli.cache.cost import format_usd  # noqa: E402
from zhin_cli.core.model import Session  # noqa: E402
from zhin_cli.pipeline.config import Config  # noqa: E402
from zhin_cli.pipeline.prices import builtin_prices  # noqa: E402
from zhin_cli.store.jsonl import read_session  # noqa: E402
from zhin_cli.tools.fixtures.synth import SynthOptions, synthesize  # noqa: E402
from zhin_cli.tools.report.economy import CASES  # noqa: E402
from zhin_cli.tools.report.window import PolicyFigures, WindowReport, sweep  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SPEED_SESSION = SynthOptions(members=80, messages=10000, seed=1)  # issue 18 §3's "10k-message session"
SPEED_TARGET_SECONDS = 60.0  # jobs 2, at most
SLIDING_TARGET = 0.5  # recommended ÷ sliding, at most
DEFAULT_TARGET = 1.0  # recommended ÷ default, at most


def verdict(ratio: float, target: float) -> str:
    return "met" if ratio <= target else f"MISSED by {ratio - target:.2f}"


def entry(figures: PolicyFigures) -> dict[str, Any]:
    return {"name": figures.policy.name, "cost_per_request": round(figures.cost_per_request, 8),
            "context_mean": round(figures.context_mean, 1), "hit_rate_later": None if figures.hit_rate_later is None else round(figures.hit_rate_later, 4)}


def summary(report: WindowReport) -> dict[str, Any]:
    chosen, default, upstream = report.recommended, report.default, report.sliding
    return {"provider": report.provider, "model": report.model, "requests": chosen.requests,
            "recommended": entry(chosen), "default": entry(default), "sliding": entry(upstream),
            "recommended_over_sliding": round(chosen.cost_per_request / upstream.cost_per_request, 4),
            "recommended_over_default": round(chosen.cost_per_request / default.cost_per_request, 4),
            "frontier": [f.policy.name for f in report.policies if f.pareto]}


def print_summary(figures: dict[str, Any]) -> None:
    rec, default, upstream = figures["recommended"], figures["default"], figures["sliding"]
    over_sliding, over_default = figures["recommended_over_sliding"], figures["recommended_over_default"]
    print(f"  {figures['provider']:<9} {figures['model']:<16} recommended {rec['name']} "
          f"{format_usd(rec['cost_per_request'])} (context {rec['context_mean']}); default "
          f"{format_usd(default['cost_per_request'])} ({default['context_mean']}); sliding {upstream['name']} "
          f"{format_usd(upstream['cost_per_request'])} ({upstream['context_mean']})")
    print(f"  {'':<9} ÷ sliding {over_sliding:.2f} (target ≤ {SLIDING_TARGET}: "
          f"{verdict(over_sliding, SLIDING_TARGET)}); "
          f"÷ default {over_default:.2f} (target ≤ {DEFAULT_TARGET:g}: "
          f"{verdict(over_default, DEFAULT_TARGET)})")


def speed() -> dict[str, Any]:
    """Seconds of ``sweep`` on SPEED_SESSION at jobs 1 and 2 (the session built once, outside the timing)."""
    session = synthesize(SPEED_SESSION)
    seconds: dict[str, Any] = {}
    for jobs in (1, 2):
        load = os.getloadavg()[0]
        started = time.perf_counter()
        report = sweep([session], Config(), provider="openai", prices=builtin_prices(), jobs=jobs)
        seconds[f"jobs_{jobs}"] = round(time.perf_counter() - started, 1)
        seconds[f"load_{jobs}"] = round(load, 2)
        print(f"  jobs={jobs}: {seconds[f'jobs_{jobs}']:.1f} s for {len(report.policies)} policies × "
              f"{report.default.requests} requests (load average {load:.2f} at the start)")
    met = seconds["jobs_2"] <= SPEED_TARGET_SECONDS
    print(f"  jobs=2 target ≤ {SPEED_TARGET_SECONDS:.0f} s: {'met' if met else 'MISSED'}")
    return seconds


def main() -> None:
    started = time.perf_counter()
    jobs = next((int(a.split("=", 1)[1]) for a in sys.argv if a.startswith("--jobs=")), 1)
    print(f"window benchmark — machine: {describe()}")
    if "--speed" in sys.argv:
        print(f"\n[speed] synth {dataclasses.asdict(SPEED_SESSION)}, default config, openai")
        result = speed()
        if "--json" in sys.argv:
            print(json.dumps({"benchmark": "window-speed", "session": dataclasses.asdict(SPEED_SESSION), **result}))
        return
    quick = "--quick" in sys.argv  # the fixture only: a smoke run of the script
    corpus: list[Session] = [] if quick else [synthesize(options) for options in CORPUS]
    busy = read_session(ROOT / "fixtures" / "group-busy.jsonl")
    prices = builtin_prices()
    report: dict[str, Any] = {"benchmark": "window", "corpus": [dataclasses.asdict(o) for o in CORPUS], "sets": {}}
    for label, sessions in (("synthetic corpus", corpus), ("fixture group-busy.jsonl", [busy])):
        if not sessions:
            continue
        print(f"\n[{label}] {len(sessions)} session(s), default window, built-in prices")
        report["sets"][label] = {}
        for provider in CASES:
            figures = summary(sweep(sessions, Config(), provider=provider, prices=prices, jobs=jobs))
            report["sets"][label][provider] = figures
            print_summary(figures)
    print(f"\nwindow benchmark took {time.perf_counter() - started:.0f} s (jobs={jobs})")
    if "--json" in sys.argv:
        print(json.dumps(report, ensure_ascii=False))


if __name__ == "__main__":
    main()
