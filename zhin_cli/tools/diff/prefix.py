"""``zhin prefix-diff`` as a library: the prefix-break engine (``zhin_cli.cache.diff``: where consecutive
requests stop sharing bytes, why, and what the provider's prompt cache would still hit) run over stored sessions,
JSONL files, captured bodies (``zhin_cli.cache.captures``) or two configurations (``--base``/``--head``), and its
result: the ``--json`` document, GitHub annotations and the step summary, each break named with the file that
defines its segment (``zhin_cli.pipeline.provenance``).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from zhin_cli.cache.cost import format_share
from zhin_cli.cache.diff import (
    CAUSE_MEANINGS,
    CAUSES,
    DEFAULT_FAIL_ON,
    PairDiff,
    SessionDiff,
    TurnDiffer,
    diff_pair,
    diff_turns,
    source_key,
)
from zhin_cli.cache.serialize import Serialized, serialize
from zhin_cli.pipeline.assemble import AssembledRequest
from zhin_cli.pipeline.context import RunContext
from zhin_cli.pipeline.facade import Pipeline
from zhin_cli.pipeline.prices import PriceTable
from zhin_cli.pipeline.provenance import SegmentSource, segment_sources
from zhin_cli.store.refs import session_refs, split_capture_refs

if TYPE_CHECKING:
    from zhin_cli.cache.captures import CaptureDiff
    from zhin_cli.core.ghactions import Annotation
    from zhin_cli.core.model import Session
    from zhin_cli.pipeline.config import Config
    from zhin_cli.pipeline.preset.model import Preset

DIFF_VERSION = 1


# --- two configurations ---------------------------------------------------------------------------


@dataclass
class SegmentDelta:
    id: str
    kind: str
    chars: int  # head − base
    tokens: int
    status: str  # changed | added | removed

    def as_dict(self) -> dict[str, object]:
        return {"id": self.id, "kind": self.kind, "status": self.status, "chars": self.chars, "tokens": self.tokens}


class FirstDivergence(TypedDict):
    """Where the two configurations' requests first differ (``ConfigDiff.first_divergence``)."""

    turn: int
    offset: int  # the first differing byte
    segment: str | None
    message_index: int | None
    before: str
    after: str
    excerpt_index: int  # where, in both excerpts, the first differing character is


@dataclass
class ConfigDiff:
    session_id: str
    turns: int = 0
    differing_turns: list[int] = field(default_factory=list)
    first_divergence: FirstDivergence | None = None
    segments: dict[str, SegmentDelta] = field(default_factory=dict)
    head_stability: SessionDiff | None = None
    base_stability: SessionDiff | None = None
    # a changed segment → where the head configuration defines it (the base's for a removed one)
    sources: dict[str, SegmentSource] = field(default_factory=dict)

    def as_dict(self, fail_on: Iterable[str]) -> dict[str, object]:
        fail_on = list(fail_on)
        return {
            "session_id": self.session_id,
            "turns": self.turns,
            "differing_turns": self.differing_turns,
            "first_divergence": self.first_divergence,
            "segments": [s.as_dict() for s in self.segments.values()],
            "head_stability": self.head_stability.as_dict(fail_on) if self.head_stability else None,
            "base_unexpected": len(self.base_stability.unexpected(fail_on)) if self.base_stability else None,
            "sources": {k: v.as_dict() for k, v in self.sources.items()},
        }


def diff_configs(session_id: str, base: Iterator[AssembledRequest], head: Iterator[AssembledRequest]) -> ConfigDiff:
    """Every turn assembled under both configurations: what differs, by segment, and whether each is stable.

    Streams: the two replays advance in step; each request is serialised once and feeds both its configuration's
    turn-to-turn diff and the base/head comparison; only the previous request of each side is held."""
    result = ConfigDiff(session_id)
    base_differ, head_differ = TurnDiffer(session_id), TurnDiffer(session_id)
    while True:
        old, new = next(base, None), next(head, None)
        if old is None or new is None:  # a replay with more turns: its own diff goes on alone
            for first, rest, differ in ((old, base, base_differ), (new, head, head_differ)):
                for request in itertools.chain([first] if first is not None else [], rest):
                    differ.add(request)
            break
        a, b = serialize(old), serialize(new)
        base_differ.add(old, a)
        head_differ.add(new, b)
        _compare_configs(result, old, new, a, b)
    result.base_stability = base_differ.result()
    result.head_stability = head_differ.result()
    return result


