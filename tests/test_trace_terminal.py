"""``zhin trace`` as a person reads it (issue 17 §3–§4): ``--all``'s compact row per turn with its cached/new bar and
legend, ``--detail`` for the tables, ``--jsonl`` streamed one request per line, identifiers never cut at
COLUMNS=60/100, human values only in text, and the header line naming what was read."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, clean_env

BUSY = FIXTURES / "group-busy.jsonl"
PRIVATE = FIXTURES / "private-chat.jsonl"
ST_PRESET = FIXTURES / "presets" / "st-default.json"
# turn, prompt, cached, [bot sent, bot cached: the stored usage,] [cost,] bar, state, verdict, segments
ROW = re.compile(r"^\s*(\d+)\s+([\d,]+)\s+([\d,]+)(?:\s+(?:[\d,]+|-)\s+(?:[\d,]+|-))?(?:\s+(?:\$\S+|—))?\s+([█░]+)\s+(\S+)\s+([✓✗])(?:\s+(.*))?$")


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, proc.stderr
    return proc


def columns(width: int) -> dict[str, str]:
    return {**clean_env(), "COLUMNS": str(width)}


def number(text: str) -> int:
    """A token count as the text views write it (thousands separators, issue 31 §3)."""
    return int(text.replace(",", ""))


def rows_of(text: str) -> list[tuple[int, int, int, str, str, str]]:
    """(turn, prompt, cached, bar, state, first segments) of each compact row."""
    return [(int(m[1]), number(m[2]), number(m[3]), m[4], m[5], m[7] or "") for m in map(ROW.match, text.splitlines()) if m]


def requests_of(zhin: Any, *args: object) -> list[dict[str, Any]]:
    return json.loads(ok(zhin("trace", *args, "--json")).stdout)["requests"]


# --- the compact view ------------------------------------------------------------------------------


def test_all_is_one_row_per_turn_with_a_legend_and_detail_gives_the_tables(zhin: Any) -> None:
    requests = requests_of(zhin, BUSY, "--all")
    compact = ok(zhin("trace", BUSY, "--all", env=columns(200))).stdout
    rows = rows_of(compact)
    assert [r[0] for r in rows] == [r["turn"] for r in requests]  # one row per request, in order
    assert [r[1] for r in rows] == [r["prompt_tokens"] for r in requests]
    assert [r[4] for r in rows] == [r["state_rendering"] for r in requests]
    for row, request in zip(rows, requests, strict=True):  # the three largest segments, largest first
        top = sorted(request["segments"], key=lambda s: -s["tokens"])[:3]
        assert row[5] == ", ".join(f"{s['id']} {s['tokens']:,}" for s in top)
    assert "█ cached" in compact and "░ new" in compact and "full width" in compact  # the legend
    assert not re.search(r"^request \d+ ·", compact, re.M) and "┃ segment" not in compact  # no tables
    # negative control: --detail prints today's table for every turn and no compact row
    detail = ok(zhin("trace", BUSY, "--all", "--detail", env=columns(200))).stdout
    assert len(re.findall(r"^request \d+ · openai · ", detail, re.M)) == len(requests)
    assert rows_of(detail) == [] and "█ cached" not in detail


def test_a_single_turn_keeps_the_full_table(zhin: Any) -> None:
    for args in ((), ("--turn", "3"), ("--turn", "-1")):
        shown = ok(zhin("trace", BUSY, *args, env=columns(200))).stdout
        assert len(re.findall(r"^request \d+ · ", shown, re.M)) == 1 and "segment" in shown
        assert rows_of(shown) == []


def test_cached_tokens_are_prefix_diffs_and_the_first_turn_is_all_new(zhin: Any) -> None:
    rows = rows_of(ok(zhin("trace", BUSY, "--all", env=columns(200))).stdout)
    pairs = json.loads(zhin("prefix-diff", BUSY, "--json").stdout)["sessions"][0]["pairs"]
    assert rows[0][2] == 0
    assert [(r[0], r[2]) for r in rows[1:]] == [(p["to_turn"], p["cache"]["cached_tokens"]) for p in pairs]
    assert [r[1] for r in rows[1:]] == [p["cache"]["prompt_tokens"] for p in pairs]
    # not a constant: the fixture has hits and, after its window shifts, misses
    assert any(r[2] > 0 for r in rows) and any(r[2] == 0 for r in rows[1:])


def test_bar_lengths_are_proportional_to_the_prompt_and_its_cached_part(zhin: Any) -> None:
    rows = rows_of(ok(zhin("trace", BUSY, "--all", env=columns(200))).stdout)
    scale = max(r[1] for r in rows)
    width = max(len(r[3]) for r in rows)
    for turn, prompt, cached, bar, *_ in rows:
        assert len(bar) == max(1, round(prompt * width / scale)), turn
        assert bar.count("█") == round(cached * width / scale) and bar == "█" * bar.count("█") + "░" * bar.count("░")
    assert len({len(r[3]) for r in rows}) > 3  # negative control: the bars differ as the prompts do


def test_bar_cells() -> None:
    from zhin_cli._cli.trace import bar_cells
    from zhin_cli.tools.trace.trace import TurnRow

    def row(prompt: int, cached: int) -> TurnRow:
        return TurnRow(1, prompt, cached, (), "system", True, "accepted")

    assert bar_cells(row(1000, 0), 1000, 20) == (0, 20)
    assert bar_cells(row(1000, 1000), 1000, 20) == (20, 0)
    assert bar_cells(row(500, 250), 1000, 20) == (5, 5)
    assert bar_cells(row(1, 0), 1000, 20) == (0, 1)  # a prompt always shows
    assert bar_cells(row(0, 0), 1000, 20) == (0, 0)


def test_warnings_of_the_turns_are_shown_once_with_their_turns(zhin: Any) -> None:
    args = (BUSY, "--all", "--provider", "vllm", "--model", "mistralai/Mixtral-8x7B-Instruct-v0.1")
    requests = requests_of(zhin, *args)
    warned = [r["turn"] for r in requests if r["warnings"]]
    assert warned, "the fixture's tool calls under a template without a tool role warn"
    compact = ok(zhin("trace", *args, env=columns(200))).stdout
    lines = [line for line in compact.splitlines() if line.startswith("warning:")]
    distinct = {w for r in requests for w in r["warnings"]}
    flowed = " ".join(compact.split())  # a long warning wraps like prose
    assert len(lines) == len(distinct) and all(" ".join(w.split()) in flowed for w in distinct)
    # negative control: a session without warnings prints none
    assert "warning:" not in ok(zhin("trace", PRIVATE, "--all", env=columns(200))).stdout


def test_a_rejected_request_shows_as_rejected_with_its_reason(tmp_path: Path) -> None:
    from zhin_cli._cli.trace import print_rows
    from zhin_cli.pipeline.validate import Verdict
    from zhin_cli.tools.trace.trace import trace, turn_row

    result = trace(str(PRIVATE), all_turns=True, cwd=tmp_path)
    accepted = turn_row(result.requests[0], 0)
    result.requests[1].verdict = Verdict(ok=False, status=400, message="messages: too many")
    rejected = turn_row(result.requests[1], 0)
    assert accepted.accepted and accepted.verdict == "accepted"  # negative control
    assert not rejected.accepted and rejected.verdict == "rejected 400: messages: too many"
    console = _console(100)
    print_rows(console, result, [accepted, rejected])
    text = console.file.getvalue()
    assert [row[0] for row in rows_of(text)] == [1, 2]
    marks = {int(m[1]): m[6] for m in map(ROW.match, text.splitlines()) if m}
    assert marks == {1: "✓", 2: "✗"} and "✗ rejected 400: messages: too many" in text  # the mark, and the reason


def test_validate_exits_1_only_for_a_rejected_request(zhin: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from zhin_cli.pipeline.validate import VALIDATORS, Verdict

    for args in (("--all",), ("--all", "--jsonl"), ("--all", "--json"), ("--all", "--detail")):
        assert zhin("trace", PRIVATE, *args, "--validate").returncode == 0, args  # negative control: all accepted
    accept = VALIDATORS["openai-chat"]

    def reject_long(body: dict[str, Any], model: str) -> Verdict:  # turn 6 has the most messages
        return Verdict(ok=False, status=400, message="too long") if len(body["messages"]) > 10 else accept(body, model)

    monkeypatch.setitem(VALIDATORS, "openai-chat", reject_long)
    for args in (("--all",), ("--all", "--jsonl"), ("--all", "--json"), ("--all", "--detail")):
        assert zhin("trace", PRIVATE, *args, "--validate").returncode == 1, args
        assert zhin("trace", PRIVATE, *args).returncode == 0, args  # without --validate the verdict is only shown
    shown = zhin("trace", PRIVATE, "--all").stdout
    assert "✗ rejected 400: too long" in shown and rows_of(shown)[-1][0] == 6


# --- --jsonl ---------------------------------------------------------------------------------------


def test_jsonl_is_one_line_per_request_each_the_json_element(zhin: Any) -> None:
    for args in (("--all",), ("--turn", "3"), ()):
        lines = ok(zhin("trace", BUSY, *args, "--jsonl")).stdout.splitlines()
        assert [json.loads(line) for line in lines] == requests_of(zhin, BUSY, *args), args
    assert len(ok(zhin("trace", BUSY, "--all", "--jsonl")).stdout.splitlines()) == 16


def test_jsonl_with_json_is_a_usage_error(zhin: Any) -> None:
    both = zhin("trace", BUSY, "--all", "--json", "--jsonl")
    assert both.returncode == 2 and both.stdout == ""
    assert both.stderr.strip() == "zhin: error: use either --json or --jsonl"
    assert ok(zhin("trace", BUSY, "--all", "--jsonl")).stderr == ""  # negative control: alone it runs, quietly


def test_jsonl_streams_each_request_as_the_replay_makes_it(zhin: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the replay makes request k+1, stdout already holds k lines (written and flushed); --json, the
    negative control, writes its document after the last one."""
    from zhin_cli.pipeline.facade import Pipeline

    replay = Pipeline.replay
    written: list[int] = []

    def watched(self: Pipeline, session: Any) -> Any:
        for request in replay(self, session):
            written.append(sys.stdout.buffer.getvalue().count(b"\n"))  # type: ignore[attr-defined]
            yield request

    monkeypatch.setattr(Pipeline, "replay", watched)
    ok(zhin("trace", BUSY, "--all", "--jsonl"))
    assert written == list(range(16))
    written.clear()
    ok(zhin("trace", BUSY, "--all", "--json"))
    assert written == [0] * 16


