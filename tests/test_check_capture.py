"""``zhin preset check-capture`` on the SillyTavern golden set, through the capture server as a user runs it.

Each run's capture folder is built the real way: zhin's capture server (``tools/serve/server.py``, ``--capture``) in
this process, and every ``runs/<run>/request-NN.json`` body ST sent POSTed to it byte for byte in turn order —
so the folder holds what ``zhin serve --capture`` writes (its numbering, its atomic files). Then the CLI, in
process, with the run's preset settings (squash / names behaviour written into a copy of the preset, as a user
saves the preset in ST before exporting it; post-processing passed as ``--post-processing``): 0 departures on
every run. Negative controls change one thing in a copy of a folder and must be reported at the right turn,
message index and byte.
"""

from __future__ import annotations

import http.client
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from zhin_cli.tools.serve.server import running_server

GOLDEN = Path(__file__).resolve().parent / "st_golden"
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
RUNS: list[dict[str, Any]] = json.loads((GOLDEN / "runs.json").read_text(encoding="utf-8"))
PERSONA = json.loads((GOLDEN / "content" / "golden-persona.json").read_text(encoding="utf-8"))
CONTENT = GOLDEN / "content"
POST_PROCESSING = {"": "none", "merge": "merge", "semi": "semi", "strict": "strict", "single": "single"}
Zhin = Callable[..., Any]


def _post(base_url: str, body: bytes) -> None:
    url = urlsplit(base_url)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        connection.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        assert response.status == 200, response.status
    finally:
        connection.close()


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Per run, the folder the capture server wrote while the run's 8 bodies were POSTed to it."""
    folders: dict[str, Path] = {}
    for run in RUNS:
        folder = tmp_path_factory.mktemp(f"captured-{run['label']}")
        with running_server("openai", capture=folder) as (base_url, _server):
            for turn in range(1, run["turns"] + 1):
                _post(base_url, (GOLDEN / "runs" / run["label"] / f"request-{turn:02d}.json").read_bytes())
        folders[run["label"]] = folder
    return folders


def _preset(run: dict[str, Any], folder: Path) -> Path:
    """The golden preset as the user would export it after the run's changes in ST (squash, names behaviour)."""
    data = json.loads((CONTENT / "golden-preset.json").read_text(encoding="utf-8"))
    data["squash_system_messages"] = run["st_effective"]["squash_system_messages"]
    data["names_behavior"] = run["st_effective"]["names_behavior"]
    path = folder / f"preset-{run['label']}.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def _arguments(run: dict[str, Any], folder: Path, captured: Path, *, card: bool = True) -> list[str]:
    persona = folder / "persona.txt"
    persona.write_text(PERSONA["description"], encoding="utf-8")
    arguments = ["preset", "check-capture", str(captured), "--preset", str(_preset(run, folder)),
                 "--chat", str(GOLDEN / "runs" / run["label"] / "chat.jsonl"),
                 "--lore", str(CONTENT / "golden-lore.json"), "--persona-description", f"@{persona}",
                 "--post-processing", POST_PROCESSING[run["st_effective"]["custom_prompt_post_processing"]]]
    return [*arguments, "--card", str(CONTENT / "golden-card.json")] if card else arguments


def _run(label: str) -> dict[str, Any]:
    return next(r for r in RUNS if r["label"] == label)


def _copy(captures: dict[str, Path], tmp_path: Path, label: str = "plain") -> Path:
    copy = tmp_path / "edited"
    shutil.copytree(captures[label], copy)
    return copy


def _edit(folder: Path, number: int, change: Callable[[list[dict[str, Any]]], None]) -> None:
    path = folder / f"{number:05d}-chat-completions.json"
    body = json.loads(path.read_text(encoding="utf-8"))
    change(body["messages"])
    path.write_text(json.dumps(body, ensure_ascii=False), encoding="utf-8")


