"""``zhin request-diff`` as a person and a CI run read it (issue 17 §3, §5): excerpts on one line with newlines and
control characters escaped as prefix-diff shows them, the first difference marked, and under GitHub Actions one
annotation per difference at its field's line plus a step summary listing them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, clean_env

from zhin_cli.core.terminaltext import MARK
from zhin_cli.core.textdiff import readable
from zhin_cli.tools.diff.request import json_line

BUSY = FIXTURES / "group-busy.jsonl"


def body(content: str, *, model: str = "gpt-4o", extra: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "system", "content": "rules"}, {"role": "user", "content": content},
                                         *(extra or [])]}


def write(path: Path, data: dict[str, Any], indent: int | None = 2) -> Path:
    path.write_text(json.dumps(data, ensure_ascii=False, indent=indent) + "\n", encoding="utf-8")
    return path


def github(tmp_path: Path) -> dict[str, str]:
    return {**clean_env(), "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")}


def annotations(stderr: str) -> list[dict[str, str]]:
    """``::error file=…,line=…,title=…::message`` lines as dicts (message unescaped)."""
    out = []
    for match in re.finditer(r"^::(\w+) ([^:]*)::(.*)$", stderr, re.M):
        fields = dict(item.split("=", 1) for item in match[2].split(","))
        fields["level"] = match[1]
        fields["message"] = match[3].replace("%0A", "\n").replace("%0D", "\r").replace("%25", "%")
        out.append(fields)
    return out


# --- readable excerpts -----------------------------------------------------------------------------


def test_excerpts_are_one_line_escaped_and_marked(zhin: Any, tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", body("第一行\nline two\tends\x07 here, the same tail"))
    b = write(tmp_path / "b.json", body("第一行\nline tw0\tends\x07 here, the same tail"))
    shown = zhin("request-diff", a, b)
    assert shown.returncode == 1
    lines = shown.stdout.splitlines()
    common = "第一行\nline tw"
    assert lines[0] == f"messages[1].content  changed at byte {len(common.encode())}"
    assert lines[1] == f"  a: …第一行\\nline tw{MARK}o\\tends\\u0007 here, the same tail…"
    assert lines[2] == f"  b: …第一行\\nline tw{MARK}0\\tends\\u0007 here, the same tail…"
    # negative control: plain text is shown as it is, only marked
    c = write(tmp_path / "c.json", body("plain words"))
    d = write(tmp_path / "d.json", body("plain wordy"))
    assert zhin("request-diff", c, d).stdout.splitlines()[1:3] == [f"  a: …plain word{MARK}s…", f"  b: …plain word{MARK}y…"]


def test_json_keeps_the_raw_excerpts_and_says_where_they_differ(zhin: Any, tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", body("one\ntwo"))
    b = write(tmp_path / "b.json", body("one\ntwO"))
    [difference] = json.loads(zhin("request-diff", a, b, "--json").stdout)["differences"]
    assert (difference["excerpt_before"], difference["excerpt_after"], difference["excerpt_index"]) == ("one\ntwo", "one\ntwO", 6)
    assert difference["byte_offset"] == 6


def test_values_that_are_not_strings_are_short_json_on_one_line(zhin: Any, tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", body("x"))
    b = write(tmp_path / "b.json", body("x", extra=[{"role": "assistant", "content": "line\nbreak\u2028sep"}]))
    shown = zhin("request-diff", a, b).stdout.splitlines()
    assert shown[:2] == ["messages[2]  added", '  b: {"role": "assistant", "content": "line\\nbreak\\u2028sep"}']


def test_readable() -> None:
    assert readable("a\nb\r\nc\td") == "a\\nb\\r\\nc\\td"
    assert readable("back\\slash") == "back\\\\slash"  # so a shown \n is always a newline
    assert readable("\x00\x1b[31m\x7f\x85") == "\\u0000\\u001b[31m\\u007f\\u0085"
    assert readable("\u2028\u2029\u202e\u2066") == "\\u2028\\u2029\\u202e\\u2066"
    assert readable("中文 émoji 😀 [bold]") == "中文 émoji 😀 [bold]"  # negative control: printable text unchanged


def test_markup_in_a_request_is_shown_verbatim(zhin: Any, tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", body("[bold]x[/bold] one"))
    b = write(tmp_path / "b.json", body("[bold]x[/bold] two"))
    assert f"  a: …[bold]x[/bold] {MARK}one…" in zhin("request-diff", a, b).stdout


# --- the field's line ------------------------------------------------------------------------------


def test_json_line_finds_the_value_of_a_path() -> None:
    text = '{\n  "model": "m",\n  "messages": [\n    {"role": "user",\n     "content": "a"},\n    {"role": "x"}\n  ]\n}\n'
    assert json_line(text, []) == 1
    assert json_line(text, ["model"]) == 2
    assert json_line(text, ["messages"]) == 3
    assert json_line(text, ["messages", 0]) == 4
    assert json_line(text, ["messages", 0, "content"]) == 5
    assert json_line(text, ["messages", 1, "role"]) == 6
    assert json_line('{"a": 1,\n"a": 2}', ["a"]) == 2  # a repeated key: the last counts, as json.loads has it
    assert json_line('\ufeff\n{"a": {"b": [1, {"c": "\\"}\\n"}]}}', ["a", "b", 1, "c"]) == 2
    # negative controls: a path that is not there, or of the wrong kind
    assert json_line(text, ["messages", 2]) is None
    assert json_line(text, ["nope"]) is None
    assert json_line(text, ["messages", "0"]) is None
    assert json_line(text, ["model", 0]) is None


# --- GitHub annotations and the step summary -------------------------------------------------------


def test_every_difference_is_an_annotation_at_its_line_and_in_the_summary(zhin: Any, tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", body("hello\nworld", extra=[{"role": "assistant", "content": "gone"}]))
    b = write(tmp_path / "b.json", {**body("hello\nw0rld"), "temperature": 0.5, "model": "gpt-4.1"})
    result = zhin("request-diff", a.name, b.name, env=github(tmp_path))
    assert result.returncode == 1
    found = annotations(result.stderr)
    assert [(x["level"], x["file"], x.get("line"), x["title"]) for x in found] == [
        ("error", "b.json", "10", "request-diff%3A messages[1].content changed"),
        ("error", "a.json", "12", "request-diff%3A messages[2] removed"),
        ("error", "b.json", "2", "request-diff%3A model changed"),
        ("error", "b.json", "13", "request-diff%3A temperature added"),
    ]
    b_lines, a_lines = b.read_text(encoding="utf-8").splitlines(), a.read_text(encoding="utf-8").splitlines()
    assert b_lines[9].strip() == '"content": "hello\\nw0rld"' and b_lines[12].strip() == '"temperature": 0.5'
    assert a_lines[11].strip() == "{" and a_lines[13].strip() == '"content": "gone"'  # where messages[2] starts
    assert f"a: …hello\\nw{MARK}orld…\nb: …hello\\nw{MARK}0rld…" in found[0]["message"]
    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert "4 difference(s) between `a.json` and `b.json`" in summary
    rows = [line for line in summary.splitlines() if line.startswith("| `")]
    assert [row.split("|")[1].strip() for row in rows] == ["`messages[1].content`", "`messages[2]`", "`model`", "`temperature`"]
    assert f"…hello\\nw{MARK}orld…" in rows[0]
    # --json output gets the same annotations (on stderr: stdout stays the document)
    as_json = zhin("request-diff", a, b, "--json", env=github(tmp_path))
    assert len(annotations(as_json.stderr)) == 4 and json.loads(as_json.stdout)["differences"]


def test_no_annotations_outside_github_actions_nor_for_the_same_request(zhin: Any, tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", body("one"))
    b = write(tmp_path / "b.json", body("two"))
    plain = zhin("request-diff", a, b)
    assert plain.returncode == 1 and "::error" not in plain.stderr and not (tmp_path / "summary.md").exists()
    same = zhin("request-diff", a, write(tmp_path / "c.json", body("one"), indent=None), env=github(tmp_path))
    assert same.returncode == 0 and annotations(same.stderr) == []
    assert "same request (same JSON, serialised differently)" in (tmp_path / "summary.md").read_text(encoding="utf-8")


def test_a_trace_document_is_annotated_at_the_line_inside_it(zhin: Any, tmp_path: Path) -> None:
    traced = zhin("trace", BUSY, "--turn", "4", "--json")
    trace_file = tmp_path / "trace.json"
    trace_file.write_text(traced.stdout, encoding="utf-8")
    request = json.loads(traced.stdout)["requests"][0]["request"]
    contents = [m.get("content") for m in request["messages"]]
    index = next(i for i, c in enumerate(contents) if isinstance(c, str) and contents.count(c) == 1 and len(c) > 20 and i > 1)
    changed = json.loads(json.dumps(request))
    changed["messages"][index]["content"] = "changed: " + contents[index]
    captured = write(tmp_path / "captured.json", changed, indent=None)
    result = zhin("request-diff", captured, trace_file, env=github(tmp_path))
    [annotation] = annotations(result.stderr)
    assert annotation["file"] == "trace.json"
    expected = f'"content": {json.dumps(contents[index], ensure_ascii=False)}'
    lines = trace_file.read_text(encoding="utf-8").splitlines()
    assert expected in lines[int(annotation["line"]) - 1]
    # the other way round: the change is in the one-line body, on its line 1
    reverse = zhin("request-diff", trace_file, captured, env=github(tmp_path))
    assert [(x["file"], x["line"]) for x in annotations(reverse.stderr)] == [("captured.json", "1")]


@pytest.mark.parametrize("kind", ["changed", "type_changed"])
def test_a_change_of_type_is_annotated_too(zhin: Any, tmp_path: Path, kind: str) -> None:
    a = write(tmp_path / "a.json", {**body("x"), "temperature": 1})
    b = write(tmp_path / "b.json", {**body("x"), "temperature": "1" if kind == "type_changed" else 2})
    [annotation] = annotations(zhin("request-diff", a, b, env=github(tmp_path)).stderr)
    assert annotation["title"] == f"request-diff%3A temperature {kind.replace('_', ' ')}" and annotation["line"] == "13"
