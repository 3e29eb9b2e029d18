"""``zhin facts show`` beside a bot that writes: one read snapshot for the session key, scene facts, bot role and
member rows (issue 14 §1 — the same rule as a session load; the harness is tests/test_live_writer.py's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlite_writer
from test_live_writer import MODES, mixed_reads, start_db, template  # noqa: F401 - template is a fixture

from zhin_cli.tools.facts.facts import show_facts


def show(db: Path) -> str:
    try:
        return json.dumps(show_facts(str(db), sqlite_writer.SESSION_KEY), sort_keys=True)
    except Exception as exc:  # noqa: BLE001 - every failure is a wrong read here
        return f"error: {type(exc).__name__}: {exc}"


@pytest.mark.parametrize("mode", MODES)
def test_facts_show_never_mixes_two_states_of_the_database(template: Path, tmp_path: Path, mode: str) -> None:  # noqa: F811
    # Negative control on the data: the writer changes both the scene facts and the member rows.
    before = json.loads(show(start_db(template, tmp_path / "control", mode)))
    after = json.loads(show(sqlite_writer.snapshot_at(template, 1, tmp_path / "control")))
    assert before["scene"]["title"] != after["scene"]["title"] and before["members"] != after["members"]
    wrong, points = mixed_reads(template, tmp_path, mode, show)
    assert points >= 4, "the hook saw too few statements to interleave"
    assert not wrong, f"{len(wrong)} of {points} interleavings read wrong: " + " | ".join(wrong)
