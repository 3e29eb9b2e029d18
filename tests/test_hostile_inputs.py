"""Hostile inputs (issue 14 §3), at the readers: each is one ``ZhinError`` naming ``file:line`` (never a traceback,
never a hang), and each has a negative control that is accepted. The CLI-level runs are in the corpus
(tests/corpus/manifest.json, tests/test_corpus.py); these pin the rules themselves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FIXTURES, clean_env, js

from zhin_cli.core.errors import ConfigError, InputError, UsageError
from zhin_cli.core.inputfiles import lone_surrogate_in_json, open_regular
from zhin_cli.core.model import UserMessage
from zhin_cli.core.outputfiles import escape_surrogates
from zhin_cli.core.readers import MAX_YAML_EXPANSION, read_json_file, read_yaml_file
from zhin_cli.pipeline.config import load_config
from zhin_cli.store.jsonl import read_session
from zhin_cli.store.payload import MAX_ROW_ID, check_payload_text, short
from zhin_cli.tools.diff.request import load_side
from zhin_cli.tools.fixtures.synth import SynthOptions

SESSION = {"type": "session", "session_id": "s#1", "scene": {"scene_type": "group"}}
T0 = 1_700_000_000_000


def user(text: str = "hi", **actor: object) -> dict[str, object]:
    return {"type": "message", "role": "user", "content": [{"type": "text", "text": text}], "timestamp": T0,
            "actor": {"subjectId": "1", "displayName": "A", **actor}}


def write(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# --- lone surrogates ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "found"), [
    (r'"a\ud800b"', 2), (r'"\udc00"', 1), (r'"x\uDBFF"', 2), (r'"\ud83d\ude00 \ud83d"', 14),
    (r'"\ud83d\ude00"', None), (r'"\\ud800"', None), (r'"\\\ud800"', 3), (r'"\u00e9 \uffff"', None), ('"😀"', None),
])
def test_the_json_scan_finds_exactly_the_lone_surrogate_escapes(text: str, found: int | None) -> None:
    assert lone_surrogate_in_json(text) == found
    # the scan agrees with what json.loads makes of the text
    decoded = json.loads(text)
    assert (found is not None) == any(0xD800 <= ord(c) <= 0xDFFF for c in decoded)


@pytest.mark.parametrize(("line", "number"), [
    (js(SESSION).replace('"s#1"', '"s#\\ud800"'), 1),  # the session id
    (json.dumps(user("a\udc00b")), 2),  # a text
    (json.dumps(user(displayName="\ud800")), 2),  # a name
    (json.dumps({**user(), "extra": {"\ud800": 1}}), 2),  # a key
])
def test_a_lone_surrogate_is_refused_at_its_line(line: str, number: int, tmp_path: Path) -> None:
    assert "\\ud" in line  # the escape, as JSON.stringify writes it
    lines = [js(SESSION), js(user())]
    lines[number - 1] = line
    path = write(tmp_path / "s.jsonl", *lines)
    with pytest.raises(InputError, match=rf"s.jsonl:{number}: lone surrogate \\u[0-9a-f]{{4}} in a string"):
        read_session(path)


def test_a_surrogate_pair_and_an_escaped_backslash_are_fine(tmp_path: Path) -> None:
    """Negative control: ``\\ud83d\\ude00`` is 😀; ``\\\\ud800`` is a backslash and five letters."""
    path = write(tmp_path / "s.jsonl", js(SESSION), '{"type":"message","role":"user","content":[{"type":"text","text":'
                 '"\\ud83d\\ude00 \\\\ud800"}],"timestamp":1700000000000,"actor":{"subjectId":"1"}}')
    message = read_session(path).messages[0]
    assert isinstance(message, UserMessage) and message.content[0]["text"] == "😀 \\ud800"


def test_a_database_payload_with_a_lone_surrogate_is_refused_at_its_row() -> None:
    with pytest.raises(InputError, match=r"agent_messages row 7: lone surrogate \\ud800"):
        check_payload_text('{"role":"user","content":"\\ud800"}', "agent_messages row 7")
    check_payload_text('{"role":"user","content":"\\ud83d\\ude00"}', "agent_messages row 7")  # negative control


def test_json_output_writes_a_stray_surrogate_as_its_escape() -> None:
    """The last line of defence: what reaches a writer anyway is valid JSON UTF-8 can encode, and reads back."""
    text = escape_surrogates(json.dumps({"a": "x\ud800y😀"}, ensure_ascii=False))
    assert text == '{"a": "x\\ud800y😀"}'
    assert json.loads(text) == {"a": "x\ud800y😀"}
    text.encode("utf-8")


def test_a_lone_surrogate_in_yaml_is_refused_and_a_pair_is_joined(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.yaml", "provider: openai", 'model: "gpt\\ud800"')
    with pytest.raises(ConfigError, match=r"bad.yaml:2: lone surrogate \\ud800"):
        load_config(bad)
    good = write(tmp_path / "good.yaml", 'model: "gpt \\ud83d\\ude00 \\U0001F600"')
    assert load_config(good).model == "gpt 😀 😀"  # YAML's \u is a code point: a written pair is joined


def test_a_lone_surrogate_in_a_json_file_is_refused_at_its_line(tmp_path: Path) -> None:
    path = write(tmp_path / "r.json", "{", '  "model": "x",', '  "user": "\\udfff"', "}")
    with pytest.raises(InputError, match=r"r.json:3: lone surrogate \\udfff"):
        read_json_file(path, InputError)


# --- integers -----------------------------------------------------------------------------------------------


def test_an_integer_past_the_digit_limit_is_invalid_json_at_its_line(tmp_path: Path) -> None:
    path = write(tmp_path / "s.jsonl", js(SESSION), js(user()), js(user())[:-1] + ',"n":' + "9" * 5000 + "}")
    with pytest.raises(InputError, match=r"s.jsonl:3: invalid JSON: an integer with more than 4,300 digits"):
        read_session(path)
    # negative control: 4,000 digits in an unknown key is a valid (kept, ignored) value
    fine = write(tmp_path / "fine.jsonl", js(SESSION), js(user())[:-1] + ',"n":' + "9" * 4000 + "}")
    assert len(read_session(fine).messages) == 1


def test_a_request_file_with_a_huge_integer_is_one_error(tmp_path: Path) -> None:
    path = write(tmp_path / "r.json", '{"model": "x",', ' "max_tokens": ' + "1" * 5000 + "}")
    with pytest.raises(InputError, match=r"r.json:2: request file is not valid JSON: an integer with more than 4,300"):
        load_side(path)


def test_a_yaml_integer_past_the_digit_limit_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "zhin.yaml", "budget:", "  max_chars: " + "7" * 5000)
    with pytest.raises(ConfigError, match=r"zhin.yaml:2: invalid YAML: an integer with more than 4,300 digits"):
        load_config(path)


@pytest.mark.parametrize(("line", "error"), [
    (js({**SESSION, "scene": {"member_count": 10**30}}), "'scene.member_count' must be a non-negative integer"),
    (js({"type": "member", "timestamp": T0, "user_id": "1", "muted_until": 10**30}), "'muted_until' must be an integer"),
    (js(user(mutedUntil=10**30)), "'actor.mutedUntil' must be an integer"),
    (js({**user(), "id": 10**30}), "'id' must be a positive integer"),
    (js({"type": "scene", "timestamp": T0, "member_count": 2**63}), "'member_count' must be a non-negative integer"),
])
def test_integers_too_wide_for_a_database_column_are_refused_at_read(line: str, error: str, tmp_path: Path) -> None:
    """10^30 would be an OverflowError half-way through ``zhin import``: refused when read, naming the line."""
    lines = [js(SESSION), js(user())] if not line.startswith('{"type":"session"') else [line, js(user())]
    if not line.startswith('{"type":"session"'):
        lines.insert(1, line)
    path = write(tmp_path / "s.jsonl", *lines)
    number = 1 if line.startswith('{"type":"session"') else 2
    with pytest.raises(InputError, match=rf"s.jsonl:{number}: {error}"):
        read_session(path)


def test_the_widest_integers_a_column_holds_are_accepted(tmp_path: Path) -> None:
    """Negative control: the bounds are the columns' (signed 64 bits; ms epochs of years 1..9999)."""
    path = write(tmp_path / "s.jsonl", js({**SESSION, "scene": {"member_count": 2**63 - 1}}),
                 js({"type": "member", "timestamp": T0, "user_id": "1", "muted_until": 253_402_000_000_000}),
                 js({**user(mutedUntil=0), "id": MAX_ROW_ID}))
    session = read_session(path)
    assert session.scene.member_count == 2**63 - 1 and session.messages[0].row_id == MAX_ROW_ID