def _compare_configs(result: ConfigDiff, old: AssembledRequest, new: AssembledRequest, a: Serialized, b: Serialized) -> None:
    result.turns += 1
    if a.data == b.data and old.model == new.model:
        return
    result.differing_turns.append(new.turn)
    if result.first_divergence is None:
        pair = diff_pair(old, new, a, b)
        result.first_divergence = {"turn": new.turn, "offset": pair.common_prefix_bytes, "segment": pair.segment,
                                   "message_index": pair.message_index, "before": pair.before, "after": pair.after,
                                   "excerpt_index": pair.excerpt_mark}
    base_segments = {s.id: s for s in old.segments}
    head_segments = {s.id: s for s in new.segments}
    for segment_id in dict.fromkeys([*base_segments, *head_segments]):
        s_old, s_new = base_segments.get(segment_id), head_segments.get(segment_id)
        if s_old and s_new and (s_old.chars, s_old.tokens) == (s_new.chars, s_new.tokens) and _same_text(old, new, segment_id):
            continue
        status = "added" if s_old is None else "removed" if s_new is None else "changed"
        kind = (s_new or s_old).kind  # type: ignore[union-attr]
        delta = SegmentDelta(segment_id, kind, (s_new.chars if s_new else 0) - (s_old.chars if s_old else 0),
                             (s_new.tokens if s_new else 0) - (s_old.tokens if s_old else 0), status)
        result.segments.setdefault(segment_id, delta)


def _same_text(old: AssembledRequest, new: AssembledRequest, segment_id: str) -> bool:
    old_text = dict(old.system_texts).get(segment_id)
    new_text = dict(new.system_texts).get(segment_id)
    if old_text is not None or new_text is not None:
        return old_text == new_text
    return [p.text for p in old.parts if p.segment_id == segment_id] == [p.text for p in new.parts if p.segment_id == segment_id]


def _reporting(requests: Iterator[AssembledRequest], session: Session, progress: Callable[[int, int], None] | None) -> Iterator[AssembledRequest]:
    total = sum(1 for m in session.messages if m.role == "assistant")
    for request in requests:
        if progress is not None:
            progress(request.turn, total)
        yield request


# --- the command, as a library call ----------------------------------------------------------------


def diff_session(pipeline: Pipeline, session: Session, progress: Callable[[int, int], None] | None = None,
                 on_pair: Callable[[SessionDiff, PairDiff], None] | None = None,
                 prices: PriceTable | None = None) -> SessionDiff:
    """One session's turn-to-turn diff under one pipeline (the unit of work per session)."""
    return diff_turns(session.session_id, _reporting(pipeline.replay(session), session, progress), on_pair, prices)


def compare_session(base: Pipeline, head: Pipeline, session: Session) -> ConfigDiff:
    """One session under two configurations (the unit of work per session of ``--base/--head``)."""
    return diff_configs(session.session_id, base.replay(session), head.replay(session))


def _pair_keys(diff: SessionDiff) -> list[str | None]:
    return [source_key(p) for p in diff.pairs]


@dataclass
class PrefixDiffResult:
    mode: str  # turns | configs
    fail_on: list[str]
    sessions: list[SessionDiff] = field(default_factory=list)
    comparisons: list[ConfigDiff] = field(default_factory=list)
    base_label: str | None = None
    head_label: str | None = None
    config_path: Path | None = None  # the zhin.yaml read (turn to turn), None for the built-in defaults
    db: str | None = None  # the database sessions were read from, None if every session was a file
    captures: list[CaptureDiff] = field(default_factory=list)  # the CaptureDiff of each capture folder / body JSONL

    @property
    def unexpected(self) -> int:
        if self.mode == "turns":
            return sum(len(s.unexpected(self.fail_on)) for s in self.sessions)
        # before a merge: a difference between the configurations is what was asked for; a break is an
        # unexpected cause in the head configuration's own turn-to-turn diff
        return sum(len(c.head_stability.unexpected(self.fail_on)) for c in self.comparisons if c.head_stability)

    @property
    def notes(self) -> list[str]:
        """Each price note once (a model billed at its provider's default row), then the captures' reading notes."""
        return list(dict.fromkeys([*(note for s in self.sessions for note in s.notes),
                                   *(note for c in self.captures for note in c.notes)]))

    def as_dict(self) -> dict[str, object]:
        data: dict[str, object] = {"version": DIFF_VERSION, "mode": self.mode, "fail_on": self.fail_on, "unexpected": self.unexpected}
        if self.mode == "turns":
            data["notes"] = self.notes
            data["sessions"] = [s.as_dict(self.fail_on) for s in self.sessions]
            if self.captures:
                data["captures"] = [c.as_dict() for c in self.captures]
        else:
            data["base"], data["head"] = self.base_label, self.head_label
            data["sessions"] = [c.as_dict(self.fail_on) for c in self.comparisons]
        return data