def test_jsonl_notes_go_to_stderr(zhin: Any, tmp_path: Path) -> None:
    from test_greeting import greeted, save

    path = save(greeted(), tmp_path)
    shown = ok(zhin("trace", path, "--all", "--jsonl"))
    assert "note: turn 1 is the greeting" in shown.stderr
    assert [json.loads(line)["turn"] for line in shown.stdout.splitlines()] == [2, 3]


def test_jsonl_into_head_exits_0_quietly(tmp_path: Path) -> None:
    result = subprocess.run(["bash", "-c", f"set -o pipefail; {sys.executable} -m zhin_cli trace {BUSY} --all --jsonl | head -1"],
                            cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stderr) == (0, "")
    assert json.loads(result.stdout)["turn"] == 1 and result.stdout.count("\n") == 1


# --- identifiers and widths ------------------------------------------------------------------------


def _console(width: int) -> Any:
    from rich.console import Console

    return Console(file=io.StringIO(), width=width, no_color=True, highlight=False)


def _intact(identifier: str, text: str) -> bool:
    """``identifier`` appears whole, on one line, not run into a neighbouring word."""
    return re.search(rf"(?<![\w.:#-]){re.escape(identifier)}(?![\w.:#-])", text) is not None


@pytest.mark.parametrize("width", [60, 100])
def test_identifiers_are_never_cut(zhin: Any, width: int) -> None:
    args = (BUSY, "--preset", ST_PRESET)
    requests = requests_of(zhin, *args, "--all")
    session_id = requests[0]["session_id"]
    compact = ok(zhin("trace", *args, "--all", env=columns(width))).stdout
    detail = ok(zhin("trace", *args, "--all", "--detail", env=columns(width))).stdout
    for text in (compact, detail):
        assert _intact(session_id, text)
        body = [line for line in text.splitlines() if session_id not in line]
        assert max(map(len, body)) <= width  # it did lay out for the width (COLUMNS is honoured when piped)
    for request in requests:
        for segment in request["segments"]:
            assert _intact(segment["id"], detail), (width, segment["id"])
    rows = rows_of(compact)
    assert len(rows) == len(requests)  # one line per row (issue 31 §3): the numbers, the bar and the segments that fit
    for row, request in zip(rows, requests, strict=True):  # each segment shown is whole; "…" stands for the rest
        top = [f"{s['id']} {s['tokens']:,}" for s in sorted(request["segments"], key=lambda s: -s["tokens"])[:3]]
        cell = row[5].removesuffix("…").removesuffix(", ")
        shown = cell.split(", ") if cell else []
        assert shown == top[:len(shown)], (width, row)
        assert all(_intact(entry.rsplit(" ", 1)[0], compact) for entry in shown)


