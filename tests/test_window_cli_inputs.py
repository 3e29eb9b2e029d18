"""`report window --min-context`: a mean number of messages, 0 or more — anything else is one line, exit 2, before
any replay (a NaN floor compared nothing; -inf printed `-Infinity`, which is not JSON)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from conftest import FIXTURES


@pytest.mark.parametrize("value", ["-inf", "inf", "nan", "-1"])
def test_a_floor_that_is_not_a_count_of_messages_is_one_line(zhin: Callable[..., Any], value: str) -> None:
    result = zhin("report", "window", FIXTURES / "private-chat.jsonl", f"--min-context={value}", "--json")
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("zhin: error: --min-context")


def test_a_floor_of_zero_recommends_the_cheapest_policy(zhin: Callable[..., Any]) -> None:
    """Control: 0 is a floor (every policy keeps at least that much)."""
    import json

    result = zhin("report", "window", FIXTURES / "private-chat.jsonl", "--min-context=0", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["recommended"]["cost_per_request"] == min(p["cost_per_request"] for p in data["policies"])


@pytest.mark.parametrize("value", ["-0", "-0.0", "-0e5"])
def test_a_negative_zero_floor_is_zero_in_text_and_json(zhin: Callable[..., Any], value: str) -> None:
    """Issue 27 item 11: ``--min-context -0`` printed ``(≥ -0.0)``."""
    import json

    text = zhin("report", "window", FIXTURES / "private-chat.jsonl", f"--min-context={value}", "-j", "1")
    assert text.returncode == 0, text.stderr
    last = text.stdout.strip().splitlines()[-1]
    assert last.endswith("(≥ 0.0)") and "-0" not in last, last
    as_json = zhin("report", "window", FIXTURES / "private-chat.jsonl", f"--min-context={value}", "-j", "1", "--json")
    assert '"min_context": 0.0' in as_json.stdout and '"min_context": -0.0' not in as_json.stdout
    # negative control: the check sees a negative zero where one is printed
    assert f"(≥ {-0.0:.1f})".endswith("(≥ -0.0)") and json.dumps({"min_context": -0.0}) == '{"min_context": -0.0}'