# --- GitHub Actions ---------------------------------------------------------------------------------


def _break_annotation(session: SessionDiff, pair: PairDiff, where: str = "") -> Annotation:
    from zhin_cli.core.ghactions import Annotation

    source = session.sources.get(source_key(pair) or "") or SegmentSource()
    segment = f" in {pair.segment}" if pair.segment else ""
    detail = f" ({pair.detail})" if pair.detail else ""
    message = (f"{session.session_id}{where}: turn {pair.from_turn}→{pair.to_turn} breaks the cached prefix at byte "
               f"{pair.common_prefix_bytes:,}{segment}{detail}: {CAUSE_MEANINGS[pair.cause]}. "
               f"Cached {pair.cached_tokens:,} of {pair.prompt_tokens:,} tokens.\n"
               f"before: …{pair.marked_before}…\nafter:  …{pair.marked_after}…")
    return Annotation("error", message, title=f"prefix-diff: {pair.cause}{segment}", file=source.file,
                      line=source.line if source.file else None)


def github_annotations(result: PrefixDiffResult) -> list[Annotation]:
    """One ``error`` annotation per unexpected break — every one — at the source of the segment it falls in (where
    known); with ``--base/--head``, a ``notice`` per changed segment too, and the head's own breaks as errors."""
    from zhin_cli.core.ghactions import Annotation

    out: list[Annotation] = []
    if result.mode == "turns":
        for session in result.sessions:
            out.extend(_break_annotation(session, pair) for pair in session.unexpected(result.fail_on))
        return out
    for comparison in result.comparisons:
        for delta in comparison.segments.values():
            source = comparison.sources.get(delta.id) or SegmentSource()
            message = (f"{comparison.session_id}: segment {delta.id} {delta.status} between base {result.base_label} and "
                       f"head {result.head_label} ({delta.chars:+,} chars, {delta.tokens:+,} tokens); "
                       f"{len(comparison.differing_turns)} of {comparison.turns} turns differ")
            out.append(Annotation("notice", message, title=f"prefix-diff: {delta.id} {delta.status}", file=source.file,
                                  line=source.line if source.file else None))
        if comparison.head_stability is not None:
            out.extend(_break_annotation(comparison.head_stability, pair, " (head configuration)")
                       for pair in comparison.head_stability.unexpected(result.fail_on))
    return out


def github_summary(result: PrefixDiffResult) -> str:
    """The step summary: one table row per session."""
    from zhin_cli.core.ghactions import summary_cell

    def causes(session: SessionDiff) -> str:
        counts: dict[str, int] = {}
        for pair in session.unexpected(result.fail_on):
            counts[pair.cause] = counts.get(pair.cause, 0) + 1
        return ", ".join(f"{cause} {n}" for cause, n in counts.items()) or "none"

    lines = ["### zhin prefix-diff", ""]
    if result.mode == "turns":
        lines += ["| session | pairs | unexpected breaks | warm cached share |", "|---|---:|---|---:|"]
        for session in result.sessions:
            summary = session.summary()
            lines.append(f"| {summary_cell(session.session_id)} | {summary['pairs']} | {summary_cell(causes(session))} | "
                         f"{format_share(summary['cached_share'])} |")
    else:
        lines += [f"base {summary_cell(result.base_label or '')} → head {summary_cell(result.head_label or '')}", "",
                  "| session | requests that differ | changed segments | head: unexpected breaks | head: warm cached share |",
                  "|---|---:|---|---|---:|"]
        for comparison in result.comparisons:
            changed = ", ".join(f"{d.id} ({d.status}, {d.tokens:+,} tokens)" for d in comparison.segments.values()) or "none"
            head = comparison.head_stability
            lines.append(f"| {summary_cell(comparison.session_id)} | {len(comparison.differing_turns)}/{comparison.turns} | "
                         f"{summary_cell(changed)} | {summary_cell(causes(head)) if head else 'none'} | "
                         f"{format_share(head.summary()['cached_share'] if head else 0)} |")
    lines += ["", f"{result.unexpected} unexpected break(s) (fail on: {', '.join(result.fail_on) or 'nothing'})"]
    return "\n".join(lines) + "\n"


