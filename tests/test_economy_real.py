"""``report economy`` on the real upstream bot's database (issue 29, Build item 3): what the bot paid per request —
its stored usage, priced by the price table — beside what ADR 0041's simulated request for the same turn costs.

The database is a copy of tests/data/upstream-db/data.sqlite (upstream's own bytes; ../shared/reference/upstream-db).
The expected figures are read straight from its ``agent_messages.payload`` JSON with ``sqlite3``/``json``, not
through zhin's reader, and priced by hand at a price row this file passes in (``--prices``), so a built-in row
cannot make a test pass by coincidence.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import run_zhin

from zhin_cli.tools.report.economy import ADR_LABEL, BILL_CAVEAT, PAID_LABEL, EconomyReport, is_captures, run_economy

DATA = Path(__file__).parent / "data" / "upstream-db" / "data.sqlite"
GROUP_A = "onebot11:tokyo-ob11:group:856301447"
GROUP_B = "onebot11:tokyo-ob11:group:613770258"
PRIVATE = "onebot11:tokyo-ob11:private:284100105"
# USD per million tokens: far from every built-in row, so a figure at the built-in gpt-4.1-mini row ($0.40/$0.10) fails
INPUT, CACHED = 3.0, 0.5
PRICES = f"""version: 1
providers:
  openai:
    models:
      gpt-4.1-mini:
        input: {INPUT}
        cached_input: {CACHED}
        source: tests/test_economy_real.py
        read_on: 2026-12-03