def _departures(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [d for c in document["captures"] if c["check"] for d in c["check"]["departures"]]


@pytest.mark.parametrize("label", [r["label"] for r in RUNS])
def test_every_golden_run_has_no_departure(label: str, captures: dict[str, Path], zhin: Zhin, tmp_path: Path) -> None:
    run = _run(label)
    result = zhin(*_arguments(run, tmp_path, captures[label]), "--json")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    document = json.loads(result.stdout)
    assert document["version"] == 1 and document["checked"] == run["turns"] and document["departures"] == 0
    assert [c["turn"] for c in document["captures"]] == list(range(1, run["turns"] + 1))
    assert [c["file"] for c in document["captures"]] == [f"{n:05d}-chat-completions.json" for n in range(1, 9)]
    kinds = {b["kind"] for c in document["captures"] for b in c["check"]["by_design"]}
    assert kinds == ({"chat-variable", "names"} if run["st_effective"]["names_behavior"] else {"chat-variable"})
    assert "temperature" in document["ignored_keys"] and "messages" not in document["ignored_keys"]


def test_the_help_examples_inputs_are_the_golden_plain_run(captures: dict[str, Path]) -> None:
    """fixtures/st/ (what the --help examples run on, in a copy of fixtures/) is the golden plain run: its capture
    folder byte for byte what the capture server wrote, and the preset, chat, card and lorebook as in the set."""
    example = sorted((FIXTURES / "st" / "captured").iterdir())
    bodies = sorted(p.name for p in captures["plain"].iterdir() if not p.name.endswith(".exchange.json"))
    assert [p.name for p in example] == bodies
    assert all(p.read_bytes() == (captures["plain"] / p.name).read_bytes() for p in example)
    assert (FIXTURES / "st" / "persona.txt").read_text(encoding="utf-8").removesuffix("\n") == PERSONA["description"]
    for mine, golden in (("preset.json", CONTENT / "golden-preset.json"), ("chat.jsonl", GOLDEN / "runs/plain/chat.jsonl"),
                         ("card.json", CONTENT / "golden-card.json"), ("lore.json", CONTENT / "golden-lore.json")):
        assert (FIXTURES / "st" / mine).read_bytes() == golden.read_bytes(), mine


def test_a_moved_message_is_reported_at_both_indices(captures: dict[str, Path], zhin: Zhin, tmp_path: Path) -> None:
    folder = _copy(captures, tmp_path)
    _edit(folder, 3, lambda messages: messages.append(messages.pop(30)))
    result = zhin(*_arguments(_run("plain"), tmp_path, folder), "--json")
    assert result.returncode == 1, result.stderr
    (moved,) = [d for d in _departures(json.loads(result.stdout)) if d["kind"] == "moved"]
    assert moved["turn"] == 3 and moved["st_index"] is not None and moved["zhin_index"] is not None
    assert moved["st_index"] != moved["zhin_index"]


def test_a_changed_role_is_reported_at_its_index(captures: dict[str, Path], zhin: Zhin, tmp_path: Path) -> None:
    folder = _copy(captures, tmp_path)
    original = json.loads((folder / "00003-chat-completions.json").read_text(encoding="utf-8"))["messages"][10]["role"]
    _edit(folder, 3, lambda messages: messages[10].update(role="assistant" if original != "assistant" else "user"))
    result = zhin(*_arguments(_run("plain"), tmp_path, folder), "--json")
    assert result.returncode == 1
    (departure,) = _departures(json.loads(result.stdout))
    assert (departure["turn"], departure["st_index"], departure["kind"]) == (3, 10, "role")
    assert departure["zhin_role"] == original


def test_one_changed_character_is_reported_at_its_utf8_byte(captures: dict[str, Path], zhin: Zhin, tmp_path: Path) -> None:
    folder = _copy(captures, tmp_path)
    messages = json.loads((folder / "00003-chat-completions.json").read_text(encoding="utf-8"))["messages"]
    index = next(i for i, m in enumerate(messages) if "简短" in m["content"])
    at = messages[index]["content"].index("简短") + 1  # 短 → 洁
    expected_byte = len(messages[index]["content"][:at].encode("utf-8"))
    assert expected_byte != at  # a character offset would be wrong here
    _edit(folder, 3, lambda m: m[index].update(content=m[index]["content"][:at] + "洁" + m[index]["content"][at + 1:]))
    result = zhin(*_arguments(_run("plain"), tmp_path, folder), "--json")
    assert result.returncode == 1
    (departure,) = _departures(json.loads(result.stdout))
    assert (departure["turn"], departure["st_index"], departure["kind"], departure["byte"]) == (3, index, "changed", expected_byte)
    assert departure["source"] == "preset:golden-zh-style"
    # the text report: one block, both excerpts marked at the character
    text = zhin(*_arguments(_run("plain"), tmp_path, folder))
    assert text.returncode == 1
    lines = text.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if "turn 3 · ST message" in line)
    assert lines[head].startswith("00003-chat-completions.json: turn 3 · ST message") and "preset:golden-zh-style" in lines[head]
    assert lines[head + 1].strip() == f"byte {expected_byte}:"
    assert "简⟦洁" in lines[head + 2] and lines[head + 2].strip().startswith("ST")
    assert "简⟦短" in lines[head + 3] and lines[head + 3].strip().startswith("zhin")
    assert lines[-1].endswith("1 departures · by design: chat-variable × 16")


