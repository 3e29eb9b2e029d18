"""Stage 8 — offline validators that answer what the real APIs answer (status, error text, error body).

Validators are a registry keyed by name (``openai-chat``, ``anthropic-messages``, ``template:mistral`` …);
a provider profile names the one that speaks for it. Each rule has a failing-input and a passing-input
test. Only rules tagged [V]/[R] in reference/providers.md reject.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from zhin_cli.core.registry import Registry


@dataclass(frozen=True)
class Verdict:
    ok: bool
    status: int = 200
    message: str = ""
    param: str | None = None
    type: str | None = None
    code: str | int | None = None
    # The exact JSON body the real API answers with (its error envelope); None = the OpenAI shape.
    envelope: dict[str, Any] | None = None
    # Accepted, but the real template silently loses part of the request (e.g. "the template drops the tool
    # call of message 3"): no HTTP error would ever say so, so the validator does.
    warnings: tuple[str, ...] = ()

    def error_body(self) -> dict[str, Any]:
        if self.envelope is not None:
            return self.envelope
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def as_dict(self) -> dict[str, Any]:
        if self.ok:
            return {"ok": True, "status": 200, **({"warnings": list(self.warnings)} if self.warnings else {})}
        return {"ok": False, "status": self.status, "body": self.error_body()}


ACCEPTED = Verdict(ok=True)
Validator = Callable[[dict[str, Any], str], Verdict]
VALIDATORS: Registry[Validator] = Registry("validator")


def register_validator(name: str, *, replace: bool = False) -> Callable[[Validator], Validator]:
    return VALIDATORS.adding(name, replace=replace)


def validate(name: str, body: dict[str, Any], model: str) -> Verdict:
    """Run the validator ``name`` (see ``VALIDATORS``) on a wire body for ``model``."""
    if name not in VALIDATORS:
        from zhin_cli.core.errors import ConfigError

        raise ConfigError(f"unknown validator {name!r} (known: {', '.join(sorted(VALIDATORS))})")
    return VALIDATORS[name](body, model)


from zhin_cli.pipeline.validate import anthropic, deepseek, gemini, templates  # noqa: E402,F401
from zhin_cli.pipeline.validate import openai as _openai  # noqa: E402,F401