def test_short_stays_short_and_fast_on_anything() -> None:
    nested: list[object] = ["x" * 1000]
    for _ in range(200):
        nested = [nested, nested]  # shared: 2^200 leaves if formatted whole
    start = time.perf_counter()
    for value in (nested, 10**4000, -(10**4000), {"k": nested}, "y" * 10**7):
        assert len(short(value)) <= 80
    assert time.perf_counter() - start < 1.0


# --- YAML aliases -------------------------------------------------------------------------------------------


def _bomb(levels: int = 8, width: int = 9) -> str:
    """9^8 = 43 million strings in a few hundred bytes ("billion laughs")."""
    parts = ["&l0 [" + ",".join(['"lol"'] * width) + "]"]
    parts += [f"&l{d} [" + ",".join([f"*l{d - 1}"] * width) + "]" for d in range(1, levels)]
    return "[" + ", ".join(parts) + "]"


@pytest.mark.parametrize(("document", "line", "name"), [
    ("provider: openai\nmodel: {bomb}\n", 2, r"model\[\d\]"),
    ("tools:\n  - type: function\n    function: {{name: lol, parameters: {bomb}}}\n", 3, r"tools\[0\]\.function\.parameters\[\d\]"),
    ("{bomb}\n", 1, r"\[\d\]"),
])
def test_an_alias_bomb_is_refused_quickly_naming_its_key(document: str, line: int, name: str, tmp_path: Path) -> None:
    path = write(tmp_path / "zhin.yaml", document.format(bomb=_bomb()))
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=rf"zhin.yaml:{line}: YAML aliases expand {name} to more than") as caught:
        load_config(path)
    # the message stays short whatever the expansion (the temp folder's path length varies with the worker)
    assert time.perf_counter() - start < 5 and len(str(caught.value)) - len(str(path)) < 200


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "zhin.yaml", "tools: &t", "  - *t")
    with pytest.raises(ConfigError, match=r"zhin.yaml:1: a YAML anchor is used inside itself"):
        read_yaml_file(path)


