"""The hostile-preset corpus (issue 14 §3): every file in ``tests/corpus/preset/`` through ``preset lint``,
``trace --preset`` and ``preset probe``, as a user runs them (a subprocess, ``cwd`` a temporary folder, no
``ZHIN_*`` variables), plus generated cases too big to commit.

The entries are in ``tests/corpus/manifest.json`` with kind ``preset`` (no commands of its own there, so
test_corpus.py only checks that each file has an entry): ``runs`` maps each command to its exit status,
``expect`` gives a fragment its output must contain (a lint diagnostic, a trace/probe warning), and a failing
entry's ``error``/``line`` give its one stderr line ``zhin: error: <file>:<line>: …``. Every run must finish
within ``TIMEOUT`` seconds and never print a traceback. ``trace`` reads a session whose first member message
is 5,000 ``x`` (what a catastrophic regex script chokes on).

The corpus files' runs (three commands each) go through the in-process runner (``conftest.run_zhin``, which
matches a real process's exit, stdout and stderr), under a ``SIGALRM`` watchdog of ``TIMEOUT`` seconds, so a hang
is still a failure rather than a stuck test; a fresh interpreter per run was most of this file's time. The other
tests still start the real process.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import CORPUS, FIXTURES, clean_env, run_zhin

MANIFEST: dict[str, Any] = json.loads((CORPUS / "manifest.json").read_text(encoding="utf-8"))
PRESETS = {name: entry for name, entry in MANIFEST["files"].items() if entry["kind"] == "preset"}
TIMEOUT = 60  # seconds; every case here hung (or raised) before


def run(argv: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "zhin_cli", *argv], cwd=cwd, env=clean_env(), capture_output=True, text=True,
                            encoding="utf-8", errors="replace", timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    return result, time.perf_counter() - started


class _Hung(Exception):
    """A run took longer than TIMEOUT (raised by the watchdog's SIGALRM)."""


@contextmanager
def _watchdog(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: object) -> None:
        raise _Hung(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_in_process(argv: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    """``run``'s result for the same call, from the CLI in this process; a run past TIMEOUT raises ``_Hung``."""
    started = time.perf_counter()
    with _watchdog(TIMEOUT):
        result = run_zhin(*argv, cwd=cwd)
    return result, time.perf_counter() - started


@pytest.fixture(scope="module")
def hostile_session(tmp_path_factory: pytest.TempPathFactory) -> Path:
    lines = (FIXTURES / "private-chat.jsonl").read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[1])
    first["content"][0]["text"] = "x" * 5000 + "猫"
    lines[1] = json.dumps(first, ensure_ascii=False)
    path = tmp_path_factory.mktemp("session") / "hostile.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def argv_for(command: str, preset: Path, session: Path) -> list[str]:
    return {"preset lint": ["preset", "lint", str(preset)], "trace": ["trace", str(session), "--preset", str(preset)],
            "preset probe": ["preset", "probe", str(preset)]}[command]


def test_every_preset_file_has_an_entry() -> None:
    on_disk = {p.relative_to(CORPUS).as_posix() for p in (CORPUS / "preset").iterdir()}
    assert sorted(on_disk) == sorted(PRESETS)
    for name, entry in PRESETS.items():
        assert entry["runs"] and set(entry["runs"]) <= {"preset lint", "trace", "preset probe"}, name
        failing = any(code not in (0, 1) for code in entry["runs"].values())
        assert failing == ("error" in entry) == ("line" in entry), f"{name}: a failing entry names its error and line"
        assert failing or entry.get("expect"), f"{name}: a passing entry says what it must report"
    assert len(PRESETS) >= 12


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_corpus_file(name: str, tmp_path: Path, hostile_session: Path) -> None:
    entry = PRESETS[name]
    source = CORPUS / name
    problems = []
    for command, expected in entry["runs"].items():
        result, seconds = run_in_process(argv_for(command, source, hostile_session), tmp_path)
        out = result.stdout + result.stderr
        if "Traceback" in out:
            problems.append(f"{command}: a traceback")
        if result.returncode != expected:
            problems.append(f"{command}: exit {result.returncode}, expected {expected}")
        if expected in (0, 1):
            fragment = entry.get("expect", {}).get(command)
            if fragment and fragment not in result.stdout:
                problems.append(f"{command}: stdout lacks {fragment!r}")
        else:
            lines = result.stderr.split("\n")
            if result.stdout:
                problems.append(f"{command}: stdout is not empty")
            if len(lines) != 2 or not lines[0].startswith(f"zhin: error: {source}:{entry['line']}: ") or entry["error"] not in lines[0]:
                problems.append(f"{command}: stderr is not the one line 'zhin: error: {source}:{entry['line']}: …{entry['error']}…'")
        if problems and problems[-1].startswith(command):
            problems[-1] += f" ({seconds:.1f} s)\n    stdout: {result.stdout[-800:]!r}\n    stderr: {result.stderr[-800:]!r}"
    assert not problems, f"{name}:\n  " + "\n  ".join(problems)


def test_the_watchdog_fails_a_run_that_hangs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control for ``run_in_process``: a command that never returns becomes a failed run (a traceback and
    status 1, which test_preset_corpus_file reports), not a stuck test; a quick command under the same watchdog is
    untouched."""
    import zhin_cli._cli as cli

    monkeypatch.setattr(sys.modules[__name__], "TIMEOUT", 0.5)
    quick, _ = run_in_process(["preset", "lint", str(CORPUS / "preset" / "regex-growth.json")], tmp_path)
    assert "Traceback" not in quick.stderr
    monkeypatch.setattr(cli, "main", lambda: time.sleep(30))
    hung, seconds = run_in_process(["--version"], tmp_path)
    assert hung.returncode == 1 and "_Hung: still running after 0.5 s" in hung.stderr and seconds < 10


def test_a_benign_script_still_rewrites_next_to_a_skipped_one(tmp_path: Path, hostile_session: Path) -> None:
    """regex-unrolled-repeat.json: the refused script is skipped at import; "fine" (猫 → 狗) still runs."""
    result, _ = run(["trace", str(hostile_session), "--preset", str(CORPUS / "preset" / "regex-unrolled-repeat.json"), "--json"], tmp_path)
    assert result.returncode == 0, result.stderr
    body = json.dumps(json.loads(result.stdout)["requests"][0]["request"], ensure_ascii=False)
    assert "x" * 5000 + "狗" in body and "x" * 5000 + "猫" not in body


# -- generated: too big to commit -----------------------------------------------------------------------------


def _prompts(count: int) -> dict[str, Any]:
    return {"prompts": [{"identifier": f"p{i}", "name": "x", "content": "hi {{user}}", "system_prompt": True} for i in range(count)],
            "prompt_order": [{"character_id": 100001, "order": [{"identifier": "chatHistory"}] + [{"identifier": f"p{i}"} for i in range(count)]}]}


def test_generated_preset_with_20000_prompts_lints_in_seconds(tmp_path: Path) -> None:
    path = tmp_path / "many.json"
    path.write_text(json.dumps(_prompts(20_000), indent=2), encoding="utf-8")  # 3.5 MB; minutes before (quadratic)
    result, seconds = run(["preset", "lint", str(path), "--json"], tmp_path)
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert len([d for d in data["diagnostics"] if d["code"] == "never-sent"]) == 20_000 and seconds < TIMEOUT


def test_generated_preset_with_a_megabyte_role_reports_it_briefly(tmp_path: Path) -> None:
    path = tmp_path / "role.json"
    path.write_text(json.dumps({"prompts": [{"identifier": "a", "role": "r" * 1_000_000}]}), encoding="utf-8")
    result, _ = run(["preset", "lint", str(path), "--json"], tmp_path)
    assert result.returncode == 1, result.stderr
    [bad_role] = [d for d in json.loads(result.stdout)["diagnostics"] if d["code"] == "bad-role"]
    assert len(bad_role["message"]) < 300 and "rrrr" in bad_role["message"]
