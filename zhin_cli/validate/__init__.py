"""Stage 8 — offline validators that answer what the real APIs answer (status and error text).

Validators are registered per wire format; each rule has a negative test (tests/test_validate_openai.py).
Only rules tagged [V]/[R] in reference/providers.md reject.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Verdict:
    ok: bool
    status: int = 200
    message: str = ""
    param: str | None = None
    type: str | None = None
    code: str | None = None

    def as_dict(self) -> dict[str, Any]:
        if self.ok:
            return {"ok": True, "status": 200}
        return {"ok": False, "status": self.status, "error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


ACCEPTED = Verdict(ok=True)
Validator = Callable[[dict[str, Any], str], Verdict]
VALIDATORS: dict[str, Validator] = {}


def register_validator(wire: str) -> Callable[[Validator], Validator]:
    def add(validator: Validator) -> Validator:
        VALIDATORS[wire] = validator
        return validator

    return add


def validate(wire: str, body: dict[str, Any], model: str) -> Verdict:
    return VALIDATORS[wire](body, model)


from zhin_cli.validate import openai as _openai  # noqa: E402,F401
