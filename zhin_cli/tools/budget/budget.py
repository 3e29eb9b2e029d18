"""The fixed-prompt-cost budget (ADR 0041 §8 slice E, "fixed-prompt-cost 预算更新").

The *fixed* part of every request is what each turn pays again before any conversation: the system segments
(kinds 1–4: system, environment, role_rules, platform) and the tool schemas. It is measured in tokens, per
provider profile (the profile decides the model's tokenizer and how tools are written on the wire), on the
last request of each reference session, and compared with a committed ``prompt-budget.yaml``::

    version: 1
    sessions: [fixtures/group-busy.jsonl]    # measured on these; the largest value of each part counts
    profiles:
      - provider: openai
        model: gpt-4o
        parts: {core.rules: 415, core.environment: 48, core.persona: 61, core.platform: 120, tools: 0, total: 644}

``check`` fails when a part is over its budget (or is new), naming the part and by how much; parts that
shrank are reported so that ``update`` can lock the saving in. ``update`` rewrites the file deliberately from
what is measured now — a ruamel.yaml round trip, so the file's comments, key order and indentation stay and a
changed number changes only its own line (the diff a reviewer reads). Sessions are paths relative to the budget
file (or session ids in ``--db``). Under GitHub Actions ``check`` annotates each part that grew at its line in the
budget file, and notes where the segment's text comes from (the zhin.yaml key, a plugin file, zhin's built-ins).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import yaml

from zhin_cli.core.errors import ConfigError
from zhin_cli.core.ghactions import Annotation, summary_cell
from zhin_cli.core.readers import enclosing_key, read_yaml_file
from zhin_cli.pipeline.fixedcost import TOTAL, fixed_parts

if TYPE_CHECKING:
    from ruamel.yaml.comments import CommentedMap

    from zhin_cli.pipeline.context import RunContext
    from zhin_cli.pipeline.provenance import SegmentSource

BUDGET_VERSION = 1
DEFAULT_BUDGET_FILE = "prompt-budget.yaml"


@dataclass
class ProfileBudget:
    provider: str
    model: str | None
    parts: dict[str, int]


@dataclass
class Budget:
    path: Path
    sessions: list[str]
    profiles: list[ProfileBudget]
    # line of each key in the file ("profiles[0].parts.core.rules" → 9), for annotations
    lines: dict[str, int] = field(default_factory=dict, repr=False)

    def line(self, key: str) -> int:
        """The line of ``key``, or of the nearest enclosing key the file has."""
        found = enclosing_key(self.lines, key)
        return self.lines[found] if found is not None else 1

    def as_yaml(self) -> str:
        data = {
            "version": BUDGET_VERSION,
            "sessions": self.sessions,
            "profiles": [
                {"provider": p.provider, **({"model": p.model} if p.model else {}), "parts": dict(p.parts)}
                for p in self.profiles
            ],
        }
        header = "# Fixed prompt cost per provider profile, in tokens. Rewrite with `zhin budget update`.\n"
        return header + yaml.safe_dump(data, allow_unicode=True, sort_keys=False, default_flow_style=False)


def largest(measurements: list[dict[str, int]]) -> dict[str, int]:
    merged: dict[str, int] = {}
    for parts in measurements:
        for name, tokens in parts.items():
            merged[name] = max(merged.get(name, 0), tokens)
    return merged


def load_budget(path: Path) -> Budget:
    data, lines = read_yaml_file(path, what="budget file")

    def where(key: str) -> str:
        return f"{path}:{lines.get(key, lines.get('', 1))}"

    if not isinstance(data, dict):
        raise ConfigError("a budget file is a mapping with version, sessions and profiles", where=where(""))
    unknown = sorted(str(k) for k in set(data) - {"version", "sessions", "profiles"})
    if unknown:
        raise ConfigError(f"unknown keys {unknown} (known: profiles, sessions, version)", where=where(unknown[0]))
    if data.get("version") != BUDGET_VERSION:
        raise ConfigError(f"version must be {BUDGET_VERSION}, got {data.get('version')!r}", where=where("version"))
    sessions = data.get("sessions") or []
    if not isinstance(sessions, list) or not sessions or not all(isinstance(s, str) and s for s in sessions):
        raise ConfigError("sessions must be a non-empty list of session files or ids", where=where("sessions"))
    raw_profiles = data.get("profiles") or []
    if not isinstance(raw_profiles, list):
        raise ConfigError("profiles must be a list", where=where("profiles"))
    profiles = []
    for index, item in enumerate(raw_profiles):
        key = f"profiles[{index}]"
        if not isinstance(item, dict) or not isinstance(item.get("provider"), str):
            raise ConfigError("a profile needs provider (and optionally model, parts)", where=where(key))
        extra = sorted(str(k) for k in set(item) - {"provider", "model", "parts"})
        if extra:
            raise ConfigError(f"unknown keys {extra} (known: model, parts, provider)", where=where(f"{key}.{extra[0]}"))
        model = item.get("model")
        if model is not None and not isinstance(model, str):
            raise ConfigError("model must be a string", where=where(f"{key}.model"))
        parts = item.get("parts") or {}
        if not isinstance(parts, dict):
            raise ConfigError("parts must be a mapping of part → tokens", where=where(f"{key}.parts"))
        for name, tokens in parts.items():
            if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
                raise ConfigError(f"part {name!r}: tokens must be a whole number ≥ 0, got {tokens!r}",
                                  where=where(f"{key}.parts.{name}"))
        profiles.append(ProfileBudget(item["provider"], model, {str(k): v for k, v in parts.items()}))
    return Budget(path, [str(s) for s in sessions], profiles, lines)


class PartDoc(TypedDict):
    """One part of ``budget check --json``: its budget, its measure and their difference (None: one is missing)."""

    provider: str
    model: str | None
    part: str
    budget: int | None
    measured: int | None
    delta: int | None
    status: str  # ok | under | over | new | gone


@dataclass
class PartResult:
    provider: str
    model: str | None
    part: str
    budget: int | None  # None: a part the budget does not know (new)
    measured: int | None  # None: a part that is gone
    profile: int = 0  # index in the budget file's profiles

    @property
    def status(self) -> str:
        if self.budget is None:
            return "new"
        if self.measured is None:
            return "gone"
        if self.measured > self.budget:
            return "over"
        return "under" if self.measured < self.budget else "ok"

    @property
    def failed(self) -> bool:
        return self.status in ("over", "new")

    def problem(self) -> str | None:
        """What failed, in one sentence (the text report and the annotation say it alike); None: nothing did."""
        if self.status == "over":
            assert self.budget is not None and self.measured is not None
            grown = self.measured - self.budget
            return (f"{self.provider} {self.part} grew from {self.budget} to {self.measured} tokens "
                    f"(+{grown}, +{grown / max(self.budget, 1):.1%})")
        if self.status == "new":
            return f"{self.provider} {self.part} is not in the budget ({self.measured} tokens)"
        return None

    def as_dict(self) -> PartDoc:
        delta = None if self.budget is None or self.measured is None else self.measured - self.budget
        return {"provider": self.provider, "model": self.model, "part": self.part, "budget": self.budget,
                "measured": self.measured, "delta": delta, "status": self.status}


@dataclass
class BudgetReport:
    path: str
    results: list[PartResult] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(r.failed for r in self.results)

    def as_dict(self) -> dict[str, object]:
        return {"version": 1, "budget": self.path, "ok": not self.failed, "parts": [r.as_dict() for r in self.results]}


def compare(profile: ProfileBudget, measured: dict[str, int], index: int = 0, *, model: str | None = None) -> list[PartResult]:
    """Each part budgeted against its measure; ``model``: the one the measured requests named (else the profile's)."""
    names = list(profile.parts) + [name for name in measured if name not in profile.parts]
    return [PartResult(profile.provider, model or profile.model, name, profile.parts.get(name), measured.get(name), index)
            for name in names]


def session_ref(budget_dir: Path, ref: str) -> str:
    """A session named in the budget file: a path relative to the file, else a session id for ``--db``."""
    candidate = budget_dir / ref
    return str(candidate) if candidate.exists() else ref


@dataclass(frozen=True)
class Measurement:
    """One profile's fixed parts and the model its requests named (``budget check``'s ``model`` column)."""

    parts: dict[str, int]
    model: str


def measure(
    sessions: list[str], provider: str, model: str | None, *, budget_dir: Path, db: str | None = None,
    config_path: Path | None = None, cwd: Path | None = None, context: RunContext | None = None,
) -> Measurement:
    """The fixed parts of one profile: the largest of each part over the last request of every session (one
    pipeline for the profile; each session costs its last window, ``Pipeline.request``), and the model the last
    request named (a profile without one: the provider's own, ``pipeline/models.py`` — said in the model column,
    so no note). ``context``: the command's run context (it replaces ``db``, ``config_path`` and ``cwd``): its
    config and sessions are not read again for each profile."""
    import warnings

    from zhin_cli.core.errors import UsageError
    from zhin_cli.core.notes import ZhinNote

    run = _context(context, config_path, cwd, db)
    measurements = []
    named = model or ""
    with run.pipeline(provider=provider, model=model) as pipeline, warnings.catch_warnings():
        warnings.simplefilter("ignore", ZhinNote)
        for ref in sessions:
            session = run.session(session_ref(budget_dir, ref))
            if not pipeline.turns(session).total:
                raise UsageError(f"session {session.session_id!r} has no assistant message, so no request to measure")
            request = pipeline.request(session, turn=-1)
            named = named or request.model
            measurements.append(fixed_parts(request))
    return Measurement(largest(measurements), named)


def _context(context: RunContext | None, config_path: Path | None, cwd: Path | None, db: str | None) -> RunContext:
    """The caller's run context, else one on the bundle: the config is read once for every profile."""
    from zhin_cli.pipeline.context import RunContext

    return context or RunContext.load(config_path, cwd=cwd or Path.cwd(), db=db)


def check_budget(budget: Budget, *, db: str | None = None, config_path: Path | None = None, cwd: Path | None = None,
                 context: RunContext | None = None) -> BudgetReport:
    report = BudgetReport(str(budget.path))
    run = _context(context, config_path, cwd, db) if budget.profiles else None
    for index, profile in enumerate(budget.profiles):
        measured = measure(budget.sessions, profile.provider, profile.model, budget_dir=budget.path.parent, context=run)
        report.results += compare(profile, measured.parts, index, model=measured.model)
    return report


def update_budget(budget: Budget, *, db: str | None = None, config_path: Path | None = None, cwd: Path | None = None,
                  context: RunContext | None = None) -> Budget:
    """The budget with every profile's parts measured now, written to ``budget.path`` (:func:`write_budget`)."""
    run = _context(context, config_path, cwd, db) if budget.profiles else None
    for profile in budget.profiles:
        profile.parts = measure(budget.sessions, profile.provider, profile.model, budget_dir=budget.path.parent,
                                context=run).parts
    write_budget(budget)
    return budget


def write_budget(budget: Budget) -> None:
    """Write ``budget``: into the existing file by a round trip (comments, order, indentation kept; only what
    changed is rewritten), else a new file."""
    from zhin_cli.core.outputfiles import atomic_output

    try:
        text = budget.path.read_text(encoding="utf-8") if budget.path.is_file() else None
    except OSError as exc:
        raise ConfigError(f"cannot read the budget file: {exc.strerror or exc}", where=str(budget.path)) from None
    new = budget.as_yaml() if text is None else _round_trip(text, budget)
    if new != text:  # unchanged numbers leave the file (and its mtime) alone
        with atomic_output(budget.path) as handle:  # whole or not at all: never a half-written budget
            handle.write(new)


def _round_trip(text: str, budget: Budget) -> str:
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap, CommentedSeq
    from ruamel.yaml.error import YAMLError
    from ruamel.yaml.util import load_yaml_guess_indent

    rt = YAML()  # round-trip mode, configured before the load: quotes are kept only if the loader is told
    rt.width = 4096  # never re-fold a long line the file has
    rt.preserve_quotes = True
    try:  # PyYAML read it before (load_budget); ruamel's reader differs in corners (a lone "-" line)
        data, sequence, offset = load_yaml_guess_indent(text, yaml=rt)
    except (YAMLError, IndexError, ValueError) as error:
        raise ConfigError(f"cannot rewrite the budget file in place (its layout: {error}); fix the line or write it anew",
                          where=str(budget.path)) from None
    rt.indent(mapping=_mapping_indent(text), sequence=sequence or 2, offset=offset or 0)
    if list(data.get("sessions") or []) != budget.sessions:
        data["sessions"] = CommentedSeq(budget.sessions)
    old = data.get("profiles") or []
    same_profiles = len(old) == len(budget.profiles) and all(
        isinstance(item, dict) and item.get("provider") == p.provider and item.get("model") == p.model
        for item, p in zip(old, budget.profiles, strict=False))
    if not same_profiles:  # --provider replaced the list: the old entries (and their comments) are gone
        fresh = CommentedSeq()
        for profile in budget.profiles:
            item = CommentedMap(provider=profile.provider)
            if profile.model:
                item["model"] = profile.model
            item["parts"] = CommentedMap()
            fresh.append(item)
        data["profiles"] = old = fresh
    for item, profile in zip(old, budget.profiles, strict=True):
        parts = item.get("parts")
        if not isinstance(parts, CommentedMap):
            parts = item["parts"] = CommentedMap()
        _sync_parts(parts, profile.parts)
    out = io.StringIO()
    rt.dump(data, out)
    return out.getvalue()


def _mapping_indent(text: str) -> int:
    """How far the file indents a mapping under its key (ruamel guesses only the sequences' indent)."""
    rows = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    for line, below in zip(rows, rows[1:], strict=False):
        if line.rstrip().endswith(":") and not below.lstrip().startswith("- "):
            key_at = len(line) - len(line.lstrip()) + (2 if line.lstrip().startswith("- ") else 0)
            step = len(below) - len(below.lstrip()) - key_at
            if step > 0:
                return step
    return 2


def _sync_parts(parts: CommentedMap, measured: dict[str, int]) -> None:
    """Set each measured number in place (a key keeps its line and comment), drop parts that are gone, and insert a
    new part where the measurement has it (before ``total``)."""
    for name in [n for n in parts if n not in measured]:
        del parts[name]
    for position, (name, tokens) in enumerate(measured.items()):
        if name in parts:
            if parts[name] != tokens:
                parts[name] = tokens
        else:
            parts.insert(position, name, tokens)


# --- GitHub annotations and step summary ------------------------------------------------------------------------


def budget_annotations(report: BudgetReport, budget: Budget, sources: dict[str, SegmentSource] | None = None) -> list[Annotation]:
    """An error for each part over budget or new, at its line in the budget file (a new part: at its profile's
    ``parts``), and a notice where the part's text comes from (``sources``: part → ``SegmentSource``, see
    :func:`part_sources`)."""
    sources = sources or {}
    out = []
    for result in report.results:
        if not result.failed:
            continue
        key = f"profiles[{result.profile}].parts"
        message = result.problem() or ""
        # over: at the part's own line; new: at its profile's parts (the line it would go under)
        line = budget.line(f"{key}.{result.part}" if result.status == "over" else key)
        out.append(Annotation("error", message, title=f"zhin budget: {result.part} {result.status}", file=budget.path, line=line))
        source = sources.get(result.part)
        if source is not None and source.file:
            out.append(Annotation("notice", f"{result.part} ({result.provider}: {result.measured} tokens) takes its text from here",
                                  title=f"zhin budget: {result.part}", file=source.file, line=source.line))
    return out


def part_sources(report: BudgetReport, *, config_path: Path | None = None, cwd: Path | None = None,
                 context: RunContext | None = None) -> dict[str, SegmentSource]:
    """Where the text of each failed part comes from — the zhin.yaml key, the plugin file, zhin's built-in module —
    found as prefix-diff finds a segment's source (:func:`zhin_cli.pipeline.provenance.segment_sources`, one rule)."""
    failed = [r for r in report.results if r.failed and r.part != TOTAL]
    if not failed:
        return {}
    from zhin_cli.pipeline.provenance import segment_sources

    run = _context(context, config_path, cwd, None)
    with run.pipeline(provider=failed[0].provider, model=failed[0].model) as pipeline:
        return segment_sources(pipeline, [r.part for r in failed])


def budget_summary(report: BudgetReport) -> str:
    lines = [f"### zhin budget check · {report.path}", "", "**over budget**" if report.failed else "within budget", "",
             "| provider | part | budget | measured | Δ tokens | status |", "|---|---|---|---|---|---|"]
    for result in report.results:
        data = result.as_dict()
        delta = "" if data["delta"] is None else f"{data['delta']:+d}"
        icon = "❌ " if result.failed else ""
        lines.append(f"| {summary_cell(result.provider)} | `{summary_cell(result.part)}` | {result.budget if result.budget is not None else '—'} | "
                     f"{result.measured if result.measured is not None else '—'} | {delta} | {icon}{result.status} |")
    return "\n".join(lines) + "\n"