"""


def hand_usd(prompt: int, cached: int, written: int = 0, input_price: float = INPUT, cached_price: float = CACHED) -> float:
    """OpenAI by hand: uncached (and written: OpenAI's writes are plain input) at the input price, cached at its own."""
    return ((prompt - cached) * input_price + cached * cached_price) / 1e6


def stored_usage(db: Path) -> dict[int, dict[str, Any]]:
    """Every assistant row's ``payload.usage``, by row id, as upstream stored it (None: the row has none)."""
    with sqlite3.connect(db) as connection:
        rows = connection.execute("select id, payload from agent_messages where role = 'assistant'").fetchall()
    return {row_id: json.loads(payload).get("usage") for row_id, payload in rows}


def edit_payloads(db: Path, sql: str, *params: object) -> None:
    with sqlite3.connect(db) as connection:
        connection.execute(sql, params)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    copy = tmp_path / "data.sqlite"
    shutil.copyfile(DATA, copy)
    return copy


@pytest.fixture
def prices(tmp_path: Path) -> Path:
    path = tmp_path / "prices.yaml"
    path.write_text(PRICES, encoding="utf-8")
    return path


def economy(db: Path, prices: Path | None, *refs: str) -> EconomyReport:
    return run_economy(list(refs), cwd=db.parent, db=str(db), providers=["openai"], prices_file=prices)


def bill_rows(report: EconomyReport) -> dict[int, dict[str, Any]]:
    """Every session's bill rows by stored row id."""
    return {row["row_id"]: row for session in report.as_dict()["sessions"] for row in session["bill"]["requests"]}


def session_of(report: EconomyReport, key: str) -> dict[str, Any]:
    return next(s for s in report.as_dict(per_request=True)["sessions"] if s["session_id"].startswith(key + "#"))


# --- the bot's side: its stored usage, priced -----------------------------------------------------------------


def test_each_request_is_billed_at_its_stored_usage(db: Path, prices: Path) -> None:
    usage = stored_usage(db)
    rows = bill_rows(economy(db, prices))
    assert sorted(rows) == sorted(usage) and len(rows) == 27  # every request of the three sessions (scenario: 27)
    for row_id, stored in usage.items():
        paid = rows[row_id]["paid"]
        # upstream's input includes the cached tokens (README: totalTokens == input + output)
        assert (paid["prompt"], paid["cached"], paid["written"]) == (stored["input"], stored["cacheRead"], stored["cacheWrite"])
        assert paid["usd"] == pytest.approx(hand_usd(stored["input"], stored["cacheRead"]), abs=1e-8)
        assert rows[row_id]["model"] == "gpt-4.1-mini" and rows[row_id]["price"] == {"provider": "openai", "model": "gpt-4.1-mini"}
    # the brief's example, spelled out: row 9 sent 2,583 prompt tokens and read 2,432 of them from the cache
    assert rows[9]["paid"] == {"prompt": 2583, "cached": 2432, "written": 0,
                               "usd": round((151 * INPUT + 2432 * CACHED) / 1e6, 8)}


def test_totals_add_up_per_session(db: Path, prices: Path) -> None:
    report = economy(db, prices)
    usage = stored_usage(db)
    sessions = report.as_dict()["sessions"]
    assert len(sessions) == 3  # --db with no session: every session
    assert sum(len(s["bill"]["requests"]) for s in sessions) == len(usage)
    for session in sessions:
        bill = session["bill"]
        assert bill["reason"] is None
        totals = bill["totals"]
        assert totals["requests_compared"] == len(bill["requests"]) and totals["requests_without_usage"] == 0
        for side in ("paid", "adr"):
            rows = [row[side] for row in bill["requests"]]
            assert totals[side]["prompt"] == sum(r["prompt"] for r in rows)
            assert totals[side]["cached"] == sum(r["cached"] for r in rows)
            assert totals[side]["cost"]["total"] == pytest.approx(sum(r["usd"] for r in rows), abs=1e-7)
            assert totals[side]["cost"]["requests"] == len(rows)
    sent = sum(s["bill"]["totals"]["paid"]["prompt"] for s in sessions)
    assert sent == sum(u["input"] for u in usage.values())


def test_the_bot_side_is_the_figure_trace_shows(db: Path) -> None:
    """trace prints "the bot sent N prompt tokens, M cached (its stored usage, row R)": the same reading."""
    report = economy(db, None, GROUP_A)
    rows = bill_rows(report)
    turn = rows[9]["turn"]
    traced = run_zhin("trace", GROUP_A, "--db", db, "--turn", turn, "--json", cwd=db.parent)
    assert traced.returncode == 0, traced.stderr
    stored = json.loads(traced.stdout)["requests"][0]["stored_usage"]
    assert stored["row_id"] == 9
    assert (stored["total_prompt"], stored["cache_read"]) == (rows[9]["paid"]["prompt"], rows[9]["paid"]["cached"])
    other = rows[12]  # control: another request's figures differ from row 9's
    assert (other["paid"]["prompt"], other["paid"]["cached"]) != (stored["total_prompt"], stored["cache_read"])


# --- the ADR side: today's report economy, priced at the bot's row --------------------------------------------


def test_the_adr_side_is_todays_report_economy(db: Path, prices: Path, tmp_path: Path) -> None:
    report = economy(db, prices, GROUP_A)
    session = session_of(report, GROUP_A)
    simulated = session["cache"]["openai"]["per_request"]
    bill = session["bill"]["requests"]
    assert len(simulated) == len(bill) == 17
    # the same session with no usage at all: report economy's figures as they are without a bill
    bare = tmp_path / "bare.sqlite"
    shutil.copyfile(db, bare)
    edit_payloads(bare, "update agent_messages set payload = json_remove(payload, '$.usage') where role = 'assistant'")
    before = session_of(economy(bare, prices, GROUP_A), GROUP_A)
    assert before["cache"] == session["cache"]  # the bill changes none of the simulated figures
    for row, figures in zip(bill, before["cache"]["openai"]["per_request"], strict=True):
        adr = figures["adr"]
        assert row["turn"] == figures["turn"] and row["adr_case"] == "openai"
        assert (row["adr"]["prompt"], row["adr"]["cached"], row["adr"]["written"]) == (adr["prompt"], adr["cached"], sum(adr["written"].values()))
        # billed at the bot's row, like the bot's side (not at the simulated case's gpt-4o row)
        assert row["adr"]["usd"] == pytest.approx(hand_usd(adr["prompt"], adr["cached"]), abs=1e-8)
    # control: at least one turn reads from the simulated cache, so the cached price is exercised
    assert any(row["adr"]["cached"] for row in bill)


def test_a_turn_without_usage_says_so(db: Path, prices: Path) -> None:
    edit_payloads(db, "update agent_messages set payload = json_remove(payload, '$.usage') where id = 9")
    session = session_of(economy(db, prices, GROUP_A), GROUP_A)
    rows = {row["row_id"]: row for row in session["bill"]["requests"]}
    assert rows[9]["paid"] is None and rows[9]["paid_missing"] == "no usage stored"
    assert rows[9]["adr"] is not None  # zhin's side of the same turn is still there
    assert rows[12]["paid"] is not None and rows[12]["paid_missing"] is None  # control: its neighbour keeps its usage
    totals = session["bill"]["totals"]
    assert (totals["requests_compared"], totals["requests_without_usage"]) == (16, 1)
    compared = [row for row in rows.values() if row["paid"] is not None]
    assert totals["paid"]["prompt"] == sum(r["paid"]["prompt"] for r in compared)
    assert totals["adr"]["prompt"] == sum(r["adr"]["prompt"] for r in compared)  # both sides over the same turns
    text = run_zhin("report", "economy", GROUP_A, "--db", db, "-p", "openai", "--prices", "prices.yaml", cwd=db.parent)
    assert text.returncode == 0, text.stderr
    line = next(line for line in text.stdout.splitlines() if line.startswith("│ 4 "))
    assert "no usage stored" in line and "0 prompt" not in line
    assert "1 request(s) without both figures are left out of both totals" in text.stdout


def test_usage_that_reports_no_cached_tokens_is_no_figure(db: Path, prices: Path) -> None:
    edit_payloads(db, "update agent_messages set payload = json_remove(payload, '$.usage.cacheRead') where id = 9")
    rows = bill_rows(economy(db, prices, GROUP_A))
    assert rows[9]["paid"] is None and rows[9]["paid_missing"] == "its stored usage does not report cached tokens"


# --- negative controls -----------------------------------------------------------------------------------------


def test_a_database_without_usage_has_no_real_column_and_says_why(db: Path, prices: Path) -> None:
    edit_payloads(db, "update agent_messages set payload = json_remove(payload, '$.usage') where role = 'assistant'")
    bill = session_of(economy(db, prices, GROUP_B), GROUP_B)["bill"]
    assert bill["reason"] == "no usage stored on any of its 3 requests"
    assert bill["requests"] == [] and bill["totals"] is None
    text = run_zhin("report", "economy", GROUP_B, "--db", db, "-p", "openai", cwd=db.parent)
    assert text.returncode == 0, text.stderr
    assert f"{PAID_LABEL}: nothing to show — no usage stored on any of its 3 requests" in text.stdout
    assert ADR_LABEL not in text.stdout and "the bot's bill beside" not in text.stdout


def test_with_usage_the_text_names_both_figures(db: Path, prices: Path) -> None:
    """The control of the test above: the same command on the database with usage shows both columns."""
    text = run_zhin("report", "economy", GROUP_B, "--db", db, "-p", "openai", "--prices", prices, cwd=db.parent)
    assert text.returncode == 0, text.stderr
    flat = " ".join(text.stdout.split())
    assert PAID_LABEL in flat and ADR_LABEL in flat and "nothing to show" not in flat
    assert f"caveat: {BILL_CAVEAT}" in flat
    assert "openai/gpt-4.1-mini ($3 input, $0.5 cached per million tokens)" in flat


def test_a_wrong_price_row_changes_the_real_cost(db: Path, prices: Path, tmp_path: Path) -> None:
    right = bill_rows(economy(db, prices, GROUP_B))
    dear = tmp_path / "dear.yaml"
    dear.write_text(PRICES.replace(f"input: {INPUT}", "input: 6.0"), encoding="utf-8")
    wrong = bill_rows(economy(db, dear, GROUP_B))
    for row_id, row in right.items():
        paid = row["paid"]
        assert wrong[row_id]["paid"]["usd"] != paid["usd"]
        assert wrong[row_id]["paid"]["usd"] == pytest.approx(hand_usd(paid["prompt"], paid["cached"], input_price=6.0), abs=1e-8)
        assert wrong[row_id]["paid"]["prompt"] == paid["prompt"]  # tokens are the usage's, whatever the price


def test_a_model_without_a_price_row_gets_the_default_row_and_its_note(db: Path) -> None:
    control = economy(db, None, GROUP_B)  # the stored model has its own row: no note
    assert not any("gpt-4.1-mini" in note for note in control.notes)
    assert {row["price"]["model"] for row in bill_rows(control).values()} == {"gpt-4.1-mini"}
    edit_payloads(db, "update agent_messages set payload = json_set(payload, '$.model', 'gpt-unpriced') where role = 'assistant'")
    report = economy(db, None, GROUP_B)
    assert {row["price"]["model"] for row in bill_rows(report).values()} == {"gpt-4o"}  # openai's default row
    assert sum("gpt-unpriced" in note for note in report.notes) == 1  # once, however many requests


def test_the_stored_model_name_is_escaped_in_the_text(db: Path) -> None:
    hostile = "gpt-4.1-mini\x1b[2J\x07"
    edit_payloads(db, "update agent_messages set payload = json_set(payload, '$.model', ?) where id = 21", hostile)
    text = run_zhin("report", "economy", GROUP_B, "--db", db, "-p", "openai", cwd=db.parent)
    assert text.returncode == 0, text.stderr
    assert "\x1b" not in text.stdout + text.stderr and "\x07" not in text.stdout + text.stderr
    assert "gpt-4.1-mini\\x1b[2J" in text.stderr  # the default-row note names it, escaped (control: it is shown)


# --- the command --------------------------------------------------------------------------------------------


def test_no_session_and_no_database_is_one_line_naming_db(tmp_path: Path) -> None:
    result = run_zhin("report", "economy", cwd=tmp_path)
    stats = run_zhin("stats", "cache", cwd=tmp_path)  # the rule every command shares (store.discovery.find_database)
    assert result.returncode == stats.returncode == 3
    assert result.stderr.startswith("zhin: error:") and "pass --db" in result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stdout == ""


def test_no_session_reads_every_session_of_the_database_found_upward(db: Path) -> None:
    (db.parent / ".zhin").mkdir()
    db.rename(db.parent / ".zhin" / "data.sqlite")
    inner = db.parent / "bot" / "plugins"
    inner.mkdir(parents=True)
    result = run_zhin("report", "economy", "-p", "openai", "--json", cwd=inner)
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)["sessions"]) == 3


