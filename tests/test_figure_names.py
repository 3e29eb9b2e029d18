"""Issue 31 §1: one figure, one meaning — trace and prefix-diff name the cache behind every cost and cached count.

docs/figures.md defines the names: a single ``trace`` request is *cold* (the request alone), ``trace --all``'s rows
and ``prefix-diff``'s pairs are *warm* (each request after every one before it). The tests check the words in text
and ``--json`` (``cache_model``), and the figures themselves: warm rows equal prefix-diff's pairs, a cold request
equals what a cache holding only that request gives. Also: headers count requests (never "turns"), the session's
notes print at their level (information ``note:``, a row zhin cannot read ``warning:``), and the segment table
writes counts with thousands separators.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import clean_env, run_zhin

from zhin_cli.cache.cost import Pricing
from zhin_cli.tools.trace.trace import request_costs, trace

Run = Callable[..., Any]
BUSY = Path(__file__).parent.parent / "fixtures" / "group-busy.jsonl"
UPSTREAM_DB = Path(__file__).parent / "data" / "upstream-db" / "data.sqlite"
GROUP_A = "onebot11:tokyo-ob11:group:856301447"  # 17 requests for 11 members' turns (the reference's scenario.md)
COLD_LINE = "input cost (cold: this request alone): "
POINTER = "warm: trace --all; timed: report economy"


def ok(result: Any) -> Any:
    assert result.returncode == 0, result.stderr
    return result


def wide() -> dict[str, str]:
    return {**clean_env(), "COLUMNS": "200"}


def as_json(zhin: Run, *args: object) -> Any:
    return json.loads(ok(zhin(*args, "--json")).stdout)


def figures(cost: dict[str, Any]) -> tuple[float, int, int]:
    return cost["usd"], cost["cached_tokens"], cost["uncached_tokens"]


# --- the words ------------------------------------------------------------------------------------------------


def test_a_single_request_is_named_cold_in_text_and_json(zhin: Run) -> None:
    text = ok(zhin("trace", BUSY, "--turn", "16", env=wide())).stdout
    line = next(line for line in text.splitlines() if line.startswith("input cost"))
    assert line.startswith(COLD_LINE + "$") and line.endswith(POINTER), line
    assert "2,701 uncached, 0 cached" in line
    document = as_json(zhin, "trace", BUSY, "--turn", "16")
    assert document["cache_model"] == "cold" and document["version"] == 1
    assert [r["cache_model"] for r in document["requests"]] == ["cold"]
    # negative control: --all's document of the same session says warm, so the key discriminates
    assert {r["cache_model"] for r in as_json(zhin, "trace", BUSY, "--all")["requests"]} == {"warm"}


def test_trace_all_and_prefix_diff_name_their_figures_warm(zhin: Run) -> None:
    rows = ok(zhin("trace", BUSY, "--all", env=wide())).stdout
    header = next(line for line in rows.splitlines() if line.lstrip().startswith("req "))
    assert "warm cost" in header and "turn" not in header
    assert "prompt tokens cached warm" in rows and "warm input cost $" in rows and "cold, a request alone" in rows
    assert COLD_LINE not in rows  # negative control of the cold test: no request of --all is called cold
    diff = ok(zhin("prefix-diff", BUSY, env=wide())).stdout
    assert re.search(r"^\s+req\s+common\s+cached\s+new\s+warm cost\s", diff, re.M)
    assert "warm input cost $" in diff and "cold: trace --turn N" in diff and "cached (warm)" in diff
    document = as_json(zhin, "prefix-diff", BUSY)
    session = document["sessions"][0]
    assert session["summary"]["cache_model"] == "warm" and document["version"] == 1
    assert {p["cache_model"] for p in session["pairs"]} == {"warm"}
    assert all(isinstance(p["cache"], dict) for p in session["pairs"])  # the pair's own object is kept as it was


def test_the_help_texts_say_cold_and_warm(zhin: Run) -> None:
    trace_help = " ".join(ok(zhin("trace", "--help", env=wide())).stdout.split())
    assert "of one request are cold (the request alone); of --all, warm" in trace_help
    assert "cold cache sees it" not in trace_help and "N-th request" in trace_help
    diff_help = " ".join(ok(zhin("prefix-diff", "--help", env=wide())).stdout.split())
    assert "costs are warm" in diff_help


# --- the figures ----------------------------------------------------------------------------------------------


def test_trace_all_rows_equal_prefix_diff_pairs(zhin: Run) -> None:
    requests = as_json(zhin, "trace", BUSY, "--all")["requests"]
    pairs = as_json(zhin, "prefix-diff", BUSY)["sessions"][0]["pairs"]
    assert len(requests) == 16 and len(pairs) == 15
    assert figures(requests[0]["cost"])[1] == 0  # the first request: nothing before it
    for request, pair in zip(requests[1:], pairs, strict=True):
        assert pair["to_turn"] == request["turn"]
        assert figures(request["cost"]) == figures(pair["cost"]), request["turn"]
        assert request["cost"]["cached_tokens"] == pair["cache"]["cached_tokens"]
    # the text rows say the same: trace --all's cached and cost cells are prefix-diff's, row by row
    rows = [line.split() for line in ok(zhin("trace", BUSY, "--all", env=wide())).stdout.splitlines()
            if re.match(r"^\s*\d+\s+[\d,]+\s+[\d,]+\s", line)]
    diff = [line.split() for line in ok(zhin("prefix-diff", BUSY, env=wide())).stdout.splitlines()
            if re.match(r"^\s+\d+→\d+ ", line)]
    assert [(r[2], r[5]) for r in rows[1:]] == [(d[2], d[4]) for d in diff]


@pytest.mark.parametrize("turn", [1, 5, 16])
def test_a_single_request_costs_what_a_one_request_cache_gives(turn: int, tmp_path: Path) -> None:
    warm = trace(str(BUSY), all_turns=True, cwd=tmp_path)
    request = warm.requests[turn - 1]
    assert request.turn == turn
    [(_, outcome, alone)] = list(request_costs([request], Pricing(_price_table(tmp_path))))
    cold = trace(str(BUSY), turn=turn, cwd=tmp_path)
    [cost] = cold.costs
    assert cost is not None and alone is not None
    assert (cost.usd, cost.cached_tokens, cost.uncached_tokens) == (alone.usd, alone.cached_tokens, alone.uncached_tokens)
    assert cost.cached_tokens == outcome.read == 0 and cost.uncached_tokens == request.prompt_tokens


def test_negative_control_warm_and_cold_differ_where_a_prefix_is_cached(tmp_path: Path) -> None:
    """Request 16: warm reads 2,304 cached tokens, cold none — a warm figure printed as cold would be caught."""
    warm = trace(str(BUSY), all_turns=True, cwd=tmp_path).costs[15]
    cold = trace(str(BUSY), turn=16, cwd=tmp_path).costs[0]
    assert warm is not None and cold is not None
    assert (warm.cached_tokens, cold.cached_tokens) == (2304, 0) and warm.usd < cold.usd


def _price_table(cwd: Path) -> Any:
    from zhin_cli.pipeline.config import load_config

    return load_config(None, cwd=cwd).price_table(None)


# --- requests, not turns --------------------------------------------------------------------------------------

TURNS_CLAIM = re.compile(r"\b\d+ turns\b|^turn \d+ ·|\bturn \d+→", re.M)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    copy = tmp_path / "data.sqlite"
    shutil.copyfile(UPSTREAM_DB, copy)  # never the shared file
    return copy


def test_headers_count_requests_on_the_upstream_database(db: Path, tmp_path: Path) -> None:
    texts = [ok(run_zhin(*args, GROUP_A, "--db", db, cwd=tmp_path, env=wide())).stdout
             for args in (("trace", "--all"), ("trace",), ("prefix-diff",))]
    assert all("17 requests" in text for text in (texts[0], texts[2])), texts[0][:300]
    assert re.search(r"^request 17 · ", texts[1], re.M)
    assert [TURNS_CLAIM.findall(text) for text in texts] == [[], [], []]
    # negative control: the check sees the old headers
    assert TURNS_CLAIM.findall("x · openai · gpt-4.1-mini · 17 turns\nturn 17 · openai\n  turn 2→3 differs")


# --- notes at their level -------------------------------------------------------------------------------------


def test_session_notes_keep_their_level() -> None:
    from zhin_cli.tools.trace.trace import WARNING, session_note

    recall = "db: agent_messages row 32: message 2100026 by Leo (284100106) was recalled by 284100102; left out"
    unread = "db: conversation_events row 7: event type 'member.exploded' is not one zhin reads; not read"
    assert session_note(recall) == recall
    assert session_note(unread) == WARNING + unread  # the control: a row zhin cannot read stays a warning


def test_the_recall_note_is_a_note_and_a_bad_row_a_warning(db: Path, tmp_path: Path) -> None:
    text = ok(run_zhin("trace", GROUP_A, "--db", db, cwd=tmp_path, env=wide())).stdout
    recall = [line for line in text.splitlines() if "was recalled by" in line]
    assert recall and recall[0].startswith("note: ") and "warning" not in recall[0]
    notes = json.loads(ok(run_zhin("trace", GROUP_A, "--db", db, "--json", cwd=tmp_path, env=wide())).stdout)["notes"]
    assert [n for n in notes if "was recalled by" in n and not n.startswith("warning: ")]
    # negative control: an event row zhin cannot read is still a warning, never "note: warning:"
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO conversation_events (event_id, conversation_key, message_key, event_json, time)"
                     " VALUES (?, ?, '', ?, ?)", ("x2", "onebot11\x00tokyo-ob11\x00group\x00856301447\x00\x00\x00",
                                                  json.dumps({"type": "member.exploded", "member": {"id": "1"}}),
                                                  1792330960000))
    text = ok(run_zhin("trace", GROUP_A, "--db", db, cwd=tmp_path, env=wide())).stdout
    assert re.search(r"^warning: .*member\.exploded", text, re.M) and "note: warning" not in text


# --- counts with thousands separators -------------------------------------------------------------------------

BARE = re.compile(r"(?<![\d,.$])\d{4,}(?![\d,])")  # a count of four digits or more without separators


def test_the_segment_table_writes_counts_with_separators(zhin: Run) -> None:
    text = ok(zhin("trace", BUSY, "--turn", "16", env=wide())).stdout
    table = [line for line in text.splitlines() if line.startswith("│")]
    assert any("2,540" in line for line in table)  # history.user's characters
    assert [line for line in table if BARE.search(line)] == []
    # negative control: the old cell is caught
    assert BARE.search("│ history.user      │ user        │      0 │   46 │  2540 │   1340 │")


def test_a_greeting_is_not_counted_as_a_request(tmp_path: Path, zhin: Run) -> None:
    from test_greeting import greeted, save

    path = save(greeted(), tmp_path)
    document = as_json(zhin, "trace", path, "--all")
    made = len(document["requests"])
    assert document["greeting_turn"] == 1 and document["turns"] == made + 1  # the control: turns count the greeting
    text = ok(zhin("trace", path, "--all", env=wide())).stdout
    assert f" · {made} request{'s' if made != 1 else ''} and the greeting\n" in text
    assert TURNS_CLAIM.findall(text) == []