def test_modest_aliases_and_big_files_without_aliases_are_fine(tmp_path: Path) -> None:
    """Negative controls: reuse through anchors below the bound, and a file larger than the bound that uses none."""
    reused = write(tmp_path / "reused.yaml", "a: &a [" + ",".join(['"' + "x" * 100 + '"'] * 100) + "]",
                   "b: [" + ",".join(["*a"] * 100) + "]")  # ~1 M expanded
    data, _ = read_yaml_file(reused)
    assert len(data["b"]) == 100 and data["b"][0] is data["a"]
    big = write(tmp_path / "big.yaml", "items:", *[f"  - {'y' * 100}" for _ in range(MAX_YAML_EXPANSION // 100 + 10)])
    assert len(read_yaml_file(big)[0]["items"]) == MAX_YAML_EXPANSION // 100 + 10


def test_an_alias_bomb_in_a_case_file_is_one_case_error(tmp_path: Path) -> None:
    from zhin_cli.tools.eval.cases import CaseError, load_case_file

    path = write(tmp_path / "cases.yaml", "cases:", "  - id: bomb", f"    description: {_bomb()}",
                 "    assertions: [{type: no_system_midway}]")
    start = time.perf_counter()
    with pytest.raises(CaseError, match=r"cases.yaml:3: YAML aliases expand cases\[0\]\.description\[\d\] to more than"):
        load_case_file(path)
    assert time.perf_counter() - start < 5


# --- files that are not files ---------------------------------------------------------------------------------


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    path = tmp_path / "pipe.json"
    os.mkfifo(path)
    return path


def test_open_regular_refuses_a_fifo_without_blocking(fifo: Path, tmp_path: Path) -> None:
    start = time.perf_counter()
    with pytest.raises(InputError, match=r"pipe.json: file is a FIFO \(named pipe\), not a regular file"):
        open_regular(fifo)
    with pytest.raises(InputError, match=r"is a character device"):
        open_regular(Path(os.devnull))
    assert time.perf_counter() - start < 1
    regular = write(tmp_path / "ok.json", "{}")
    with open_regular(regular) as handle:  # negative control
        assert handle.read() == b"{}\n"


@pytest.mark.parametrize("reader", [
    lambda p: load_config(p), lambda p: read_json_file(p), lambda p: load_side(p),
    lambda p: read_session(p), lambda p: read_yaml_file(p),
])
def test_every_reader_refuses_a_fifo(reader, fifo: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises((InputError, ConfigError), match="FIFO"):
        reader(fifo)


@pytest.mark.parametrize("args", [
    ["trace", "{fixture}", "--config", "{fifo}"], ["trace", "{fixture}", "--preset", "{fifo}"],
    ["request-diff", "{fifo}", "{fixture}"], ["eval", "{fifo}"],
    ["trace", "{fifo}.jsonl"],
])
def test_the_cli_refuses_a_fifo_in_one_line_without_hanging(args: list[str], tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    os.mkfifo(tmp_path / "pipe.jsonl")
    argv = [a.format(fixture=FIXTURES / "private-chat.jsonl", fifo=tmp_path / "pipe") for a in args]
    result = subprocess.run([sys.executable, "-m", "zhin_cli", *argv], cwd=tmp_path, env=clean_env(), capture_output=True,
                            text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert result.returncode in (2, 3, 4) and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "not a regular file: refused before reading" in result.stderr, result.stderr


# --- generator bounds -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("options", "error"), [
    (SynthOptions(messages=10**12), "--messages must be at most 200,000"),
    (SynthOptions(members=10**12), "--members must be from 2 to 100,000"),
])
def test_synth_sizes_are_bounded(options: SynthOptions, error: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZHIN_MAX_MESSAGES", raising=False)
    with pytest.raises(UsageError, match=error):
        options.check()
    SynthOptions(messages=200_000, members=100_000).check()  # negative control: the bounds themselves


def test_synth_follows_zhin_max_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZHIN_MAX_MESSAGES", "1000")
    with pytest.raises(UsageError, match="at most 1,000"):
        SynthOptions(messages=1001).check()
    SynthOptions(messages=1000).check()


# --- command-line arguments that are not text -------------------------------------------------------------------


def test_an_argument_that_is_not_utf8_is_a_usage_error(tmp_path: Path) -> None:
    """Bytes that are not UTF-8 arrive as lone surrogates: as a session id they reached SQLite (a traceback)."""
    db = tmp_path / "data.sqlite"
    assert subprocess.run([sys.executable, "-m", "zhin_cli", "import", str(FIXTURES / "private-chat.jsonl"), "--db", str(db)],
                          env=clean_env(), capture_output=True, timeout=120).returncode == 0
    result = subprocess.run([sys.executable.encode(), b"-m", b"zhin_cli", b"trace", b"\xff", b"--db", os.fsencode(db)], cwd=tmp_path,
                            env=clean_env(), capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    stderr = result.stderr.decode("utf-8", "replace")
    assert result.returncode == 2 and "Traceback" not in stderr and stderr.count("\n") == 1, stderr
    assert "argument 2 is not UTF-8 text: \\xff" in stderr
    # negative control: a file whose name is not UTF-8 is still a file
    (tmp_path / os.fsdecode(b"\xfe.jsonl")).write_bytes((FIXTURES / "private-chat.jsonl").read_bytes())
    fine = subprocess.run([sys.executable.encode(), b"-m", b"zhin_cli", b"export", b"\xfe.jsonl"], cwd=tmp_path, env=clean_env(),
                          capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    assert fine.returncode == 0, fine.stderr