def test_json_is_version_1_with_a_bill_per_session(db: Path) -> None:
    result = run_zhin("report", "economy", "--db", db, "-p", "openai", "--json", cwd=db.parent)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["version"] == 1
    assert [s["bill"]["paid_label"] for s in document["sessions"]] == [PAID_LABEL] * 3
    assert sorted(s["session_id"].split("#")[0] for s in document["sessions"]) == sorted((GROUP_A, GROUP_B, PRIVATE))


# --- captured bodies: the bot's side alone -------------------------------------------------------------------

SERVE_LOG = Path(__file__).parent / "data" / "upstream-db" / "zhin-serve.log"  # the real run's log, byte for byte
# which capture belongs to which session (the reference's README): in each, the captures in the order of its replies
CAPTURES = {GROUP_A: [*range(1, 8), *range(10, 16), *range(24, 28)], GROUP_B: [8, 9, 23], PRIVATE: list(range(16, 23))}


def capture_folder(folder: Path, bodies: int, *, log: bool = True) -> Path:
    """``bodies`` numbered request bodies (placeholders: the real ones hold upstream's system prompt, which stays out
    of the repo) beside the real run's ``zhin-serve.log``, whose lines are their usage."""
    folder.mkdir()
    for number in range(1, bodies + 1):
        body = {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": f"request {number}"}]}
        (folder / f"{number:05d}-chat-completions.json").write_text(json.dumps(body), encoding="utf-8")
    if log:
        shutil.copyfile(SERVE_LOG, folder / "zhin-serve.log")
    return folder


def test_a_capture_folder_bills_the_usage_recorded_with_each_body(db: Path, prices: Path) -> None:
    folder = capture_folder(db.parent / "captures", 27)
    report = run_economy(["captures"], cwd=db.parent, prices_file=prices)
    (capture,) = report.as_dict()["captures"]
    rows = {row["capture"]: row for row in capture["bill"]["requests"]}
    assert sorted(rows) == list(range(1, 28)) and capture["bill"]["no_adr"] and report.sessions == []
    usage = stored_usage(db)
    for key, numbers in CAPTURES.items():  # the recorded usage is what upstream stored, request for request
        with sqlite3.connect(db) as connection:
            replies = [row_id for (row_id,) in connection.execute(
                "select id from agent_messages where role = 'assistant' and session_id like ? order by id", (key + "#%",))]
        assert len(replies) == len(numbers)
        for number, row_id in zip(numbers, replies, strict=True):
            paid, stored = rows[number]["paid"], usage[row_id]
            assert (paid["prompt"], paid["cached"]) == (stored["input"], stored["cacheRead"])
            assert paid["usd"] == pytest.approx(hand_usd(stored["input"], stored["cacheRead"]), abs=1e-8)
    assert rows[4]["paid"]["prompt"] == 2583 and rows[4]["where"] == str(folder / "00004-chat-completions.json")
    totals = capture["bill"]["totals"]
    assert totals["requests_billed"] == 27 and totals["adr"] is None and "requests_compared" not in totals
    assert totals["paid"]["prompt"] == sum(u["input"] for u in usage.values())  # the database's total, 99,834
    text = run_zhin("report", "economy", "captures", "--prices", prices, cwd=db.parent)
    assert text.returncode == 0, text.stderr
    flat = " ".join(text.stdout.split())
    assert "the bot paid (recorded usage)" in flat and "ADR 0041 would send (zhin's assembly): none — captured bodies" in flat
    assert "99,834 prompt, 82,048 cached" in flat


def test_a_capture_folder_without_usage_says_why(tmp_path: Path) -> None:
    capture_folder(tmp_path / "captures", 3, log=False)
    (capture,) = run_economy(["captures"], cwd=tmp_path).as_dict()["captures"]
    assert capture["requests"] == 3 and capture["bill"]["requests"] == []
    assert capture["bill"]["reason"].startswith("no usage recorded for any of its 3 requests")
    # control: the same folder with a log of as many lines has figures
    log = "\n".join(SERVE_LOG.read_text(encoding="utf-8").splitlines()[:4]) + "\n"
    (tmp_path / "captures" / "zhin-serve.log").write_text(log, encoding="utf-8")
    (capture,) = run_economy(["captures"], cwd=tmp_path).as_dict()["captures"]
    assert capture["bill"]["reason"] is None and [r["paid"]["prompt"] for r in capture["bill"]["requests"]] == [2252, 2376, 2546]


def test_exchange_files_bill_each_providers_usage(tmp_path: Path) -> None:
    """``serve --upstream``'s exchange files: the provider's own usage object, read as its wire's kind; an Anthropic
    cache write at the 5-minute write price."""
    folder = tmp_path / "captures"
    folder.mkdir()
    bodies = {1: ({"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]},
                  {"prompt_tokens": 3000, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 2048}}),
              2: ({"model": "claude-sonnet-5", "system": "s", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]},
                  {"input_tokens": 100, "cache_creation_input_tokens": 1200, "cache_read_input_tokens": 400, "output_tokens": 3})}
    for number, (body, usage) in bodies.items():
        (folder / f"{number:05d}-route.json").write_text(json.dumps(body), encoding="utf-8")
        exchange = {"version": 1, "status": 200, "stream": False, "usage": usage, "response": {}}
        (folder / f"{number:05d}-route.exchange.json").write_text(json.dumps(exchange), encoding="utf-8")
    table = tmp_path / "prices.yaml"
    table.write_text(PRICES + """  anthropic:
    models:
      claude-sonnet-5:
        input: 2.0
        cached_input: 0.2
        cache_write: {5m: 2.5, 1h: 4.0}
        source: tests/test_economy_real.py
        read_on: 2026-12-03
""", encoding="utf-8")
    (capture,) = run_economy(["captures"], cwd=tmp_path, prices_file=table).as_dict()["captures"]
    openai, anthropic = capture["bill"]["requests"]
    assert (openai["provider"], openai["paid"]["prompt"], openai["paid"]["cached"]) == ("openai", 3000, 2048)
    assert openai["paid"]["usd"] == pytest.approx(hand_usd(3000, 2048), abs=1e-8)
    assert (anthropic["provider"], anthropic["paid"]["prompt"], anthropic["paid"]["cached"], anthropic["paid"]["written"]) == (
        "anthropic", 1700, 400, 1200)
    assert anthropic["paid"]["usd"] == pytest.approx((100 * 2.0 + 400 * 0.2 + 1200 * 2.5) / 1e6, abs=1e-8)


