"""A validator's warnings are the request's warnings (issue 16 item 9, the providers <-> validators cycle).

A local template that silently drops part of a body says so in its ``Verdict.warnings``; the request used to get
those from the renderer, which imported the validators to judge the body a second time (a cycle across the stage
packages, tests/test_layers.py). Now assemble adds the verdict's warnings after the renderer's, so the rendering
stage never imports the validation stage. zhin's renderers avoid every known drop, so the path is driven here
with a validator that warns.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from zhin_cli.pipeline.facade import Pipeline
from zhin_cli.pipeline.validate import VALIDATORS, Verdict
from zhin_cli.store.jsonl import read_session

SESSION = Path(__file__).resolve().parent.parent / "fixtures" / "private-chat.jsonl"
WARNING = "the template drops the tool call of message 3 (a test validator)"


def last_request_warnings() -> list[str]:
    with Pipeline.open(None, provider="openai", model="gpt-4o", cwd=SESSION.parent) as pipeline:
        return pipeline.request(read_session(SESSION)).warnings


def test_the_verdicts_warnings_reach_the_request_after_the_renderers(monkeypatch: pytest.MonkeyPatch) -> None:
    original = VALIDATORS["openai-chat"]

    def warning_validator(body: dict, model: str) -> Verdict:  # type: ignore[type-arg]
        verdict = original(body, model)
        return Verdict(ok=verdict.ok, warnings=(*verdict.warnings, WARNING))

    before = last_request_warnings()
    monkeypatch.setitem(VALIDATORS, "openai-chat", warning_validator)
    assert last_request_warnings() == [*before, WARNING]


def test_negative_control_no_validator_warning_no_request_warning() -> None:
    assert WARNING not in last_request_warnings()
