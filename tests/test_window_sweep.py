"""``zhin report window``: the grid, one cost definition (a policy's cost is Σ ``Cost.of`` over the shared replay
loop), the Pareto marks and the recommendation on hand-made figures (each with a case that must not trigger),
the JSON contract, jobs-independence, and the command's one-line errors."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from zhin_cli.cache.cost import Cost, CostTotals
from zhin_cli.cache.replay import replay_cache
from zhin_cli.core.errors import UsageError
from zhin_cli.pipeline.config import Config
from zhin_cli.pipeline.facade import Pipeline
from zhin_cli.pipeline.prices import builtin_prices
from zhin_cli.pipeline.window import WindowConfig
from zhin_cli.store.jsonl import read_session
from zhin_cli.tools.report.window import (
    Policy,
    PolicyFigures,
    WindowReport,
    frontier_picture,
    pareto,
    policy_grid,
    recommend,
    sweep,
    target,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
BUSY = FIXTURES / "group-busy.jsonl"
POLICY_KEYS = {"name", "kind", "window", "requests", "cost_per_request", "cost", "hit_rate_later", "limit_later",
               "context_mean", "context_min", "pareto"}


@pytest.fixture(scope="module")
def busy_report() -> WindowReport:
    return sweep([read_session(BUSY)], Config(), provider="openai", prices=builtin_prices())


# --- the grid -----------------------------------------------------------------------------------------


def test_grid_names_the_base_default_and_keeps_equal_windows_once() -> None:
    grid = policy_grid(WindowConfig())
    names = [p.name for p in grid]
    assert names[:2] == ["default", "sliding 80→79"]
    assert 17 <= len(grid) <= 22
    assert "messages 80→40" not in names  # the default window is 80 → half = 40: kept once, as "default"
    assert {"messages 40→20", "messages 80→60", "blocks 16→8", "no cap"} <= set(names)
    assert len({(p.window.max_messages, p.window.keep_after_cut, p.window.max_blocks, p.window.keep_blocks_after_cut)
                for p in grid}) == len(grid)
    blocks = next(p for p in grid if p.name == "blocks 16→8")
    assert (blocks.kind, blocks.window.max_messages, blocks.window.max_blocks, blocks.window.cut_blocks_to) == ("blocks", None, 16, 8)
    assert next(p for p in grid if p.name.startswith("sliding")).window.cut_to == 79


def test_grid_keeps_grid_policies_a_different_base_does_not_equal() -> None:
    # negative control: a base of 90 messages (cut to 45) equals no grid pair, so "messages 80→40" stays
    grid = policy_grid(WindowConfig(max_messages=90, keep_membership_events=7))
    names = [p.name for p in grid]
    assert names[:2] == ["default", "sliding 90→89"] and "messages 80→40" in names
    assert {p.window.keep_membership_events for p in grid} == {7}  # the base's other settings are kept


# --- one cost definition --------------------------------------------------------------------------------


def test_policy_cost_is_the_sum_of_cost_of_over_the_shared_replay(busy_report: WindowReport) -> None:
    price = builtin_prices().choose("openai", "gpt-4o")
    assert price is not None
    for name in ("messages 40→20", "default", "sliding 80→79"):
        figures = next(f for f in busy_report.policies if f.policy.name == name)
        config = dataclasses.replace(Config(), window=figures.policy.window)
        with Pipeline.open(config, provider="openai", model="gpt-4o") as pipeline:
            replayed = list(replay_cache(read_session(BUSY), pipeline, "o200k_base"))
        expected = CostTotals.of(Cost.of(r.outcome, price.price) for r in replayed)
        assert figures.cost == expected
        # by hand: OpenAI bills uncached at input, cached at cached_input, no write premium
        usd = (expected.uncached_tokens * 2.5 + expected.cached_tokens * 1.25) / 1e6
        assert expected.cache_write_tokens == 0 and figures.cost.usd == pytest.approx(usd, rel=1e-12)
        later = [r for r in replayed if not r.first]
        prompt = sum(r.outcome.prompt_tokens for r in later)
        assert figures.hit_rate_later == pytest.approx(sum(r.outcome.read for r in later) / prompt)
        assert figures.limit_later == pytest.approx(1 - sum(r.new_tokens for r in later) / prompt)
        contexts = [r.request.window.messages for r in replayed]
        assert (figures.context_mean, figures.context_min) == (sum(contexts) / len(contexts), min(contexts))
    short = next(f for f in busy_report.policies if f.policy.name == "messages 40→20")
    assert short.cost.usd < busy_report.default.cost.usd  # the windows differ, so do their bills


def test_anthropic_bills_cache_writes_at_their_premium() -> None:
    report = sweep([read_session(BUSY)], Config(), provider="anthropic", prices=builtin_prices())
    assert report.model == "claude-sonnet-5"
    cost = report.default.cost
    assert cost.cache_write_tokens > 0 and cost.cached_tokens > 0
    # at the input price the writes would cost less: the premium is billed
    flat = (cost.uncached_tokens * 2.0 + cost.cached_tokens * 0.2 + cost.cache_write_tokens * 2.0) / 1e6
    assert cost.usd > flat


def test_target_takes_economy_case_and_its_minimum_for_its_model_only() -> None:
    assert target("anthropic", None, Config()) == target("anthropic", "claude-sonnet-5", Config())
    assert target("anthropic", None, Config()).min_tokens == 1024
    assert target("anthropic", "claude-haiku-4-5", Config()).min_tokens is None  # another model: its profile's rule
    assert target("openai", None, Config()).model == "gpt-4o"


# --- frontier and recommendation on hand-made figures ----------------------------------------------------


def figures(name: str, usd_per_request: float, context: float) -> PolicyFigures:
    policy = Policy(name, "messages", WindowConfig())
    return PolicyFigures(policy, CostTotals(requests=10, usd=usd_per_request * 10), 0.5, 0.9, context, 1)


def test_pareto_marks_only_undominated_points() -> None:
    points = [(1.0, 10.0), (2.0, 20.0), (3.0, 15.0), (2.0, 20.0), (0.5, 5.0), (1.0, 9.0)]
    marks = pareto(points)
    assert marks == [True, True, False, True, True, False]
    # (3, 15) costs more than (2, 20) and keeps less; (1, 9) costs the same as (1, 10) and keeps less: dominated;
    # equal points are both on the frontier (neither is strictly better)


def test_recommended_is_the_cheapest_keeping_enough_context() -> None:
    options = [figures("cheap-short", 0.001, 20.0), figures("mid", 0.003, 45.0), figures("dear", 0.005, 60.0),
               figures("mid-tie", 0.003, 50.0)]
    assert recommend(options, 40.0).policy.name == "mid-tie"  # the cheaper cheap-short keeps too little
    assert recommend(options, 55.0).policy.name == "dear"
    assert recommend(options, 10.0).policy.name == "cheap-short"  # control: with a low floor the cheapest wins
    with pytest.raises(UsageError, match=r"--min-context 61: no policy keeps that much context \(largest mean: 60.0 messages, dear\)"):
        recommend(options, 61.0)


def test_default_floor_is_the_default_windows_context(busy_report: WindowReport) -> None:
    assert busy_report.min_context == busy_report.default.context_mean
    fitting = [f for f in busy_report.policies if f.context_mean >= busy_report.min_context]
    assert busy_report.recommended.cost_per_request == min(f.cost_per_request for f in fitting)
    assert busy_report.recommended.cost_per_request <= busy_report.default.cost_per_request
    cheapest = min(busy_report.policies, key=lambda f: f.cost_per_request)
    assert cheapest.context_mean < busy_report.min_context and cheapest is not busy_report.recommended


# --- JSON contract and determinism ----------------------------------------------------------------------


def test_json_shape(busy_report: WindowReport) -> None:
    data = busy_report.as_dict()
    assert set(data) == {"version", "provider", "model", "encoding", "price", "notes", "min_context", "sessions",
                         "policies", "recommended", "default", "sliding", "cache_model"}
    assert data["cache_model"] == "timed"  # docs/figures.md: the sweep bills as the session happened
    assert (data["version"], data["provider"], data["model"], data["notes"]) == (1, "openai", "gpt-4o", [])
    assert data["sessions"] == [read_session(BUSY).session_id]
    assert data["price"]["input"] == 2.5
    for entry in [*data["policies"], data["recommended"], data["default"], data["sliding"]]:
        assert set(entry) == POLICY_KEYS
        assert set(entry["window"]) == {"max_messages", "cut_to", "max_blocks", "cut_blocks_to"}
        assert set(entry["cost"]) == {"total", "per_request", "requests", "uncached_tokens", "cached_tokens",
                                      "cache_write_tokens"}
        assert entry["cost_per_request"] == entry["cost"]["per_request"] and entry["requests"] == 16
    assert data["default"]["window"] == {"max_messages": 80, "cut_to": 40, "max_blocks": None, "cut_blocks_to": None}
    assert data["sliding"]["name"] == "sliding 80→79" and data["sliding"]["kind"] == "sliding"
    json.dumps(data)


def test_same_report_for_every_jobs_value(busy_report: WindowReport) -> None:
    parallel = sweep([read_session(BUSY)], Config(), provider="openai", prices=builtin_prices(), jobs=2)
    assert parallel.as_dict() == busy_report.as_dict()
    assert parallel == busy_report  # unrounded figures too


def test_two_sessions_pool_each_policy_over_both_in_session_order(busy_report: WindowReport) -> None:
    from zhin_cli.tools.fixtures.synth import SynthOptions, synthesize

    small = synthesize(SynthOptions(members=8, messages=120, seed=3))
    alone = sweep([small], Config(), provider="openai", prices=builtin_prices())
    # negative control: the two sessions differ in requests, so a job given to the wrong policy shows
    assert alone.default.requests not in (0, busy_report.default.requests)
    both = sweep([read_session(BUSY), small], Config(), provider="openai", prices=builtin_prices(), jobs=2)
    assert both == sweep([read_session(BUSY), small], Config(), provider="openai", prices=builtin_prices(), jobs=1)
    for pooled, first, second in zip(both.policies, busy_report.policies, alone.policies, strict=True):
        assert pooled.policy == first.policy == second.policy
        assert pooled.requests == first.requests + second.requests
        assert pooled.cost.usd == pytest.approx(first.cost.usd + second.cost.usd, rel=1e-12)
        assert pooled.context_min == min(first.context_min, second.context_min)


def test_a_pickled_session_is_unpickled_once_per_worker() -> None:
    from zhin_cli.tools.report import window as windowsweep

    session = read_session(BUSY)
    pickled = windowsweep.PickledSession.of(session)
    windowsweep._WORKER_SESSIONS.clear()
    first = windowsweep._session_of(pickled)
    assert first == session and first is not session
    assert windowsweep._session_of(windowsweep.PickledSession.of(session)) is first  # same bytes: the memo
    other = windowsweep._session_of(windowsweep.PickledSession.of(dataclasses.replace(session, session_id="other")))
    assert other is not first and other.session_id == "other"  # control: another session is its own
    assert windowsweep._session_of(session) is session  # in this process: no pickle at all
    windowsweep._WORKER_SESSIONS.clear()


# --- the replay loop without prefix-diff's chunks --------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_replay_without_chunks_gives_the_same_figures(provider: str) -> None:
    def replayed(chunks: bool) -> list[Any]:
        with Pipeline.open(Config(), provider=provider) as pipeline:
            return list(replay_cache(read_session(BUSY), pipeline, "o200k_base", min_tokens=1024, chunks=chunks))

    full, lean = replayed(True), replayed(False)
    assert [(r.outcome, r.new_tokens, r.first, r.position) for r in lean] == \
        [(r.outcome, r.new_tokens, r.first, r.position) for r in full]
    assert [r.wire.plan.digests for r in lean] == [r.wire.plan.digests for r in full]
    assert all(r.wire.chunks for r in full) and not any(r.wire.chunks for r in lean)  # control: chunks when asked
    assert sum(r.new_tokens for r in full) > 0


def test_new_tokens_takes_the_callers_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given the two plans, new_tokens counts with them — the same figure as building them — and builds none (the
    builder raises once the plans are made): a function that ignored the plans it is given fails here."""
    from zhin_cli.cache import plan
    from zhin_cli.cache import replay as cachereplay
    from zhin_cli.cache.serialize import wire_of
    from zhin_cli.core.tokens import counter

    with Pipeline.open(Config(), provider="openai") as pipeline:
        requests = list(pipeline.replay(read_session(BUSY)))[:6]
    count = counter("o200k_base")
    pairs = list(zip(requests, requests[1:], strict=False))
    built = [cachereplay.new_tokens(previous, current, count) for previous, current in pairs]
    plans = [(plan(p.request, wire_of(p), "o200k_base"), plan(c.request, wire_of(c), "o200k_base")) for p, c in pairs]

    def no_build(*args: object, **kwargs: object) -> None:
        raise AssertionError("a plan was built although the caller gave both")

    monkeypatch.setattr(cachereplay, "cache_plan", no_build)
    assert [cachereplay.new_tokens(p, c, count, given) for (p, c), given in zip(pairs, plans, strict=True)] == built
    assert cachereplay.new_tokens(requests[0], requests[0], count, (plans[0][0], plans[0][0])) == 0 < built[0]


