"""eval reads its checked specs as JSON and narrows each key (issue 32): a number, a plugin step's inline segment."""

from __future__ import annotations

import pytest

from zhin_cli.core.jsontext import JSONObject
from zhin_cli.pipeline.segments import TextSegment
from zhin_cli.tools.eval.registry import spec_number
from zhin_cli.tools.eval.runner import _text_segment


@pytest.mark.parametrize("value", [2, 2.5, 0])
def test_spec_number_reads_an_integer_or_a_float(value: float) -> None:
    assert spec_number({"weight": value}, "weight") == value


@pytest.mark.parametrize("value", [True, "2", None, [1]])
def test_spec_number_refuses_what_is_not_a_number(value: object) -> None:  # negative control
    with pytest.raises(TypeError, match="not a number"):
        spec_number({"weight": value}, "weight")  # type: ignore[dict-item]


def test_spec_number_default_when_absent() -> None:
    assert spec_number({}, "weight") == 0
    assert spec_number({}, "weight", 1.5) == 1.5


def test_an_inline_segment_keeps_its_weight_and_retention() -> None:
    segment: JSONObject = {"id": "rules", "kind": "role_rules", "text": "be brief", "weight": 3, "retention": "required"}
    assert _text_segment(segment) == TextSegment("rules", "role_rules", "be brief", 3, "required")
    defaults: JSONObject = {"id": "env", "kind": "environment", "text": "x"}
    assert _text_segment(defaults) == TextSegment("env", "environment", "x", 0, "preferred")


def test_an_inline_segment_with_an_unknown_retention_is_refused() -> None:  # negative control: not read as preferred
    with pytest.raises(TypeError, match="retention 'sometimes'"):
        _text_segment({"id": "env", "kind": "environment", "text": "x", "retention": "sometimes"})
