"""Eval before/after (ADR 0041 §8 slice E, "eval:chat 前后对比"): the same cases under two configurations.

``compare_results(base, head)`` takes two ``zhin eval --json`` documents (from ``--base/--head`` runs or
saved files) and reports per case: the status change, and per provider the request-token and header-token
deltas, turns whose prefix newly breaks (or no longer does), and turns the validator newly rejects (or
accepts). A case *regresses* when it passed and now fails or errors, when a turn is newly rejected, or when
the prefix newly breaks; token growth is reported, not judged (that is ``zhin budget``'s job).
Cases are matched by file name and id, so the two runs may come from different checkouts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict, TypeVar

from zhin_cli.core.errors import InputError
from zhin_cli.tools.eval.result import Break, CaseDocument, EvalDocument, Rejection, RunMetrics, check_result

Item = TypeVar("Item", Break, Rejection)


class ProviderChangeDocument(TypedDict):
    provider: str
    prompt_tokens_delta: int | None
    header_tokens_delta: int | None
    new_breaks: list[Break]
    fixed_breaks: list[Break]
    new_rejections: list[Rejection]
    fixed_rejections: list[Rejection]


class CaseChangeDocument(TypedDict):
    case: str
    base: str | None
    head: str | None
    change: str
    reasons: list[str]
    providers: list[ProviderChangeDocument]


class ComparisonDocument(TypedDict):
    """``zhin eval compare --json`` (and ``--base/--head --json``)."""

    version: int
    base: str
    head: str
    summary: dict[str, int]
    regressions: int
    cases: list[CaseChangeDocument]

GOOD = ("passed",)
BAD = ("failed", "error")


@dataclass
class ProviderChange:
    provider: str
    prompt_tokens: int | None  # head − base; None when one side lacks the metrics
    header_tokens: int | None
    new_breaks: list[Break] = field(default_factory=list)
    fixed_breaks: list[Break] = field(default_factory=list)
    new_rejections: list[Rejection] = field(default_factory=list)
    fixed_rejections: list[Rejection] = field(default_factory=list)

    def as_dict(self) -> ProviderChangeDocument:
        return {"provider": self.provider, "prompt_tokens_delta": self.prompt_tokens, "header_tokens_delta": self.header_tokens,
                "new_breaks": self.new_breaks, "fixed_breaks": self.fixed_breaks,
                "new_rejections": self.new_rejections, "fixed_rejections": self.fixed_rejections}


@dataclass
class CaseChange:
    key: str  # file name :: case id
    base: str | None  # status, None: the case is not in that run
    head: str | None
    providers: list[ProviderChange] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)  # why it regressed

    @property
    def regressed(self) -> bool:
        return bool(self.reasons)

    @property
    def change(self) -> str:
        if self.base is None:
            return "added"
        if self.head is None:
            return "removed"
        if self.regressed:
            return "regressed"
        if self.base in BAD and self.head in GOOD:
            return "fixed"
        moved = any(p.prompt_tokens or p.header_tokens or p.fixed_breaks or p.fixed_rejections for p in self.providers)
        return "changed" if moved or self.base != self.head else "same"

    def as_dict(self) -> CaseChangeDocument:
        return {"case": self.key, "base": self.base, "head": self.head, "change": self.change, "reasons": self.reasons,
                "providers": [p.as_dict() for p in self.providers]}


@dataclass
class Comparison:
    base_label: str
    head_label: str
    cases: list[CaseChange]

    @property
    def regressions(self) -> list[CaseChange]:
        return [c for c in self.cases if c.regressed]

    def as_dict(self) -> ComparisonDocument:
        counts: dict[str, int] = {}
        for case in self.cases:
            counts[case.change] = counts.get(case.change, 0) + 1
        return {"version": 1, "base": self.base_label, "head": self.head_label, "summary": counts,
                "regressions": len(self.regressions), "cases": [c.as_dict() for c in self.cases]}


def case_key(case: CaseDocument) -> str:
    return f"{Path(str(case.get('file', ''))).name}::{case.get('id')}"


def _turns(items: list[Item]) -> dict[int, Item]:
    return {int(item["turn"]): item for item in items}


def _new_and_fixed(before: list[Item], after: list[Item]) -> tuple[list[Item], list[Item]]:
    """The items of turns only ``after`` has, and those of turns only ``before`` has, by turn."""
    old, new = _turns(before), _turns(after)
    return [new[t] for t in sorted(new.keys() - old.keys())], [old[t] for t in sorted(old.keys() - new.keys())]


def _provider_change(name: str, base: RunMetrics | None, head: RunMetrics | None) -> ProviderChange:
    if base is None or head is None:
        return ProviderChange(name, None, None)
    change = ProviderChange(name, head["prompt_tokens"] - base["prompt_tokens"], head["header_tokens"] - base["header_tokens"])
    change.new_breaks, change.fixed_breaks = _new_and_fixed(base["unexpected_breaks"], head["unexpected_breaks"])
    change.new_rejections, change.fixed_rejections = _new_and_fixed(base["rejected"], head["rejected"])
    return change


def compare_case(base: CaseDocument | None, head: CaseDocument | None) -> CaseChange:
    either = head or base
    key = case_key(either) if either is not None else "::None"
    change = CaseChange(key, base.get("status") if base else None, head.get("status") if head else None)
    if base is None or head is None:
        return change
    if change.base in GOOD and change.head in BAD:
        change.reasons.append(f"{change.base} → {change.head}: {head.get('reason') or ''}".rstrip(": "))
    base_metrics = {m["provider"]: m for m in base.get("metrics") or []}
    head_metrics = {m["provider"]: m for m in head.get("metrics") or []}
    for name in dict.fromkeys([*base_metrics, *head_metrics]):
        provider = _provider_change(name, base_metrics.get(name), head_metrics.get(name))
        change.providers.append(provider)
        # A negative control is *meant* to produce rejections and breaks; only its status says whether it works.
        if head.get("expect") == "fail":
            continue
        for rejection in provider.new_rejections:
            change.reasons.append(f"{name}: turn {rejection['turn']} is now rejected ({rejection['status']}: {rejection['message']})")
        for broken in provider.new_breaks:
            where = f" in {broken['segment']}" if broken.get("segment") else ""
            change.reasons.append(f"{name}: the prefix now breaks at turn {broken['turn']} ({broken['cause']}{where})")
    return change


def compare_results(base: EvalDocument, head: EvalDocument, base_label: str = "base", head_label: str = "head") -> Comparison:
    base_cases = {case_key(c): c for c in base.get("cases") or []}
    head_cases = {case_key(c): c for c in head.get("cases") or []}
    keys = list(dict.fromkeys([*base_cases, *head_cases]))
    return Comparison(base_label, head_label, [compare_case(base_cases.get(k), head_cases.get(k)) for k in keys])


@dataclass(frozen=True)
class ComparisonRow:
    """One case that changed, as the before/after table shows it (plain text; the CLI escapes and colours it)."""

    case: str
    verdicts: str  # "pass → fail"
    change: str
    request_tokens: str  # "openai +12, anthropic -3"
    header_tokens: str
    notes: str


def comparison_rows(comparison: Comparison) -> list[ComparisonRow]:
    """The table's rows: every case whose change is not ``same`` (none: the CLI draws no table)."""
    rows = []
    for case in comparison.cases:
        if case.change == "same":
            continue
        deltas = [(p.provider, p.prompt_tokens, p.header_tokens) for p in case.providers if p.prompt_tokens or p.header_tokens]
        notes = list(case.reasons)
        for p in case.providers:
            notes += [f"{p.provider}: turn {b['turn']} prefix no longer breaks" for b in p.fixed_breaks]
            notes += [f"{p.provider}: turn {r['turn']} no longer rejected" for r in p.fixed_rejections]
        rows.append(ComparisonRow(case.key, f"{case.base or '—'} → {case.head or '—'}", case.change,
                                  ", ".join(f"{name} {tokens:+d}" for name, tokens, _ in deltas if tokens),
                                  ", ".join(f"{name} {tokens:+d}" for name, _, tokens in deltas if tokens),
                                  "; ".join(notes)))
    return rows


def load_result(path: Path) -> EvalDocument:
    """A saved ``zhin eval --json`` document, checked (``result.check_result``) before anything reads it."""
    from zhin_cli.core.readers import read_json_file

    data, _ = read_json_file(path, InputError, "eval result")
    return check_result(data, path)