def test_negative_control_a_plain_table_does_cut_ids_at_60_columns() -> None:
    """The check above can fail: rich's default table at 60 columns crops the long ids."""
    from rich.table import Table

    console = _console(60)
    table = Table("segment", "kind", "weight", "msgs", "chars", "tokens", "trimmed")
    table.add_row("preset:newMainChat", "environment", "100", "46", "2540", "1340", "")
    console.print(table)
    assert not _intact("preset:newMainChat", console.file.getvalue())


@pytest.mark.parametrize("width", [40, 60, 100])
def test_the_printers_keep_ids_whole_at_any_width(width: int, tmp_path: Path) -> None:
    """The printers with a Console of that width (independent of how the CLI sizes its console)."""
    from zhin_cli._cli.trace import print_request, print_rows
    from zhin_cli.tools.trace.trace import trace, turn_rows

    result = trace(str(BUSY), all_turns=True, preset=ST_PRESET, cwd=tmp_path)
    console = _console(width)
    print_rows(console, result, list(turn_rows(result.requests)))
    for request in result.requests[-2:]:
        print_request(console, request, show_request=False)
    text = console.file.getvalue()
    for request in result.requests[-2:]:
        assert all(_intact(segment.id, text) for segment in request.segments), width


def test_wrap_entries_breaks_only_between_entries() -> None:
    from zhin_cli._cli.trace import wrap_entries

    entries = ["history.user 1340", "history.assistant 467", "history.summary 237"]
    assert wrap_entries(entries, 100) == ["history.user 1340, history.assistant 467, history.summary 237"]
    assert wrap_entries(entries, 42) == ["history.user 1340, history.assistant 467,", "history.summary 237"]
    assert wrap_entries(entries, 5) == ["history.user 1340,", "history.assistant 467,", "history.summary 237"]
    # terminal cells, not characters: a CJK id is twice as wide as its length
    assert wrap_entries(["插件段 1", "b 2"], 12) == ["插件段 1,", "b 2"]
    assert wrap_entries(["插件段 1", "b 2"], 13) == ["插件段 1, b 2"]
    assert wrap_entries(["same 1", "same 1"], 100) == ["same 1, same 1"]  # equal entries: one comma between


