"""``zhin export`` of a real upstream session writes nothing of the machine it ran on (review of issue 28: the
events-block lines carried the database's absolute path 27 times)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import run_zhin

DATA = Path(__file__).parent / "data" / "upstream-db" / "data.sqlite"
A = "onebot11:tokyo-ob11:group:856301447"


def test_an_export_names_the_block_row_not_the_databases_path(tmp_path: Path) -> None:
    folder = tmp_path / "some-where-unusual"
    folder.mkdir()
    db = folder / "data.sqlite"
    shutil.copyfile(DATA, db)
    result = run_zhin("export", "--db", db, A, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "some-where-unusual" not in result.stdout
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    rows = [line["eventsBlockRow"] for line in lines if "eventsBlockRow" in line]
    assert len(rows) == 28 - 1 and all(isinstance(r, int) for r in rows)  # group A's 28 lines but the recalled ad
    # negative control: the block rows named are the stored ones (agent_messages ids of role user)
    import sqlite3

    with sqlite3.connect(db) as conn:
        blocks = {r for (r,) in conn.execute("SELECT id FROM agent_messages WHERE payload LIKE '%Untrusted conversation events%'")}
    assert set(rows) <= blocks and len(set(rows)) > 1
