"""check-capture's settings hint (issue 30 review, finding 7): half or more of the checked messages departing
gets the line (exactly half used to get none), and a group chat checked without ``--group`` gets it naming
``--group`` whatever the count (it used to get only a note).

The threshold is a rule on counts, tested on results built for it (2 of 4 messages departing: hint; 1 of 4: none,
the negative control). The group case runs the golden ``group-swap`` run of ``tests/st_golden2`` without its group
file (first card only) — and, as its negative control, with it (0 departures, no hint).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from zhin_cli.tools.preset.capture import CaptureFile, CaptureResult, CheckResult, check_capture, settings_hint
from zhin_cli.tools.preset.check import Departure, TurnCheck

GOLDEN = Path(__file__).resolve().parent / "st_golden2"
RUN = next(run for run in json.loads((GOLDEN / "runs.json").read_text(encoding="utf-8")) if run["label"] == "group-swap")


def _result(departing: int, messages: int) -> CheckResult:
    departures = [Departure(1, i, i, "system", "system", "preset:main", "changed", None, 0, "a", "b", 0)
                  for i in range(departing)]
    check = TurnCheck(1, departures, [], {}, [], messages=messages)
    return CheckResult(Path("captured"), [CaptureResult(CaptureFile(Path("00001-chat-completions.json"), 1,
                                                                    "chat-completions"), check)], [])


@pytest.mark.parametrize(("departing", "messages", "hinted"), [(2, 4, True), (3, 4, True), (1, 4, False),
                                                                (0, 4, False), (5, 11, False), (6, 11, True)])
def test_half_or_more_departing_gets_the_hint(departing: int, messages: int, hinted: bool) -> None:
    hint = settings_hint(_result(departing, messages))
    assert (hint is not None) == hinted
    assert hint is None or hint.startswith(f"hint: {departing} departures in {messages} ST messages")


def _check(tmp_path: Path, *, group: bool) -> CheckResult:
    folder = tmp_path / "captured"
    folder.mkdir()
    for n in range(1, RUN["requests"] + 1):
        shutil.copy(GOLDEN / "runs" / "group-swap" / f"request-{n:02d}.json", folder / f"{n:05d}-chat-completions.json")
    persona = json.loads((GOLDEN / RUN["persona"]).read_text(encoding="utf-8"))
    (record,) = persona["persona_descriptions"].values()
    cards = [GOLDEN / path for path in RUN["cards"]]
    return check_capture(folder, preset=GOLDEN / RUN["preset"], chat=GOLDEN / "runs" / "group-swap" / "chat.jsonl",
                         card=cards if group else cards[0], persona_description=record["description"],
                         post_processing="none", group=GOLDEN / RUN["group"] if group else None)


def test_a_group_chat_checked_as_a_private_one_gets_the_hint(tmp_path: Path) -> None:
    result = _check(tmp_path, group=False)
    hint = settings_hint(result)
    assert result.departures > 0 and hint is not None and "--group" in hint and "group chat" in hint


def test_with_its_group_file_no_hint(tmp_path: Path) -> None:
    result = _check(tmp_path, group=True)
    assert result.departures == 0 and settings_hint(result) is None