# --- human values ----------------------------------------------------------------------------------

PYTHON_VALUES = re.compile(r"\b(None|True|False)\b|\['|\[\d+, |(?<![\d#])1\d{12}(?!\d)")


def python_values(text: str, *identifiers: str) -> list[str]:
    """Python reprs and raw ms timestamps in ``text`` (outside the given identifiers: a session id may hold one)."""
    for identifier in identifiers:
        text = text.replace(identifier, "")
    return [m.group(0) for m in PYTHON_VALUES.finditer(text)]


@pytest.mark.parametrize("fixture", sorted(FIXTURES.glob("*.jsonl")), ids=lambda p: p.stem)
def test_text_output_has_no_python_values(zhin: Any, fixture: Path) -> None:
    session_id = requests_of(zhin, fixture)[0]["session_id"]
    for args in (("--all",), ("--all", "--detail"), ("--turn", "1"), ()):
        shown = ok(zhin("trace", fixture, *args, env=columns(100)))
        assert python_values(shown.stdout + shown.stderr, session_id) == [], args


def test_negative_control_python_values_are_found() -> None:
    assert python_values("window cut_to None") == ["None"]
    assert python_values("trimmed: False") == ["False"]
    assert python_values("members ['10003']") == ["['"]
    assert python_values("at 1761800000000 ms") == ["1761800000000"]
    assert python_values("icqq:1:private:2#1761800000000-1 · 6 requests", "icqq:1:private:2#1761800000000-1") == []