def test_new_tokens_uses_the_plans_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plans a caller passes are the ones counted, and no plan is built again: a function that ignored them
    would build its own (the patched builder raises) and could not tell a wrong plan from the right one."""
    from zhin_cli.cache import plan
    from zhin_cli.cache import replay as cachereplay
    from zhin_cli.cache.serialize import wire_of
    from zhin_cli.core.tokens import counter

    with Pipeline.open(Config(), provider="openai") as pipeline:
        requests = list(pipeline.replay(read_session(BUSY)))[:3]
    count = counter("o200k_base")
    plans = [plan(r.request, wire_of(r), "o200k_base") for r in requests]
    expected = cachereplay.new_tokens(requests[1], requests[2], count)

    def no_build(*args: object, **kwargs: object) -> None:
        raise AssertionError("a plan was built although the caller gave both")

    monkeypatch.setattr(cachereplay, "cache_plan", no_build)
    assert cachereplay.new_tokens(requests[1], requests[2], count, (plans[1], plans[2])) == expected
    # the current request counted with the first request's plan: a function that read its own plan would not change
    assert cachereplay.new_tokens(requests[1], requests[2], count, (plans[1], plans[0])) != expected


def test_message_keys_are_equal_exactly_when_the_canonical_json_is() -> None:
    from zhin_cli.cache.replay import _message_key
    from zhin_cli.wire import canonical

    text = {"type": "text", "text": "[id:m1] 早"}
    messages: list[Any] = [
        {"role": "user", "content": "[id:m1] 早"}, {"content": "[id:m1] 早", "role": "user"},
        {"role": "assistant", "content": "[id:m1] 早"}, {"role": "user", "content": "[id:m1] 早 "},
        {"role": "user", "content": "[id:m1] 早", "name": "x"}, {"role": "user"}, {"content": "[id:m1] 早"},
        {"role": "user", "content": [text]}, {"role": "user", "content": [dict(text)]},
        {"role": "user", "content": [text, text]}, {"role": "user", "content": [{**text, "cache_control": {"type": "ephemeral"}}]},
        {"role": "user", "content": []}, {"role": "user", "content": ["[id:m1] 早"]}, {"role": 1, "content": "x"},
        ["user", "[id:m1] 早"], ("user", "[id:m1] 早"), "[id:m1] 早",
    ]
    for a in messages:
        for b in messages:
            assert (_message_key(a) == _message_key(b)) == (canonical(a) == canonical(b)), (a, b)


def test_frontier_picture_labels_and_width(busy_report: WindowReport) -> None:
    picture = frontier_picture(busy_report)
    assert picture == frontier_picture(busy_report)
    assert all(len(line) <= 80 for line in picture)
    assert busy_report.recommended is busy_report.default  # one policy, one mark: R (no D is drawn)
    assert "R recommended, default: default" in picture and "S sliding: sliding 80→79" in picture
    legend = picture.index("● Pareto frontier  · dominated")
    plot = "\n".join(picture[1:legend])
    assert "R" in plot and "●" in plot
    # every mark the legend names is drawn (issue 31: a legend's "D default" with no D)
    assert all(line[0] in plot for line in picture[legend + 1:])


def test_no_bot_reply_is_a_usage_error() -> None:
    from builders import T0, History

    h = History()
    h.user(T0, "10002", "早", display_name="小明")
    with pytest.raises(UsageError, match="no bot replies"):
        sweep([h.session()], Config(), provider="openai", prices=builtin_prices())


# --- the command ---------------------------------------------------------------------------------------


def test_cli_text(zhin) -> None:
    result = zhin("report", "window", BUSY, "-j", "1")
    assert result.returncode == 0, result.stderr
    assert "messages 40→20" in result.stdout and "blocks 16→8" in result.stdout and "no cap" in result.stdout
    assert re.search(r"^R recommended(, default)?: ", result.stdout, re.M)  # one line per mark drawn (issue 31)
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("recommended: ") and "× sliding" in last and "× default), context mean" in last
    assert result.stderr == ""


def test_cli_json_and_price_note(zhin) -> None:
    result = zhin("report", "window", BUSY, "--provider", "deepseek", "--json", "-j", "1")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert (data["provider"], data["model"], data["notes"]) == ("deepseek", "deepseek-chat", [])
    assert result.stderr == ""  # control: a known model has its own row, no note
    noted = zhin("report", "window", BUSY, "--model", "mystery-1", "--json", "-j", "1")
    assert noted.returncode == 0, noted.stderr
    notes = json.loads(noted.stdout)["notes"]
    assert len(notes) == 1 and "mystery-1" in notes[0]
    assert noted.stderr.strip() == f"zhin: note: {notes[0]}"


def test_cli_prices_file_changes_the_bill(zhin, tmp_path: Path) -> None:
    rows = {"version": 1, "providers": {"openai": {"default": "gpt-4o", "models": {"gpt-4o": {
        "input": 25.0, "cached_input": 12.5, "source": "test", "read_on": "2026-12-02"}}}}}
    (tmp_path / "prices.json").write_text(json.dumps(rows), encoding="utf-8")
    base = json.loads(zhin("report", "window", BUSY, "--json", "-j", "1").stdout)
    tenfold = json.loads(zhin("report", "window", BUSY, "--json", "-j", "1", "--prices", "prices.json").stdout)
    assert tenfold["default"]["cost"]["total"] == pytest.approx(10 * base["default"]["cost"]["total"], rel=1e-6)
    assert tenfold["price"]["source"] == "test" and base["price"]["source"] != "test"


def test_cli_min_context_above_every_policy(zhin) -> None:
    result = zhin("report", "window", BUSY, "--min-context", "1000", "-j", "1")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "zhin: error: --min-context 1000: no policy keeps that much context (largest mean: 43.6 messages, messages 100→20)"]
    within = zhin("report", "window", BUSY, "--min-context", "43", "--json", "-j", "1")  # control: reachable
    assert within.returncode == 0 and json.loads(within.stdout)["recommended"]["context_mean"] >= 43


@pytest.mark.parametrize(("provider", "message"), [
    ("nope", "zhin: error: --provider: unknown provider 'nope' (known: "),
    ("gemini", "zhin: error: no prices for provider gemini (rows: anthropic, deepseek, openai"),
])
def test_cli_provider_without_simulation_or_prices(zhin, provider: str, message: str) -> None:
    result = zhin("report", "window", BUSY, "--provider", provider, "-j", "1")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message) and result.stdout == ""