def test_without_the_card_its_fields_depart(captures: dict[str, Path], zhin: Zhin, tmp_path: Path) -> None:
    """Negative control of the card reader's part: the same folder without --card is not clean."""
    result = zhin(*_arguments(_run("plain"), tmp_path, captures["plain"], card=False), "--json")
    assert result.returncode == 1
    assert any(d["kind"] in ("extra", "changed") for d in _departures(json.loads(result.stdout)))
    assert any("no --card" in note for note in json.loads(result.stdout)["notes"])


def test_another_runs_captures_are_not_clean_under_this_runs_settings(captures: dict[str, Path], zhin: Zhin, tmp_path: Path) -> None:
    """The squash run's bodies checked with the plain run's preset: departures (the settings matter)."""
    result = zhin(*_arguments(_run("plain"), tmp_path, captures["squash"]), "--json")
    assert result.returncode == 1 and json.loads(result.stdout)["departures"] > 0


def test_a_capture_of_another_conversation_is_a_note(captures: dict[str, Path], zhin: Zhin, tmp_path: Path) -> None:
    folder = _copy(captures, tmp_path)
    (folder / "00009-chat-completions.json").write_text('{"messages": [{"role": "user", "content": "Hi"}]}', encoding="utf-8")
    (folder / "00010-models.json").write_text("{}", encoding="utf-8")
    (folder / ".capture-x.tmp").write_text("partial", encoding="utf-8")  # a temporary is never read
    (folder / "notes.txt").write_text("mine", encoding="utf-8")
    result = zhin(*_arguments(_run("plain"), tmp_path, folder), "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    notes = {c["file"]: c["note"] for c in document["captures"] if c["note"]}
    assert "matches no turn" in notes["00009-chat-completions.json"] and "models" in notes["00010-models.json"]
    assert any("notes.txt" in note for note in document["notes"])
    assert not any(".capture-x.tmp" in note for note in document["notes"])


def _one_error(result: Any, code: int, *needles: str) -> None:
    assert result.returncode == code, (result.returncode, result.stderr)
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("zhin: error:") and "Traceback" not in result.stderr
    for needle in needles:
        assert needle in line, line


def test_bad_inputs_are_one_line(captures: dict[str, Path], zhin: Zhin, tmp_path: Path) -> None:
    run = _run("plain")
    empty = tmp_path / "empty"
    empty.mkdir()
    _one_error(zhin(*_arguments(run, tmp_path, empty)), 3, "no captures", str(empty))
    _one_error(zhin(*_arguments(run, tmp_path, tmp_path / "missing")), 3, "missing")
    other = tmp_path / "other"
    other.mkdir()
    (other / "00001-chat-completions.json").write_text('{"messages": [{"role": "user", "content": "Hi"}]}', encoding="utf-8")
    _one_error(zhin(*_arguments(run, tmp_path, other)), 3, "no capture matches a turn")
    broken = _copy(captures, tmp_path)
    (broken / "00002-chat-completions.json").write_text('{"messages": [\n  {"role": "user",,\n', encoding="utf-8")
    _one_error(zhin(*_arguments(run, tmp_path, broken)), 3, "00002-chat-completions.json:2")
    arguments = _arguments(run, tmp_path, captures["plain"])
    _one_error(zhin(*[a if a != str(CONTENT / "golden-card.json") else str(tmp_path / "nope.png") for a in arguments]), 3, "nope.png")
    _one_error(zhin(*arguments[:-2], "--post-processing", "sideways"), 2, "sideways")
    _one_error(zhin(*[a if not a.startswith("@") else f"@{tmp_path / 'no-persona.txt'}" for a in arguments]), 3, "no-persona.txt")
    # control: the same arguments with the good folder run clean
    assert zhin(*arguments).returncode == 0
