"""check-capture's one-line hint when most messages depart (issue 30 item 5): a settings mismatch, not a text.

The first golden set's ``strict`` run checked without its post-processing departs almost everywhere: the hint
line is there. The negative controls: the same run with the right setting (no departure, no hint), and a run
with a few real departures (World Info checked at the wrong scan depth: 7 in 8 turns) — departures, no hint.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from zhin_cli.tools.preset.capture import CheckResult, check_capture, report_lines

TESTS = Path(__file__).resolve().parent
GOLDEN = TESTS / "st_golden"
GOLDEN2 = TESTS / "st_golden2"


def _folder(tmp_path: Path, requests: Path) -> Path:
    folder = tmp_path / "captured"
    folder.mkdir()
    for request in sorted(requests.glob("request-*.json")):
        shutil.copy(request, folder / f"{int(request.stem.split('-')[1]):05d}-chat-completions.json")
    return folder


def _strict(tmp_path: Path, post_processing: str) -> CheckResult:
    persona = json.loads((GOLDEN / "content" / "golden-persona.json").read_text(encoding="utf-8"))
    return check_capture(_folder(tmp_path, GOLDEN / "runs" / "strict"), preset=GOLDEN / "content" / "golden-preset.json",
                         chat=GOLDEN / "runs" / "strict" / "chat.jsonl", card=GOLDEN / "content" / "golden-card.json",
                         lore=GOLDEN / "content" / "golden-lore.json", persona_description=persona["description"],
                         post_processing=post_processing)


def _hints(result: CheckResult) -> list[str]:
    return [line for line in report_lines(result) if line.startswith("hint: ")]


def test_most_messages_departing_gives_one_hint(tmp_path: Path) -> None:
    result = _strict(tmp_path, "")
    (hint,) = _hints(result)
    assert f"{result.departures} departures in " in hint and "--post-processing" in hint


def test_no_hint_with_the_right_setting(tmp_path: Path) -> None:
    result = _strict(tmp_path, "strict")
    assert result.departures == 0 and _hints(result) == []


def test_no_hint_for_a_few_real_departures(tmp_path: Path) -> None:
    persona = json.loads((GOLDEN2 / "content" / "persona-Hal_Brennick.json").read_text(encoding="utf-8"))
    (record,) = persona["persona_descriptions"].values()
    run = GOLDEN2 / "runs" / "wi-global-scan"
    result = check_capture(_folder(tmp_path, run), preset=GOLDEN2 / "content" / "st-default-preset.json",
                           chat=run / "chat.jsonl", card=GOLDEN2 / "content" / "card-Mirela_Stoyan-no-book.json",
                           lore=[GOLDEN2 / "content" / "lore-Greyreach_Almanac_Global.json"],
                           persona_description=record["description"])  # ST's default scan depth 2; ST ran at 4
    assert result.departures > 0 and _hints(result) == []