def _ms_epochs_without_iso(value: Any, path: str = "") -> list[str]:
    """Paths of ms-epoch integers (2001–2286) with no ``<key>_iso`` beside them (the wire body is left out: it is
    the exact request, not zhin's to annotate)."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "request" and path.startswith("requests"):
                continue
            where = f"{path}.{key}" if path else key
            if isinstance(item, int) and not isinstance(item, bool) and 10**12 <= item < 10**13 and f"{key}_iso" not in value:
                found.append(where)
            found += _ms_epochs_without_iso(item, where)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _ms_epochs_without_iso(item, f"{path}[{index}]")
    return found


def test_json_has_no_bare_ms_epoch(zhin: Any) -> None:
    for fixture in sorted(FIXTURES.glob("*.jsonl")):
        document = json.loads(ok(zhin("trace", fixture, "--all", "--json")).stdout)
        assert _ms_epochs_without_iso(document) == [], fixture
    # negative control
    assert _ms_epochs_without_iso({"time": 1761800000000}) == ["time"]
    assert _ms_epochs_without_iso({"time": 1761800000000, "time_iso": "2025-10-30T13:33:20+08:00"}) == []


# --- the header line -------------------------------------------------------------------------------


def test_text_mode_names_the_config_and_database_it_read(zhin: Any, tmp_path: Path) -> None:
    from zhin_cli._cli import sources_line

    assert ok(zhin("trace", BUSY, "--all")).stderr.splitlines() == ["config: none (built-in defaults)"]
    assert ok(zhin("trace", BUSY)).stderr.splitlines() == ["config: none (built-in defaults)"]
    db = tmp_path / "data.sqlite"
    ok(zhin("import", BUSY, "--db", db))
    session_id = requests_of(zhin, BUSY)[0]["session_id"]
    (tmp_path / "zhin.yaml").write_text("timezone: Asia/Shanghai\n", encoding="utf-8")
    shown = ok(zhin("trace", session_id, "--db", db, cwd=tmp_path))
    with_cwd = Path.cwd()
    try:
        import os

        os.chdir(tmp_path)
        expected = sources_line(tmp_path / "zhin.yaml", str(db))
    finally:
        os.chdir(with_cwd)
    assert shown.stderr.splitlines() == [expected] and "db: data.sqlite" in expected and "config: zhin.yaml" in expected
    # negative controls: machine output prints no header
    assert ok(zhin("trace", BUSY, "--json")).stderr == ""
    assert ok(zhin("trace", BUSY, "--jsonl")).stderr == ""


def test_an_error_during_the_replay_is_one_line_without_the_header(zhin: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from zhin_cli.core.errors import InputError
    from zhin_cli.pipeline.facade import Pipeline

    replay = Pipeline.replay

    def failing(self: Pipeline, session: Any) -> Any:
        for request in replay(self, session):
            if request.turn == 3:
                raise InputError("row 7: bad payload", where="data.sqlite")
            yield request

    monkeypatch.setattr(Pipeline, "replay", failing)
    for args in (("--all",), ("--all", "--detail"), ("--all", "--jsonl")):
        failed = zhin("trace", BUSY, *args)
        assert failed.returncode == 3 and failed.stderr.splitlines() == ["zhin: error: data.sqlite: row 7: bad payload"], args
    # negative control: the same run without the failure prints the header
    monkeypatch.setattr(Pipeline, "replay", replay)
    assert ok(zhin("trace", BUSY, "--all")).stderr.startswith("config: ")


def test_a_terminal_gets_the_same_rows_in_colour(tmp_path: Path) -> None:
    """Piped rows are written as plain text, a terminal's drawn with styles: the same text either way."""
    from rich.console import Console

    from zhin_cli._cli.trace import print_rows
    from zhin_cli.tools.trace.trace import trace, turn_rows

    result = trace(str(BUSY), all_turns=True, cwd=tmp_path)
    rows = list(turn_rows(result.requests))
    plain, coloured = _console(100), Console(file=io.StringIO(), width=100, force_terminal=True, highlight=False)
    print_rows(plain, result, rows)
    print_rows(coloured, result, rows)
    drawn = coloured.file.getvalue()
    assert "\x1b[32m█" in drawn  # negative control: the terminal's bar is green
    assert re.sub(r"\x1b\[[0-9;]*m", "", drawn) == plain.file.getvalue()
