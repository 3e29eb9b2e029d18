"""``zhin report window``: which window setting costs least on *these* sessions for the context they keep.

Hit rate alone picks the wrong window: no message cap caches best and costs most (it resends the whole
history). The bill is what an operator pays and the window's context is what the model sees, so the sweep
replays the sessions under a grid of window policies (``policy_grid``: message pairs, block pairs, no cap,
upstream's sliding window and the user's own window) and reports, per policy, the cost per request (the one
cost definition, ``Cost.of``, over the shared replay loop ``cache.replay.replay_cache`` — so a policy's figures
are ``report economy``'s for the same window), the later-request hit rate, the physical limit and the context
kept; then the cost/context Pareto frontier and the cheapest policy that keeps at least the context asked for.

Every figure is pooled over the sessions (rates token-weighted, context per request). Jobs are (policy,
session) pairs run with ``core.parallel.ordered_map`` and pooled in session order, so the report is the same for
every ``jobs`` value (float sums included). A job carries its session pickled once (``PickledSession``), which
a worker unpickles once for all the policies it replays it under.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import pickle
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypedDict

from zhin_cli.cache import cached_share
from zhin_cli.cache.cost import Cost, CostTotals, CostTotalsDoc
from zhin_cli.core.errors import UsageError
from zhin_cli.core.model import Session
from zhin_cli.core.tokens import DEFAULT_ENCODING
from zhin_cli.core.tokens import counter as shared_counter
from zhin_cli.pipeline.config import Config
from zhin_cli.pipeline.context import RunContext
from zhin_cli.pipeline.prices import Price, PriceChoice, PriceTable
from zhin_cli.pipeline.window import WindowConfig, sliding

WINDOW_VERSION = 1
# Which cache the figures meet (docs/figures.md): timed — cold at the first request of each cache group, warm after
# it — as report economy's (``economy.CACHE_MODEL``), under the same key
CACHE_MODEL = "timed"
PolicyKind = Literal["messages", "blocks", "none", "sliding"]

# (max_messages, cut_to) around the default 80→40: shorter and longer windows, deep cuts (a long window cut
# far back breaks the prefix rarely and still keeps more context than the default: 100→20 costs less than 80→40)
# and gentle ones (80→60)
MESSAGE_PAIRS: tuple[tuple[int, int], ...] = (
    (40, 20), (60, 15), (60, 30), (80, 20), (80, 40), (80, 60), (100, 20), (100, 50), (120, 30), (120, 60),
    (160, 40), (160, 80), (240, 120))
# (max_blocks, cut_blocks_to) with no message cap: the prefix breaks once per (max − cut) bot turns
BLOCK_PAIRS: tuple[tuple[int, int], ...] = ((6, 3), (8, 2), (8, 4), (12, 3), (12, 6), (16, 8), (24, 12))
DEFAULT_NAME = "default"


@dataclass(frozen=True)
class Policy:
    """One window setting of the sweep."""

    name: str
    kind: PolicyKind
    window: WindowConfig

    def window_dict(self) -> dict[str, int | None]:
        """The limits as the window stage applies them (a cut given as None is the half it means)."""
        w = self.window
        return {"max_messages": w.max_messages, "cut_to": w.keep_after_cut,
                "max_blocks": w.max_blocks, "cut_blocks_to": w.keep_blocks_after_cut}


def _effective(window: WindowConfig) -> tuple[int | None, ...]:
    """Two windows with the same key cut every session the same way (``cut_to`` None is half)."""
    return (window.max_messages, window.keep_after_cut, window.max_blocks, window.keep_blocks_after_cut,
            window.keep_membership_events)


def _kind(window: WindowConfig) -> PolicyKind:
    if window.max_messages is not None:
        return "messages"
    return "blocks" if window.max_blocks is not None else "none"


def policy_grid(base: WindowConfig) -> list[Policy]:
    """About 20 policies around ``base`` (the user's window, named ``default``, always in the grid); equal
    windows once (``default`` first, then ``sliding``, then the grid's own name). Every policy keeps the base's
    other settings (membership events carried over)."""
    def messages(cap: int, cut: int) -> WindowConfig:
        return dataclasses.replace(base, max_messages=cap, cut_to=cut, max_blocks=None, cut_blocks_to=None)

    def blocks(cap: int, cut: int) -> WindowConfig:
        return dataclasses.replace(base, max_messages=None, cut_to=None, max_blocks=cap, cut_blocks_to=cut)

    upstream = sliding(base)
    grid = [Policy(f"messages {cap}→{cut}", "messages", messages(cap, cut)) for cap, cut in MESSAGE_PAIRS]
    grid += [Policy(f"blocks {cap}→{cut}", "blocks", blocks(cap, cut)) for cap, cut in BLOCK_PAIRS]
    grid.append(Policy("no cap", "none", dataclasses.replace(base, max_messages=None, cut_to=None, max_blocks=None,
                                                             cut_blocks_to=None)))
    sliding_name = f"sliding {upstream.max_messages}→{upstream.keep_after_cut}" if upstream.max_messages else "sliding (no cap)"
    chosen = [Policy(DEFAULT_NAME, _kind(base), base), Policy(sliding_name, "sliding", upstream), *grid]
    seen: set[tuple[int | None, ...]] = set()
    unique: list[Policy] = []
    for policy in chosen:
        key = _effective(policy.window)
        if key not in seen:
            seen.add(key)
            unique.append(policy)
    return unique


# --- one (policy, session) replay -----------------------------------------------------------------------


@dataclass(frozen=True)
class SessionFigures:
    """What one policy did on one session, per request in order (pooled later, in input order)."""

    costs: tuple[Cost, ...]
    later: tuple[tuple[int, int, int], ...]  # (prompt, read, new tokens) of the requests after their group's first
    contexts: tuple[int, ...]  # messages of context each request kept


@dataclass(frozen=True)
class PickledSession:
    """A session pickled once in the parent for every job that replays it: a worker unpickles it the first time
    it meets it (``_session_of``), not once per policy — for a 10k-message session that was 1.3 s a job, and
    0.9 s a job more in the parent to pickle it."""

    digest: str  # of ``data``: the worker's memo key
    data: bytes

    @classmethod
    def of(cls, session: Session) -> PickledSession:
        data = pickle.dumps(session, protocol=pickle.HIGHEST_PROTOCOL)
        return cls(hashlib.blake2b(data, digest_size=16).hexdigest(), data)


_WORKER_SESSIONS: OrderedDict[str, Session] = OrderedDict()  # a worker's unpickled sessions, the latest last
_WORKER_SESSIONS_KEPT = 2  # jobs come session after session: the one in hand and the next suffice


def _session_of(given: Session | PickledSession) -> Session:
    if isinstance(given, Session):
        return given
    session = _WORKER_SESSIONS.get(given.digest)
    if session is None:
        session = pickle.loads(given.data)  # noqa: S301 - our own pickle of a Session, made by the parent
        _WORKER_SESSIONS[given.digest] = session
        while len(_WORKER_SESSIONS) > _WORKER_SESSIONS_KEPT:
            _WORKER_SESSIONS.popitem(last=False)
    else:
        _WORKER_SESSIONS.move_to_end(given.digest)
    return session


@dataclass(frozen=True)
class WindowJob:
    """One (policy, session) replay as a worker receives it: data only (core/parallel.py); the ``Config``
    carries its ``PluginSource``, so plugins are trusted exactly as in the sequential run. The session is a
    ``PickledSession`` when the job goes to a worker, the ``Session`` itself in this process."""

    session: Session | PickledSession
    config: Config
    window: WindowConfig
    provider: str
    model: str
    encoding: str
    min_tokens: int | None
    price: Price


def window_job(job: WindowJob) -> SessionFigures:
    from zhin_cli.cache.replay import replay_cache
    from zhin_cli.pipeline.facade import Pipeline

    costs: list[Cost] = []
    later: list[tuple[int, int, int]] = []
    contexts: list[int] = []
    config = dataclasses.replace(job.config, window=job.window)
    session = _session_of(job.session)
    with Pipeline.open(config, provider=job.provider, model=job.model) as pipeline:
        # no JSON chunks: the sweep reads the cache plan only (prefix-diff's byte view is not needed)
        for replayed in replay_cache(session, pipeline, job.encoding, min_tokens=job.min_tokens, limit=True,
                                     chunks=False):
            outcome = replayed.outcome
            costs.append(Cost.of(outcome, job.price))
            contexts.append(replayed.request.window.messages)
            if not replayed.first:
                later.append((outcome.prompt_tokens, outcome.read, replayed.new_tokens))
    return SessionFigures(tuple(costs), tuple(later), tuple(contexts))


# --- pooled figures and the report ----------------------------------------------------------------------


class PolicyDoc(TypedDict):
    """One policy of ``report window --json`` (``PolicyFigures.as_dict``): costs rounded to 8 places, the mean
    context to one decimal, hit rates to four."""

    name: str
    kind: PolicyKind
    window: dict[str, int | None]
    requests: int
    cost_per_request: float
    cost: CostTotalsDoc
    hit_rate_later: float | None
    limit_later: float | None
    context_mean: float
    context_min: int
    pareto: bool


@dataclass(frozen=True)
class PolicyFigures:
    """One policy pooled over every session."""

    policy: Policy
    cost: CostTotals
    hit_rate_later: float | None
    limit_later: float | None
    context_mean: float
    context_min: int
    pareto: bool = False

    @property
    def requests(self) -> int:
        return self.cost.requests

    @property
    def cost_per_request(self) -> float:
        return self.cost.per_request or 0.0

    @staticmethod
    def pooled(policy: Policy, sessions: Sequence[SessionFigures]) -> PolicyFigures:
        costs = CostTotals.of(c for s in sessions for c in s.costs)
        later = [row for s in sessions for row in s.later]
        contexts = [c for s in sessions for c in s.contexts]
        prompt = sum(p for p, _, _ in later)
        hit = cached_share((p, r) for p, r, _ in later) if prompt else None
        limit = 1 - sum(n for _, _, n in later) / prompt if prompt else None
        return PolicyFigures(policy, costs, hit, limit, sum(contexts) / len(contexts), min(contexts))

    def as_dict(self) -> PolicyDoc:
        return {"name": self.policy.name, "kind": self.policy.kind, "window": self.policy.window_dict(),
                "requests": self.requests, "cost_per_request": round(self.cost_per_request, 8),
                "cost": self.cost.as_dict(), "hit_rate_later": _round(self.hit_rate_later, 4),
                "limit_later": _round(self.limit_later, 4), "context_mean": round(self.context_mean, 1),
                "context_min": self.context_min, "pareto": self.pareto}


def _round(value: float | None, places: int) -> float | None:
    return None if value is None else round(value, places)


def pareto(points: Sequence[tuple[float, float]]) -> list[bool]:
    """For each (cost, context) point: True when no other point costs no more and keeps no less context, one
    of the two strictly (equal points are both on the frontier)."""
    def dominated(i: int) -> bool:
        cost, context = points[i]
        return any(c <= cost and k >= context and (c < cost or k > context) for c, k in points)

    return [not dominated(i) for i in range(len(points))]


def recommend(figures: Sequence[PolicyFigures], min_context: float) -> PolicyFigures:
    """The cheapest policy whose mean context is ≥ ``min_context`` (a tie: the one keeping more context, then
    grid order); none → a usage error naming the largest context on offer."""
    fitting = [f for f in figures if f.context_mean >= min_context]
    if not fitting:
        widest = max(figures, key=lambda f: f.context_mean)
        raise UsageError(f"--min-context {min_context:g}: no policy keeps that much context (largest mean: "
                         f"{widest.context_mean:.1f} messages, {widest.policy.name})")
    return min(fitting, key=lambda f: (f.cost_per_request, -f.context_mean))


class WindowDoc(TypedDict):
    """``report window --json`` (``WindowReport.as_dict``)."""

    version: int
    provider: str
    model: str
    encoding: str
    cache_model: str  # "timed" (docs/figures.md), as report economy --json names it; added in version 1
    price: dict[str, object]  # Price.as_dict, passed through
    notes: list[str]
    min_context: float
    sessions: list[str]
    policies: list[PolicyDoc]
    recommended: PolicyDoc
    default: PolicyDoc
    sliding: PolicyDoc


@dataclass(frozen=True)
class WindowReport:
    provider: str
    model: str
    encoding: str
    price: Price
    notes: tuple[str, ...]
    min_context: float
    sessions: tuple[str, ...]
    policies: tuple[PolicyFigures, ...]
    recommended: PolicyFigures
    default: PolicyFigures
    sliding: PolicyFigures

    def as_dict(self) -> WindowDoc:
        return {"version": WINDOW_VERSION, "provider": self.provider, "model": self.model, "encoding": self.encoding,
                "cache_model": CACHE_MODEL, "price": self.price.as_dict(), "notes": list(self.notes), "min_context": round(self.min_context, 1),
                "sessions": list(self.sessions), "policies": [p.as_dict() for p in self.policies],
                "recommended": self.recommended.as_dict(), "default": self.default.as_dict(),
                "sliding": self.sliding.as_dict()}


@dataclass(frozen=True)
class Target:
    """The provider and model a sweep bills, and the cache rule it simulates with (``min_tokens``)."""

    provider: str
    model: str
    min_tokens: int | None = None


def target(provider: str, model: str | None, config: Config) -> Target:
    """``report economy``'s case for ``provider`` (its model; Anthropic's 1,024-token minimum for that model),
    ``model`` overriding it; a provider without a case: ``model``, else the config's, else the provider's default
    (``pipeline/models.py``: never another provider's model)."""
    from zhin_cli.pipeline.models import default_model
    from zhin_cli.pipeline.providers import PROVIDERS, unknown_provider
    from zhin_cli.tools.report.economy import CASES

    if provider not in PROVIDERS:
        raise UsageError(f"--provider: {unknown_provider(provider)}")
    case = CASES.get(provider)  # a provider marked economy has one (its default model and minimum)
    chosen = model or (case.model if case else None) or config.model or default_model(provider)
    # the case's minimum belongs to its model; another model keeps its profile's rule
    return Target(provider, chosen, case.min_tokens if case is not None and case.model == chosen else None)


def session_target(chosen: Target, session: Session, *, model: str | None) -> Target:
    """The target of one session's replays: ``trace``'s model (``pipeline/models.py``) — the session's stored model
    where it is the provider's, unless a model was chosen (``model``, or a target not on the provider's default)."""
    from zhin_cli.pipeline.models import belongs, default_model
    from zhin_cli.tools.report.economy import stored_model

    stored = stored_model(session)
    if model or stored is None or stored == chosen.model or chosen.model != default_model(chosen.provider) \
            or not belongs(chosen.provider, stored):
        return chosen
    return Target(chosen.provider, stored)  # the case's cache minimum belongs to the case's model


def sweep(sessions: Sequence[Session], config: Config, *, provider: str, model: str | None = None,
          prices: PriceTable, min_context: float | None = None, min_tokens: int | None = None,
          encoding: str = DEFAULT_ENCODING, jobs: int = 1,
          progress: Callable[[int, int], None] | None = None) -> WindowReport:
    """Replay ``sessions`` under every policy of ``policy_grid(config.window)`` for ``provider`` (``model``:
    default economy's case) and bill each request at its price row. ``min_context``: the mean context the
    recommendation must keep (None: the default window's); ``min_tokens``: the cache minimum, overriding the
    case's. ``progress(done, total)`` over the (policy, session) replays."""
    from zhin_cli.core.parallel import check_jobs, ordered_map

    chosen = target(provider, model, config)
    _choose(prices, chosen.provider, chosen.model)  # no prices: said before anything else
    if not sessions:
        raise UsageError("no sessions to replay")
    targets = [session_target(chosen, session, model=model) for session in sessions]
    models = list(dict.fromkeys(t.model for t in targets))  # each session billed at its own model, as trace bills it
    choices = {name: _choose(prices, chosen.provider, name) for name in models}
    choice = choices[models[0]]
    workers = check_jobs(jobs)
    policies = policy_grid(config.window)
    # Session by session (a worker meets each session's pickle in consecutive jobs: unpickled once, _session_of),
    # and in each the grid backwards: its widest windows (no cap, the big block pairs) cost most, so they start
    # first and the workers finish together on short ones instead of one waiting for the other's widest.
    carried = [PickledSession.of(s) if workers > 1 else s for s in sessions]
    backwards = policies[::-1]
    work = [WindowJob(session, config, policy.window, chosen.provider, aim.model, encoding,
                      min_tokens if min_tokens is not None else aim.min_tokens, choices[aim.model].price)
            for session, aim in zip(carried, targets, strict=True) for policy in backwards]
    if progress is not None:
        progress(0, len(work))
    results = list(ordered_map(window_job, work, jobs=workers, done=progress,
                               prepare=functools.partial(shared_counter, encoding)))
    count = len(policies)
    per_policy = [results[count - 1 - i::count] for i in range(count)]  # grid order, each in session order
    if not any(s.costs for s in per_policy[0]):
        raise UsageError("the sessions have no bot replies: no request to replay")
    pooled = [PolicyFigures.pooled(policy, figures) for policy, figures in zip(policies, per_policy, strict=True)]
    marks = pareto([(f.cost_per_request, f.context_mean) for f in pooled])
    pooled = [dataclasses.replace(f, pareto=mark) for f, mark in zip(pooled, marks, strict=True)]
    default = next(f for f in pooled if f.policy.name == DEFAULT_NAME)
    upstream = _sliding_of(pooled, config.window)
    floor = default.context_mean if min_context is None else min_context + 0.0  # -0.0 + 0.0 is 0.0: never "≥ -0.0"
    recommended = recommend(pooled, floor)
    notes = tuple(dict.fromkeys(c.note for c in choices.values() if c.note))
    return WindowReport(chosen.provider, ", ".join(models), encoding, choice.price, notes, floor,
                        tuple(s.session_id for s in sessions), tuple(pooled), recommended, default, upstream)


def _choose(prices: PriceTable, provider: str, model: str) -> PriceChoice:
    """The row ``model`` is billed at (a model without its own row: the provider's default row, with a note)."""
    choice = prices.choose(provider, model)
    if choice is None:
        raise UsageError(f"no prices for provider {provider} (rows: {', '.join(sorted(prices.providers)) or 'none'}; "
                         "add them under prices: in zhin.yaml or with --prices FILE)")
    return choice


def _sliding_of(pooled: Iterable[PolicyFigures], base: WindowConfig) -> PolicyFigures:
    """Upstream's window: its own entry, or the policy it equals (the grid keeps equal windows once)."""
    key = _effective(sliding(base))
    return next(f for f in pooled if _effective(f.policy.window) == key)


def run_window(refs: list[str], *, cwd: Path, db: str | None = None, config_path: Path | None = None,
               prices_file: Path | None = None, provider: str | None = None, model: str | None = None,
               min_context: float | None = None, jobs: int | None = 1,
               after_load: Callable[[], None] | None = None,
               progress: Callable[[int, int], None] | None = None, context: RunContext | None = None) -> WindowReport:
    """The CLI's sweep: the config found from ``cwd`` (or ``config_path``), its prices (and ``--prices``), the
    sessions ``refs`` name (files, folders, ids or keys in ``db``). ``context``: the caller's run context (``report
    html --window``), whose config, prices and sessions are not read again; it then replaces the bundle
    (``cwd``, ``db``, ``config_path``, ``prices_file``). ``provider``: None is the config's ``provider:``, else
    openai (as trace and the pipeline choose it)."""
    from zhin_cli.core.parallel import check_jobs
    from zhin_cli.pipeline.assemble import DEFAULT_PROVIDER
    from zhin_cli.pipeline.config import load_config
    from zhin_cli.store.refs import session_refs

    workers = check_jobs(jobs)
    run = context or RunContext.for_config(load_config(config_path, cwd=cwd), cwd=cwd, db=db, prices_file=prices_file)
    config = run.config
    table = run.prices
    provider = provider or config.provider or DEFAULT_PROVIDER
    target(provider, model, config)  # a bad --provider before the sessions are read
    sessions = [run.session(ref) for ref in session_refs(refs, all_sessions=False, db=run.db, cwd=run.cwd)]
    if after_load is not None:
        after_load()
    return sweep(sessions, config, provider=provider, model=model, prices=table, min_context=min_context,
                 jobs=workers, progress=progress)


# --- text ----------------------------------------------------------------------------------------------

PLOT_WIDTH = 56  # columns of the frontier picture's plot area at 80 columns (axis labels included: ≤ 80)
PLOT_HEIGHT = 14
PICTURE_WIDTH = 80  # the widest picture: a wider console gets the 80-column one (more columns add no reading)
MIN_PLOT_WIDTH = 16  # below this the dots of a sweep merge: a narrower console gets lines too long, not a smear
MARKS = {"recommended": "R", "default": "D", "sliding": "S"}


def _ratio_text(value: float, against: float) -> str:
    return f"{value / against:.2f}×" if against else "—"


def table_rows(report: WindowReport) -> list[tuple[str, ...]]:
    """The text table's cells per policy: name (with its R/D/S mark), cost per request, its ratio to the sliding
    window, later hit rate, physical limit, context mean/min, ● on the frontier."""
    from zhin_cli.cache.cost import format_usd

    def pct(value: float | None) -> str:
        return "—" if value is None else f"{value:.1%}"

    rows: list[tuple[str, ...]] = []
    for figures in report.policies:
        marks = "".join(mark for role, mark in MARKS.items() if _role(report, role) is figures)
        rows.append((f"{figures.policy.name}{' (' + marks + ')' if marks else ''}", format_usd(figures.cost_per_request),
                     _ratio_text(figures.cost_per_request, report.sliding.cost_per_request),
                     pct(figures.hit_rate_later), pct(figures.limit_later),
                     f"{figures.context_mean:.1f}/{figures.context_min}", "●" if figures.pareto else ""))
    return rows


def _role(report: WindowReport, role: str) -> PolicyFigures:
    return {"recommended": report.recommended, "default": report.default, "sliding": report.sliding}[role]


def frontier_picture(report: WindowReport, width: int = PICTURE_WIDTH) -> list[str]:
    """Cost per request (y) against mean context (x) as plain text, drawn for a console ``width`` columns wide
    (at most ``PICTURE_WIDTH``; every line fits from 40 columns on) and the same for the same report and width:
    every policy a dot (``·``), frontier policies ``●``, the recommended, default and sliding policies ``R``,
    ``D``, ``S`` (a shared cell shows the first of R, D, S, ●, ·), then a legend naming them. The title and the
    legend are wrapped between words."""
    from zhin_cli.cache.cost import format_usd

    costs = [f.cost_per_request for f in report.policies]
    contexts = [f.context_mean for f in report.policies]
    low_cost, high_cost = min(costs), max(costs)
    low_context, high_context = min(contexts), max(contexts)
    top, bottom = format_usd(high_cost), format_usd(low_cost)
    margin = max(len(top), len(bottom))
    columns = min(width, PICTURE_WIDTH)
    plot_width = max(MIN_PLOT_WIDTH, min(PLOT_WIDTH, columns - margin - 2))  # "<label> ┤" before the plot

    def cell(figures: PolicyFigures) -> tuple[int, int]:
        x = (figures.context_mean - low_context) / (high_context - low_context) if high_context > low_context else 0.5
        y = (figures.cost_per_request - low_cost) / (high_cost - low_cost) if high_cost > low_cost else 0.5
        return round(x * (plot_width - 1)), PLOT_HEIGHT - 1 - round(y * (PLOT_HEIGHT - 1))

    rank = {mark: n for n, mark in enumerate(["R", "D", "S", "●", "·"])}
    grid = [[" "] * plot_width for _ in range(PLOT_HEIGHT)]
    for figures in report.policies:
        roles = [MARKS[role] for role in MARKS if _role(report, role) is figures]
        mark = roles[0] if roles else "●" if figures.pareto else "·"
        column, row = cell(figures)
        if grid[row][column] == " " or rank[mark] < rank[grid[row][column]]:
            grid[row][column] = mark
    lines = _wrapped(f"cost per request against mean context (messages), {report.provider} {report.model}", columns)
    for number, cells in enumerate(grid):
        label = top if number == 0 else bottom if number == PLOT_HEIGHT - 1 else ""
        lines.append(f"{label:>{margin}} {'┤' if label else '│'}{''.join(cells)}".rstrip())
    lines.append(" " * margin + " └" + "─" * plot_width)
    left, right = f"{low_context:.1f}", f"{high_context:.1f}"
    lines.append(" " * (margin + 2) + left + " " * max(1, plot_width - len(left) - len(right)) + right)
    lines.append("● Pareto frontier  · dominated")
    legend = role_legend(report, {mark: grid[row][column] for mark, (column, row) in
                                  ((MARKS[r], cell(_role(report, r))) for r in MARKS)})
    return lines + [part for line in legend for part in _wrapped(line, columns, indent="  ")]


def _wrapped(line: str, width: int, indent: str = "") -> list[str]:
    """``line`` broken between words to ``width`` columns (a word longer than that stays whole: never cut)."""
    import textwrap

    return textwrap.wrap(line, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False) or [""]


def role_legend(report: WindowReport, drawn: dict[str, str]) -> list[str]:
    """One legend line per mark the picture can show: roles held by one policy share its first mark's line
    (``R recommended, default: …``: no D is drawn), and a mark whose point another mark covers says so.
    ``drawn``: each role mark → the mark drawn in its cell."""
    groups: list[tuple[PolicyFigures, list[str]]] = []
    for role in MARKS:
        figures = _role(report, role)
        group = next((roles for held, roles in groups if held is figures), None)
        if group is None:
            groups.append((figures, [role]))
        else:
            group.append(role)
    lines = []
    for figures, roles in groups:
        mark = MARKS[roles[0]]
        under = f" (drawn under {drawn[mark]}: the same point)" if drawn[mark] != mark else ""
        lines.append(f"{mark} {', '.join(roles)}: {figures.policy.name}{under}")
    return lines


def recommendation_line(report: WindowReport) -> str:
    """``recommended: <name> — $x/request (N× sliding, M× default), context mean K (≥ min)``."""
    from zhin_cli.cache.cost import format_usd

    chosen = report.recommended
    return (f"recommended: {chosen.policy.name} — {format_usd(chosen.cost_per_request)}/request "
            f"({_ratio_text(chosen.cost_per_request, report.sliding.cost_per_request)} sliding, "
            f"{_ratio_text(chosen.cost_per_request, report.default.cost_per_request)} default), "
            f"context mean {chosen.context_mean:.1f} (≥ {report.min_context:.1f})")
