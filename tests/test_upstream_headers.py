"""Headers and synthesized state changes on the real upstream database (issue 28, finding 12): a fact zhin
learns late is not a change, a member's product role (the bot's ``master``) is not lost on a message that does not
carry it, and the one real rename is shown. Checked against ``scenario.md`` of ../shared/reference/upstream-db
(copied bytes: tests/data/upstream-db/data.sqlite); every test runs on a copy."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import run_zhin

from zhin_cli.core.model import Actor
from zhin_cli.pipeline.headers import Known, _changes

DATA = Path(__file__).parent / "data" / "upstream-db" / "data.sqlite"
A = "onebot11:tokyo-ob11:group:856301447"
HEADER = re.compile(r"^\[id:m\d+;user_id:([^;]+);(.*?)\] ")

# scenario.md: the only change of a member's facts that upstream did not store as an event is 284100110's card
# `Yuki` → `Yuki🎲` (step 7). Every other state change of group A is one of its stored member events.
STORED_A = [
    '(unknown) changed 284100105 role to "admin"',
    "284100107 join 856301447 on 12:13 by 284100102",
    "284100106 leave 856301447 on 08:45 by 284100101",
    '284100102 changed 284100104 mute_time to "300"',
    "284100109 leave 856301447 on 08:48 by self",
    '284100102 changed 284100104 mute_time to "0"',
    '(unknown) changed 284100105 role to "member"',
    "284100108 join 856301447 on 22:42 by 284100102",
]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    copy = tmp_path / "data.sqlite"
    shutil.copyfile(DATA, copy)
    return copy


def wire_texts(db: Path, tmp_path: Path) -> list[str]:
    result = run_zhin("trace", "--db", db, A, "--show-request", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    request = json.loads(result.stdout)["requests"][-1]["request"]
    return [m["content"] for m in request["messages"] if isinstance(m.get("content"), str)]


def state_lines(texts: list[str]) -> list[str]:
    return [line.removeprefix("[state change] ") for text in texts for line in text.split("\n")
            if line.startswith("[state change] ")]


def headers_of(texts: list[str], user_id: str) -> list[str]:
    return [m.group(2) for text in texts if (m := HEADER.match(text)) and m.group(1) == user_id]


def test_only_the_real_rename_is_synthesized_and_every_stored_event_shows_once(db: Path, tmp_path: Path) -> None:
    lines = state_lines(wire_texts(db, tmp_path))
    synthesized = [line for line in lines if line not in STORED_A]
    assert synthesized == ['(unknown) changed 284100110 name to "Yuki🎲"']
    assert [line for line in lines if line in STORED_A] == STORED_A


def test_a_fact_learned_late_shows_in_a_full_header_not_as_a_change(db: Path, tmp_path: Path) -> None:
    texts = wire_texts(db, tmp_path)
    # 284100101 (the owner) first speaks in an events block, which carries no role; his turn at 12:10 names it
    owner = headers_of(texts, "284100101")
    assert owner[0].startswith("name:健太(部长);") and "role:" not in owner[0]
    assert "role:owner;" in owner[1]
    assert not any("284100101 role" in line for line in state_lines(texts))


def test_the_masters_product_role_is_kept_on_messages_that_do_not_carry_it(db: Path, tmp_path: Path) -> None:
    texts = wire_texts(db, tmp_path)
    assert not any("284100102 role" in line for line in state_lines(texts))  # master,admin all along
    assert "role:master,admin;" in headers_of(texts, "284100102")[0]


def test_a_real_change_of_known_facts_is_still_synthesized() -> None:
    # negative control: a role the model was shown, then another one with no event, is a change
    shown = Known().merged(Actor(subject_id="1", display_name="a", platform_role="member"))
    now = shown.merged(Actor(subject_id="1", display_name="a", platform_role="admin"))
    assert _changes(shown, now, 0) == [("role", "admin")]
    renamed = shown.merged(Actor(subject_id="1", display_name="b", platform_role="member"))
    assert _changes(shown, renamed, 0) == [("name", "b")]


def test_product_roles_of_an_actor_that_names_them_replace_the_old_ones() -> None:
    # negative control of the kept roles: a row that states the member's roles (roles_known) is believed
    master = Known().merged(Actor(subject_id="1", roles=("master",), platform_role="admin"))
    unknown = master.merged(Actor(subject_id="1", display_name="x", roles_known=False))
    assert unknown.role == "master,admin"
    stated = master.merged(Actor(subject_id="1", roles=(), platform_role="admin"))
    assert stated.role == "admin"


def test_prefix_diff_of_a_database_says_it_diffs_zhins_assembly(db: Path, tmp_path: Path) -> None:
    # finding 10: "0 unexpected break(s)" on the database is about zhin's re-assembly, and the output must say so
    text = run_zhin("prefix-diff", "--db", db, A, cwd=tmp_path)
    assert "layout adr-0041: zhin's ADR 0041 assembly of the stored rows, not the body the bot sent" in text.stdout
    data = json.loads(run_zhin("prefix-diff", "--db", db, A, "--json", cwd=tmp_path).stdout)
    assert data["sessions"][0]["layout"] == "adr-0041"
    # negative control: the bot's own captured bodies are not an assembly of zhin's
    captures = Path(__file__).parent.parent.parent / "shared" / "reference" / "upstream-db" / "captures"
    real = run_zhin("prefix-diff", captures, "--json", cwd=tmp_path)
    assert all("layout" not in s for s in json.loads(real.stdout)["sessions"])