def test_a_broken_capture_file_is_one_line_naming_it(tmp_path: Path) -> None:
    folder = capture_folder(tmp_path / "captures", 2)
    (folder / "00002-chat-completions.json").write_text('{"model": "x", "messages": [', encoding="utf-8")
    result = run_zhin("report", "economy", "captures", cwd=tmp_path)
    assert result.returncode == 3 and result.stdout == ""
    assert result.stderr.startswith("zhin: error:") and "00002-chat-completions.json" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_a_session_and_a_capture_folder_in_one_run(db: Path, prices: Path) -> None:
    capture_folder(db.parent / "captures", 27)
    report = run_economy([GROUP_B, "captures"], cwd=db.parent, db=str(db), providers=["openai"], prices_file=prices)
    document = report.as_dict()
    assert [s["session_id"].split("#")[0] for s in document["sessions"]] == [GROUP_B]
    assert len(document["captures"]) == 1
    paid_b = [row["paid"]["prompt"] for row in document["sessions"][0]["bill"]["requests"]]
    captured = {row["capture"]: row["paid"]["prompt"] for row in document["captures"][0]["bill"]["requests"]}
    assert paid_b == [captured[n] for n in CAPTURES[GROUP_B]]  # one request, one figure, whichever source


def test_a_name_too_long_for_a_file_is_not_read_as_captures(db: Path) -> None:
    long_id = "x" * 300  # no file system holds this name: it is a session id, not a capture folder
    assert is_captures(db.parent / long_id) is False  # old: OSError (ENAMETOOLONG) from Path.is_dir
    assert is_captures(capture_folder(db.parent / "captures", 1))  # control: a real capture folder is one
    result = run_zhin("report", "economy", long_id, "--db", db, cwd=db.parent)
    assert result.returncode == 3 and "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1


def test_a_bot_provider_not_simulated_has_no_adr_side_and_says_which(db: Path, prices: Path) -> None:
    report = run_economy([GROUP_B], cwd=db.parent, db=str(db), providers=["anthropic"], prices_file=prices)
    bill = report.as_dict()["sessions"][0]["bill"]
    for row in bill["requests"]:
        assert row["paid"] is not None and row["adr"] is None and row["adr_case"] is None
        assert row["adr_missing"] == "provider openai is not simulated here (simulated: anthropic)"
    assert bill["totals"]["requests_compared"] == 0  # nothing to compare: neither total counts a one-sided row
    # control: with the bot's provider simulated, every row has both sides
    both = economy(db, prices, GROUP_B).as_dict()["sessions"][0]["bill"]
    assert all(row["adr"] is not None for row in both["requests"]) and both["totals"]["requests_compared"] == 3
