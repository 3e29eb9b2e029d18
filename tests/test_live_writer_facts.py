"""``zhin facts show`` beside a bot that writes: one read snapshot for the session key, scene facts, bot role and
member rows (issue 14 §1 — the same rule as a session load; the harness is tests/test_live_writer.py's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlite_writer
from test_live_writer import MODES, Writer, between_statements, start_db, template  # noqa: F401 - template is a fixture

from zhin_cli.facts import show_facts


def show(db: Path) -> str:
    try:
        return json.dumps(show_facts(str(db), sqlite_writer.SESSION_KEY), sort_keys=True)
    except Exception as exc:  # noqa: BLE001 - every failure is a wrong read here
        return f"error: {type(exc).__name__}: {exc}"


def show_with_writer_at(db: Path, point: int) -> tuple[str, int]:
    writers: list[Writer] = []

    def maybe_write(n: int) -> None:
        if n == point:
            writer = Writer(db, "1", "1")
            writers.append(writer)
            assert writer.wait_for("committing 1", 60), "the writer never reached its COMMIT"
            writer.wait_for("done 1", 0.3)  # committed, or blocked by zhin's read lock

    with between_statements(maybe_write) as statements:
        result = show(db)
    for writer in writers:
        assert "done 1" in writer.finish()
    return result, len(statements)


@pytest.mark.parametrize("mode", MODES)
def test_facts_show_never_mixes_two_states_of_the_database(template: Path, tmp_path: Path, mode: str) -> None:  # noqa: F811
    before = show(start_db(template, tmp_path / "s0", mode))
    after = show(sqlite_writer.snapshot_at(template, 1, tmp_path))
    # Negative control on the data: the writer changes both the scene facts and the member rows.
    assert before != after and not before.startswith("error") and not after.startswith("error")
    assert json.loads(before)["scene"]["title"] != json.loads(after)["scene"]["title"]
    assert json.loads(before)["members"] != json.loads(after)["members"]
    points, point, wrong = 1, 0, []
    while point < points:
        db = start_db(template, tmp_path / f"run{point}", mode)
        result, points = show_with_writer_at(db, point)
        assert show(db) == after  # the writer did produce snapshot 1
        if result not in (before, after):
            wrong.append(f"writer before statement {point}: {result[:300]}")
        point += 1
    assert points >= 4, "the hook saw too few statements to interleave"
    assert not wrong, f"{len(wrong)} of {points} interleavings read wrong: " + " | ".join(wrong)
