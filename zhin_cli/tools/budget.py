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
what is measured now. Sessions are paths relative to the budget file (or session ids in ``--db``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from zhin_cli.core.errors import ConfigError
from zhin_cli.core.readers import read_yaml_file
from zhin_cli.core.tokens import counter as shared_counter
from zhin_cli.pipeline.assemble import AssembledRequest
from zhin_cli.pipeline.segments import SYSTEM_PROMPT_KINDS

BUDGET_VERSION = 1
DEFAULT_BUDGET_FILE = "prompt-budget.yaml"
TOOLS = "tools"
TOTAL = "total"


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


def fixed_parts(request: AssembledRequest) -> dict[str, int]:
    """Tokens of each system segment (kinds 1–4) and of the tool schemas as the request carries them."""
    parts = {s.id: s.tokens for s in request.segments if s.kind in SYSTEM_PROMPT_KINDS and s.tokens}
    tools = request.request.get("tools")
    if tools:
        # The schemas as sent (each provider's shape), compact JSON: what the tokenizer sees of them.
        parts[TOOLS] = shared_counter(request.encoding).count(json.dumps(tools, ensure_ascii=False, separators=(",", ":")))
    parts[TOTAL] = sum(parts.values())
    return parts


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
    return Budget(path, [str(s) for s in sessions], profiles)


@dataclass
class PartResult:
    provider: str
    model: str | None
    part: str
    budget: int | None  # None: a part the budget does not know (new)
    measured: int | None  # None: a part that is gone

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

    def as_dict(self) -> dict[str, Any]:
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

    def as_dict(self) -> dict[str, Any]:
        return {"version": 1, "budget": self.path, "ok": not self.failed, "parts": [r.as_dict() for r in self.results]}


def compare(profile: ProfileBudget, measured: dict[str, int]) -> list[PartResult]:
    names = list(profile.parts) + [name for name in measured if name not in profile.parts]
    return [PartResult(profile.provider, profile.model, name, profile.parts.get(name), measured.get(name)) for name in names]


def session_ref(budget_dir: Path, ref: str) -> str:
    """A session named in the budget file: a path relative to the file, else a session id for ``--db``."""
    candidate = budget_dir / ref
    return str(candidate) if candidate.exists() else ref


def measure(
    sessions: list[str], provider: str, model: str | None, *, budget_dir: Path, db: str | None = None,
    config_path: Path | None = None, cwd: Path | None = None,
) -> dict[str, int]:
    """The fixed parts of one profile: the largest of each part over the last request of every session (one
    pipeline for the profile; each session costs its last window, ``Pipeline.request``)."""
    from zhin_cli.core.errors import UsageError
    from zhin_cli.pipeline.config import load_config
    from zhin_cli.pipeline.facade import Pipeline
    from zhin_cli.store import load_session

    measurements = []
    with Pipeline.open(load_config(config_path, cwd=cwd), provider=provider, model=model) as pipeline:
        for ref in sessions:
            session = load_session(session_ref(budget_dir, ref), db=db, cwd=cwd)
            if not pipeline.turns(session).total:
                raise UsageError(f"session {session.session_id!r} has no assistant message, so no request to measure")
            measurements.append(fixed_parts(pipeline.request(session, turn=-1)))
    return largest(measurements)


def check_budget(budget: Budget, *, db: str | None = None, config_path: Path | None = None, cwd: Path | None = None) -> BudgetReport:
    report = BudgetReport(str(budget.path))
    for profile in budget.profiles:
        measured = measure(budget.sessions, profile.provider, profile.model, budget_dir=budget.path.parent, db=db,
                           config_path=config_path, cwd=cwd)
        report.results += compare(profile, measured)
    return report


def update_budget(budget: Budget, *, db: str | None = None, config_path: Path | None = None, cwd: Path | None = None) -> Budget:
    """The budget with every profile's parts measured now, written to ``budget.path``."""
    for profile in budget.profiles:
        profile.parts = measure(budget.sessions, profile.provider, profile.model, budget_dir=budget.path.parent, db=db,
                                config_path=config_path, cwd=cwd)
    try:
        budget.path.write_text(budget.as_yaml(), encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write the budget file: {exc.strerror or exc}", where=str(budget.path)) from None
    return budget