def run_prefix_diff(
    refs: list[str],
    *,
    cwd: Path,
    db: str | None = None,
    config_path: Path | None = None,
    provider: str | None = None,
    model: str | None = None,
    base: str | None = None,
    head: str | None = None,
    all_sessions: bool = False,
    fail_on: Iterable[str] = DEFAULT_FAIL_ON,
    preset: Preset | Path | str | None = None,
    after_load: Callable[[], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
    jobs: int | None = 1,
    on_pair: Callable[[SessionDiff, PairDiff], None] | None = None,
    on_comparison: Callable[[ConfigDiff], None] | None = None,
    prices_file: Path | None = None,
    context: RunContext | None = None,
) -> PrefixDiffResult:
    """``preset``: a preset file (or ``Preset``) replacing each configuration's ``preset:`` (``--preset``).

    ``jobs``: sessions diffed at once in worker processes (``None``: every core; 1: here, one at a time). The
    result is the same for every value (core/parallel.py: input order, the same errors). ``progress`` counts
    turns with one job, sessions with several.

    Streaming (``--jsonl``): ``on_pair`` sees each pair of a turn-to-turn diff as it is made (with several jobs, a session's pairs
    when that session is done, in input order); ``on_comparison`` each session of ``--base/--head`` when done.

    Turn to turn, each request's cost at the config's price table (``prices_file``: ``--prices FILE`` over it).
    ``context``: the command's run context (it replaces ``cwd``, ``db``, ``config_path`` and ``prices_file``): its
    config and prices are used, not read again; without one, the config is read once here (not for --base/--head,
    which read their own two)."""
    from zhin_cli.core.errors import UsageError
    from zhin_cli.core.parallel import check_jobs, ordered_map
    from zhin_cli.core.tokens import DEFAULT_ENCODING, counter
    fail = list(fail_on)
    if context is not None:
        cwd, db = context.cwd, context.db
    unknown = sorted(set(fail) - set(CAUSES))
    if unknown:
        raise UsageError(f"--fail-on: unknown cause {', '.join(unknown)} (causes: {', '.join(CAUSES)})")
    if (base is None) != (head is None):
        raise UsageError("--base and --head go together")
    workers = check_jobs(jobs)
    captured, refs = split_capture_refs(refs, cwd)
    if captured and base is not None:
        raise UsageError("--base/--head compare two zhin configurations; captured bodies were assembled by another bot")
    # zhin-assembly options would silently do nothing to a captured body (it names its own model): refused, as trace does
    refused = [name for name, given in (("--preset", preset is not None), ("--model", model is not None)) if given]
    if captured and refused:
        raise UsageError(f"{', '.join(refused)}: not for captured bodies (each is diffed as sent, with the model it "
                         "names); diff zhin's sessions with them in a separate run")
    if captured and not refs and not all_sessions:
        run_context = context or RunContext.load(config_path, cwd=cwd, db=db, prices_file=prices_file)
        result = PrefixDiffResult("turns", fail, config_path=run_context.config.path)
        _add_captures(result, captured, provider, run_context.prices, on_pair)
        return result
    chosen = session_refs(refs, all_sessions=all_sessions, db=db, cwd=cwd)
    from zhin_cli.store import database_read

    database = database_read(chosen, db=db, cwd=cwd, all_sessions=all_sessions)

    def run(configs: tuple[Config, ...], prices: PriceTable | None = None,
            here: RunContext | None = None) -> Iterator[SessionDiff | ConfigDiff]:
        job_list = [SessionJob(ref, db, cwd, configs, provider, model, preset, after_load, prices) for ref in chosen]
        if workers == 1 or len(job_list) == 1:  # here: the progress bar follows the turns, pairs stream as made
            yield from ordered_map(functools.partial(run_session_job, progress=progress, on_pair=on_pair, context=here),
                                   job_list, jobs=1)
            return
        for item in ordered_map(run_session_job, job_list, jobs=workers, done=progress,
                                prepare=functools.partial(counter, DEFAULT_ENCODING)):  # most models' tokenizer
            if on_pair is not None and isinstance(item, SessionDiff):
                for pair in item.pairs:
                    on_pair(item, pair)
            yield item

    if base is None:
        run_context = context or RunContext.load(config_path, cwd=cwd, db=db, prices_file=prices_file)
        result = PrefixDiffResult("turns", fail, config_path=run_context.config.path, db=database)
        for diff in run((run_context.config,), run_context.prices, run_context):
            assert isinstance(diff, SessionDiff)  # one configuration: run_session_job gives a SessionDiff
            result.sessions.append(diff)
        _add_captures(result, captured, provider, run_context.prices, on_pair)
        return result

    from zhin_cli.pipeline.configsource import load_config_source

    assert head is not None
    with load_config_source(base, cwd=cwd) as base_source, load_config_source(head, cwd=cwd) as head_source:
        result = PrefixDiffResult("configs", fail, base_label=base_source.label, head_label=head_source.label, db=database)
        trees = tuple(Path(t) for t in (base_source.tempdir, head_source.tempdir) if t is not None)
        top = _git_top(cwd) if trees else ""  # once per run, not per session
        for comparison in run((base_source.config, head_source.config)):
            assert isinstance(comparison, ConfigDiff)  # two configurations: run_session_job gives a ConfigDiff
            _rebase_sources(comparison, trees, top)
            if on_comparison is not None:
                on_comparison(comparison)
            result.comparisons.append(comparison)
    return result


def _add_captures(result: PrefixDiffResult, paths: list[Path], provider: str | None, prices: PriceTable | None,
                  on_pair: Callable[[SessionDiff, PairDiff], None] | None) -> None:
    from zhin_cli.cache.captures import diff_capture_path

    for path in paths:
        diff = diff_capture_path(path, provider=provider, prices=prices, on_pair=on_pair)
        result.captures.append(diff)
        result.sessions.extend(diff.sessions)


def _git_top(cwd: Path) -> str:
    """The checkout's top level ("" outside a repository)."""
    import subprocess

    return subprocess.run(["git", "-C", str(cwd), "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                          check=False).stdout.strip()


def _rebase_sources(comparison: ConfigDiff, roots: tuple[Path, ...], top: str) -> None:
    """A git ref's files live in a temporary tree that is deleted when the run ends: name them in the checkout
    (``top``) instead (the tree is the repository's top level), where an annotation can point."""
    if not roots:
        return

    def rebased(source: SegmentSource) -> SegmentSource:
        if source.file is None:
            return source
        for root in roots:
            try:
                relative = Path(source.file).relative_to(root)
            except ValueError:
                continue
            return SegmentSource(str(Path(top) / relative) if top else str(relative), source.line)
        return source

    comparison.sources = {k: rebased(v) for k, v in comparison.sources.items()}
    for stability in (comparison.head_stability, comparison.base_stability):
        if stability is not None:
            stability.sources = {k: rebased(v) for k, v in stability.sources.items()}


@dataclass(frozen=True)
class SessionJob:
    """One session of a prefix-diff run, as a worker process receives it: data only (core/parallel.py). The
    configurations are loaded ``Config`` objects: each carries its ``PluginSource``, so a worker's
    ``Pipeline.open`` asks the same trust question the sequential run asks."""

    ref: str
    db: str | None
    cwd: Path
    configs: tuple[Config, ...]  # (config,) for turn-to-turn; (base, head) for --base/--head
    provider: str | None
    model: str | None
    preset: Preset | Path | str | None
    after_load: Callable[[], None] | None = None
    prices: PriceTable | None = None  # turn to turn: the costs' price table


def run_session_job(job: SessionJob, progress: Callable[[int, int], None] | None = None,
                    on_pair: Callable[[SessionDiff, PairDiff], None] | None = None,
                    context: RunContext | None = None) -> SessionDiff | ConfigDiff:
    """Load one session and diff it (turn to turn, or under two configurations); one at a time, so a run over many
    sessions holds one in memory. The segments its breaks name get their sources while the pipelines are open.
    ``context``: the run's context, in this process, turn to turn: its plugins are used (a worker process has none:
    it runs the config's plugins itself). The session is not kept in the context: a run over a whole database holds
    one session at a time."""
    from contextlib import ExitStack

    from zhin_cli.store import load_session

    session = load_session(job.ref, db=job.db, cwd=job.cwd)
    if job.after_load is not None:
        job.after_load()
    with ExitStack() as stack:
        pipelines = [stack.enter_context(context.pipeline(provider=job.provider, model=job.model, preset=job.preset)
                                         if context is not None and config is context.config else
                                         Pipeline.open(config, provider=job.provider, model=job.model, preset=job.preset))
                     for config in job.configs]
        if len(pipelines) == 1:
            from zhin_cli.pipeline.provenance import layout_name  # trace imports this module

            diff = diff_session(pipelines[0], session, progress, on_pair, job.prices)
            diff.sources = segment_sources(pipelines[0], _pair_keys(diff), job.preset)
            diff.layout = layout_name(pipelines[0].preset)
            return diff
        comparison = compare_session(pipelines[0], pipelines[1], session)
        if comparison.head_stability is not None:
            comparison.head_stability.sources = segment_sources(pipelines[1], _pair_keys(comparison.head_stability), job.preset)
        changed = [delta.id for delta in comparison.segments.values()]
        comparison.sources = {**segment_sources(pipelines[0], changed, job.preset),
                              **segment_sources(pipelines[1], changed, job.preset)}
        return comparison
