"""What a validator answers (``Verdict``) and what a validator is. The validator modules import this module, never
the package: the package (the registry) imports them and registers their functions, so nothing imports back
(issue 32: no module-level import cycle).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from zhin_cli.core.jsontext import JSONObject


@dataclass(frozen=True)
class Verdict:
    ok: bool
    status: int = 200
    message: str = ""
    param: str | None = None
    type: str | None = None
    code: str | int | None = None
    # The exact JSON body the real API answers with (its error envelope); None = the OpenAI shape.
    envelope: JSONObject | None = None
    # Accepted, but the real template silently loses part of the request (e.g. "the template drops the tool
    # call of message 3"): no HTTP error would ever say so, so the validator does.
    warnings: tuple[str, ...] = ()

    def error_body(self) -> JSONObject:
        if self.envelope is not None:
            return self.envelope
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def as_dict(self) -> JSONObject:
        if self.ok:
            return {"ok": True, "status": 200, **({"warnings": list(self.warnings)} if self.warnings else {})}
        return {"ok": False, "status": self.status, "body": self.error_body()}


ACCEPTED = Verdict(ok=True)
Validator = Callable[[JSONObject, str], Verdict]
