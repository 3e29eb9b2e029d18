"""The extension points of ``zhin eval`` over a run's requests: assertion types and request transforms.

Each is a :class:`~zhin_cli.core.registry.Registry` keyed by name (a duplicate name is an error unless
``replace=True``); adding one is registering one object (its JSON Schema travels with it, so the published case
schema grows with the registry and never drifts from what the runner accepts). Timeline steps are the third
extension point; they act on the timeline's ``Builder`` and are registered beside it (``timeline.step``), so this
module does not depend on the timeline, nor the timeline on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from zhin_cli.core.registry import Registry

if TYPE_CHECKING:
    from zhin_cli.core.jsontext import JSON, JSONObject
    from zhin_cli.pipeline.assemble import AssembledRequest
    from zhin_cli.tools.eval.live import LiveReply


@dataclass(frozen=True)
class Outcome:
    """What one assertion says about one provider run: passed, or failed with the reason."""

    ok: bool
    message: str = ""


@dataclass
class ProviderRun:
    """Everything one case produced under one provider profile: the requests of every turn, in order."""

    provider: str
    model: str
    requests: list[AssembledRequest]
    labels: dict[str, int]  # turn label → index into ``requests``
    replies: list[LiveReply] = field(default_factory=list)  # live: one reply per repeat, for the chosen turn
    greetings: tuple[int, ...] = ()  # turn numbers without a request: the greeting (docs/eval.md)

    def select(self, turn: JSON) -> list[tuple[int, AssembledRequest]]:
        """``turn``: a turn number as ``zhin trace`` counts it (``request.turn``: the greeting is turn 1 and has no
        request), negative from the last request, a label, ``last`` (default) or ``all`` (every request)."""
        if turn is None or turn == "last":
            turn = -1
        if turn == "all":
            return [(r.turn, r) for r in self.requests]
        if isinstance(turn, str):
            if turn not in self.labels:
                raise LookupError(f"no turn labelled {turn!r} (labels: {', '.join(sorted(self.labels)) or 'none'})")
            request = self.requests[self.labels[turn]]
            return [(request.turn, request)]
        if not isinstance(turn, int) or isinstance(turn, bool):
            raise LookupError(f"turn {turn!r} is not a turn number, a label, last or all")
        if turn < 0 and -turn <= len(self.requests):
            request = self.requests[turn]
            return [(request.turn, request)]
        found = [(r.turn, r) for r in self.requests if turn > 0 and r.turn == turn]
        if found:
            return found
        if turn in self.greetings:
            raise LookupError(f"turn {turn} is the greeting: no request is made for it (as in zhin trace)")
        raise LookupError(f"turn {turn} does not exist (this conversation has {len(self.requests)} request(s))")


# An assertion's or a transform's keys as the case gives them, already checked against its ``params`` schema.
Check = Callable[[ProviderRun, "JSONObject"], Outcome]


@dataclass(frozen=True)
class AssertionType:
    name: str
    check: Check
    params: JSONObject  # JSON Schema of the assertion's own keys
    required: tuple[str, ...] = ()
    live: bool = False  # needs a reply from a live model (skipped offline)
    summary: str = ""


ASSERTIONS: Registry[AssertionType] = Registry("assertion type")


def summary_of(function: Callable[..., object]) -> str:
    """The first paragraph of a docstring, on one line: the summary the case schema and ``zhin schema`` show."""
    return (function.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")


def assertion(name: str, *, params: JSONObject | None = None, required: tuple[str, ...] = (), live: bool = False,
              replace: bool = False) -> Callable[[Check], Check]:
    """Register an assertion type: ``@assertion("verdict", params={...})`` over ``check(run, spec) -> Outcome``."""

    def add(check: Check) -> Check:
        ASSERTIONS.add(name, AssertionType(name, check, params or {}, required, live, summary_of(check)), replace=replace)
        return check

    return add


Transform = Callable[["AssembledRequest", "JSONObject"], "JSONObject"]


@dataclass(frozen=True)
class TransformType:
    name: str
    apply: Transform  # returns a new wire body (the runner re-validates it)
    params: JSONObject
    summary: str = ""


TRANSFORMS: Registry[TransformType] = Registry("transform")


def transform(name: str, params: JSONObject | None = None, *, replace: bool = False) -> Callable[[Transform], Transform]:
    """Register a request transform (used by negative controls to build what a naive assembler would send)."""

    def add(apply: Transform) -> Transform:
        TRANSFORMS.add(name, TransformType(name, apply, params or {}, summary_of(apply)), replace=replace)
        return apply

    return add



# --- reading a checked spec -------------------------------------------------------------------------------------
# A spec was validated against its type's ``params`` schema before its check runs, so a key holds the type the
# schema names; these return it as that type. Another type means a check reads a key its schema does not type: a
# bug in the check (TypeError), never the case's fault.


def _wrong(key: str, value: object, kind: str) -> TypeError:
    return TypeError(f"spec key {key!r} is {value!r}, not {kind}: its params schema does not say so")


def spec_text(spec: Mapping[str, JSON], key: str, default: str = "") -> str:
    value = spec.get(key, default)
    if not isinstance(value, str):
        raise _wrong(key, value, "text")
    return value


def spec_int(spec: Mapping[str, JSON], key: str, default: int = 0) -> int:
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _wrong(key, value, "an integer")
    return value


def spec_number(spec: Mapping[str, JSON], key: str, default: float = 0) -> float:
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _wrong(key, value, "a number")
    return value


def spec_texts(spec: Mapping[str, JSON], key: str) -> list[str]:
    """A list of text (an empty list when the key is absent)."""
    value = spec.get(key, [])
    texts = [item for item in value if isinstance(item, str)] if isinstance(value, list) else None
    if texts is None or isinstance(value, list) and len(texts) != len(value):
        raise _wrong(key, value, "a list of text")
    return texts
