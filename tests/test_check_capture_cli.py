"""``zhin preset check-capture`` on capture folders made the real way: zhin's capture server receives every golden
run's ST bodies (byte for byte, turn order), then the CLI checks each folder. Negative controls edit a copy."""

from __future__ import annotations

import http.client
import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_zhin
from zhin_cli.tools.serve import make_server

GOLDEN = Path(__file__).parent / "st_golden"
RUNS = json.loads((GOLDEN / "runs.json").read_text(encoding="utf-8"))
LABELS = [run["label"] for run in RUNS]
CONTENT = GOLDEN / "content"


def _capture(run: dict[str, Any], folder: Path) -> None:
    server = make_server("openai", capture=folder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        for turn in range(1, run["turns"] + 1):
            body = (GOLDEN / "runs" / run["label"] / f"request-{turn:02d}.json").read_bytes()
            connection = http.client.HTTPConnection(str(host), int(port), timeout=30)
            connection.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            connection.getresponse().read()
            connection.close()
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def captured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """Per run: its capture folder and its preset (the golden preset with the run's ST settings written in)."""
    root = tmp_path_factory.mktemp("captures")
    out: dict[str, tuple[Path, Path]] = {}
    for run in RUNS:
        folder = root / run["label"]
        _capture(run, folder)
        data = json.loads((GOLDEN / run["preset"]).read_text(encoding="utf-8"))
        data.update(run["st_effective"])
        preset = root / f"preset-{run['label']}.json"
        preset.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
        out[run["label"]] = (folder, preset)
    return out


def _run(folder: Path, preset: Path, label: str, cwd: Path, *extra: object) -> Any:
    run = next(r for r in RUNS if r["label"] == label)
    processing = run["st_effective"]["custom_prompt_post_processing"] or "none"
    persona = json.loads((CONTENT / "golden-persona.json").read_text(encoding="utf-8"))
    return run_zhin("preset", "check-capture", folder, "--preset", preset,
                    "--chat", GOLDEN / "runs" / label / "chat.jsonl", "--card", CONTENT / "golden-card.json",
                    "--lore", CONTENT / "golden-lore.json", "--persona-description", persona["description"],
                    "--post-processing", processing, *extra, cwd=cwd)


@pytest.mark.parametrize("label", LABELS)
def test_every_golden_run_checks_clean(label: str, captured: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    folder, preset = captured[label]
    result = _run(folder, preset, label, tmp_path, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(result.stdout)
    assert data["version"] == 1 and data["checked"] == 8 and data["departures"] == 0
    for capture in data["captures"]:
        kinds = {b["kind"] for b in capture["check"]["by_design"]}
        assert "chat-variable" in kinds


def _copy(captured: dict[str, tuple[Path, Path]], tmp_path: Path) -> tuple[Path, Path]:
    folder, preset = captured["plain"]
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    return copy, preset


def _edit(path: Path, change: Any) -> None:
    body = json.loads(path.read_text(encoding="utf-8"))
    change(body["messages"])
    path.write_text(json.dumps(body, ensure_ascii=False), encoding="utf-8")


def _departures(result: Any) -> list[dict[str, Any]]:
    data = json.loads(result.stdout)
    return [d for c in data["captures"] if c["check"] for d in c["check"]["departures"]]


def test_a_changed_character_is_a_departure_at_its_byte(captured: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    folder, preset = _copy(captured, tmp_path)
    target = sorted(folder.glob("00003-*.json"))[0]
    body = json.loads(target.read_text(encoding="utf-8"))
    index = next(i for i, m in enumerate(body["messages"]) if any("\u4e00" <= ch <= "\u9fff" for ch in m["content"]))
    text = body["messages"][index]["content"]
    at = next(i for i, ch in enumerate(text) if "\u4e00" <= ch <= "\u9fff")
    body["messages"][index]["content"] = text[:at] + ("星" if text[at] != "星" else "月") + text[at + 1:]
    target.write_text(json.dumps(body, ensure_ascii=False), encoding="utf-8")
    result = _run(folder, preset, "plain", tmp_path, "--json")
    assert result.returncode == 1, result.stderr
    (departure,) = _departures(result)
    assert (departure["turn"], departure["st_index"], departure["kind"]) == (3, index, "changed")
    assert departure["byte"] == len(text[:at].encode("utf-8"))
    text_result = _run(folder, preset, "plain", tmp_path)
    assert text_result.returncode == 1
    lines = text_result.stdout.splitlines()
    head = next(line for line in lines if "turn 3 · ST message" in line)
    assert f"ST message {index} /" in head and departure["source"] in head
    assert any(line.strip() == f"byte {departure['byte']}:" for line in lines)
    assert any(line.strip().startswith("ST ") for line in lines) and any(line.strip().startswith("zhin ") for line in lines)


def test_a_changed_role_and_a_moved_message_depart(captured: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    folder, preset = _copy(captured, tmp_path)
    _edit(sorted(folder.glob("00002-*.json"))[0], lambda ms: ms[0].update(role="user" if ms[0]["role"] != "user" else "system"))
    _edit(sorted(folder.glob("00005-*.json"))[0], lambda ms: ms.insert(0, ms.pop(1)))
    result = _run(folder, preset, "plain", tmp_path, "--json")
    assert result.returncode == 1, result.stderr
    turns = {d["turn"] for d in _departures(result)}
    assert turns == {2, 5}


def test_another_chat_matches_no_turn(captured: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    folder, preset = _copy(captured, tmp_path)
    for path in folder.glob("*.json"):
        _edit(path, lambda ms: [m.update(content="other chat") for m in ms])
    result = _run(folder, preset, "plain", tmp_path)
    assert result.returncode == 3 and "matches a turn" in result.stderr and len(result.stderr.splitlines()) == 1
    folder2, _ = captured["plain"]
    mixed = tmp_path / "mixed"
    shutil.copytree(folder2, mixed)
    shutil.copy(sorted(folder.glob("*.json"))[0], mixed / "00009-chat-completions.json")
    result = _run(mixed, preset, "plain", tmp_path)
    assert result.returncode == 0 and "matches no turn" in result.stdout


def test_unreadable_input_is_one_line(captured: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    folder, preset = _copy(captured, tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    result = _run(empty, preset, "plain", tmp_path)
    assert result.returncode == 3 and len(result.stderr.splitlines()) == 1
    broken = sorted(folder.glob("00004-*.json"))[0]
    broken.write_text("{\n  \"messages\": [\n", encoding="utf-8")
    result = _run(folder, preset, "plain", tmp_path)
    assert result.returncode == 3 and result.stderr.startswith(f"zhin: error: {broken}:"), result.stderr
    folder2, _ = captured["plain"]
    result = run_zhin("preset", "check-capture", folder2, "--preset", preset, "--chat",
                      GOLDEN / "runs" / "plain" / "chat.jsonl", "--card", tmp_path / "missing.json", cwd=tmp_path)
    assert result.returncode == 3 and "missing.json" in result.stderr
    result = _run(folder2, preset, "plain", tmp_path, "--post-processing", "bogus")
    assert result.returncode == 2
