"""The shipped eval cases (eval_cases/): every ADR 0041 acceptance criterion is present, every positive case
passes, and every negative control really fails when run as if it were expected to pass (the flip)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from zhin_cli.tools.eval.cases import Case, load_cases
from zhin_cli.tools.eval.runner import EvalOptions, prepare, run_case

ROOT = Path(__file__).resolve().parent.parent
CASES = load_cases([ROOT / "eval_cases"])
OFFLINE = [c for c in CASES if not c.requires_live]
POSITIVE = [c for c in OFFLINE if c.expect == "pass"]
NEGATIVE = [c for c in OFFLINE if c.expect == "fail"]
CRITERIA = ("1", "2", "3", "4", "5", "5a", "6", "7", "8")
# Cases that find a real assembler bug; strict xfail turns red (XPASS) the day the bug is fixed.
KNOWN_BUGS: dict[str, str] = {}  # case id → reason, for a case that finds a bug not fixed yet (strict xfail)


@pytest.fixture(autouse=True)
def _the_projects_own_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped cases load the project's own plugins (eval_cases/plugins/): opted in, as `make gates` does."""
    monkeypatch.setenv("ZHIN_ALLOW_PLUGINS", "1")


def _criterion(case: Case) -> str | None:
    match = re.match(r"ADR 0041 acceptance (\w+)", case.data.get("criterion", ""))
    return match.group(1) if match else None


def _params(cases: list[Case]) -> list[object]:
    return [pytest.param(c, id=c.id, marks=[pytest.mark.xfail(reason=KNOWN_BUGS[c.id], strict=True)] if c.id in KNOWN_BUGS else [])
            for c in cases]


@pytest.mark.parametrize("criterion", CRITERIA)
def test_every_acceptance_criterion_has_a_case_and_a_negative_control(criterion: str) -> None:
    positives = [c for c in POSITIVE if _criterion(c) == criterion]
    negatives = [c for c in NEGATIVE if _criterion(c) == criterion]
    assert positives, f"no eval case for ADR 0041 acceptance {criterion}"
    assert negatives, f"no negative control for ADR 0041 acceptance {criterion}"


def test_criterion_4_has_a_live_case() -> None:
    live = [c for c in CASES if c.requires_live and (c.data.get("criterion") or "").startswith("ADR 0041 acceptance 4")]
    assert live and live[0].data.get("repeat", 1) > 1 and "min_pass_rate" in live[0].data


@pytest.mark.parametrize("case", _params(POSITIVE))
def test_positive_case_passes(case: Case) -> None:
    result = run_case(prepare(case), EvalOptions())
    assert result.status == "passed", result.reason
    assert result.assertions and all(a.status == "passed" for a in result.assertions)


@pytest.mark.parametrize("case", _params(NEGATIVE))
def test_negative_control_fails_when_expected_to_pass(case: Case) -> None:
    """The flip: run the negative variant as if it should pass — it must fail on an assertion (not error)."""
    flipped = run_case(prepare(case), EvalOptions(expect_override="pass"))
    assert flipped.status == "failed", flipped.reason
    assert any(a.status == "failed" for a in flipped.assertions)
    assert not any(a.status == "error" for a in flipped.assertions), flipped.reason
    # …and as written (expect: fail) the runner counts it as passed.
    assert run_case(prepare(case), EvalOptions()).status == "passed"


@pytest.mark.parametrize("case", [c for c in CASES if c.requires_live], ids=lambda c: c.id)
def test_live_cases_are_skipped_offline_with_the_reason(case: Case) -> None:
    result = run_case(prepare(case), EvalOptions())
    assert result.status == "skipped" and "needs --live" in result.reason
