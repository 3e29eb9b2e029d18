"""docs/sillytavern.md says things about the code that no shell block checks: which options check-capture takes,
what ``zhin serve`` answers to ST's ``GET /v1/models``, and which exit status means what. Each is checked here
against the code, so the page cannot drift from it. (Its ```sh blocks run in tests/test_shell_blocks.py.)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from enum import Enum
from pathlib import Path
from typing import Any

import typer

from zhin_cli._cli import app
from zhin_cli.cache import PrefixCache
from zhin_cli.tools.serve.server import answer

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "sillytavern.md"
GOLDEN = ROOT / "tests" / "st_golden"
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z-]*")
CHOICES = re.compile(r"--post-processing ([a-z]+(?:\|[a-z]+)+)")


def _flat(text: str) -> str:
    return " ".join(text.split())


def _command_lines(text: str) -> list[str]:
    """Every line of the page (any fence or prose) that gives a check-capture command, with its continuation."""
    joined = text.replace("\\\n", " ")
    return [line for line in joined.splitlines() if "zhin preset check-capture" in line]


def _check_capture() -> Any:
    """The command as typer builds it (typer vendors click: only its duck type is used here)."""
    root: Any = typer.main.get_command(app)
    return root.commands["preset"].commands["check-capture"]


def unknown_options(lines: list[str], known: set[str]) -> list[str]:
    return sorted({option for line in lines for option in OPTION.findall(line.split(" # ", 1)[0])} - known)


def test_every_option_the_page_gives_check_capture_is_one_of_its_options() -> None:
    command = _check_capture()
    known = {name for param in command.params for name in getattr(param, "opts", ()) if name.startswith("--")}
    sources = [DOC.read_text(encoding="utf-8"), (ROOT / "docs" / "use.md").read_text(encoding="utf-8")]
    lines = [line for text in sources for line in _command_lines(text)]
    assert len(lines) >= 4  # the page's template, its two golden runs and docs/use.md's line
    assert unknown_options(lines, known) == []
    # negative control: an option the command does not have is caught
    assert unknown_options(["zhin preset check-capture c/ --presett p.json --json"], known) == ["--presett"]


def test_the_post_processing_values_the_page_lists_are_the_commands() -> None:
    (param,) = [p for p in _check_capture().params if "--post-processing" in getattr(p, "opts", ())]
    annotation = param.type_descriptor.annotation  # typer 0.29 keeps the Enum the option was declared with
    choices = [member.value for member in annotation] if isinstance(annotation, type) and issubclass(annotation, Enum) else None
    assert choices, "--post-processing is not a choice"
    listed = CHOICES.findall(DOC.read_text(encoding="utf-8"))
    assert listed, "the page lists no --post-processing values"
    for values in listed:
        assert set(values.split("|")) <= set(choices), values


def test_zhin_serve_answers_get_models_as_the_page_says() -> None:
    """ST's Connect asks GET <base URL>/models; the page says zhin serve answers 404 `Invalid URL (GET /v1/models)`."""
    reply = answer("/v1/models", b"", provider="openai", cache=PrefixCache(), method="GET")
    assert reply.status == 404 and reply.body is not None
    message = reply.body["error"]["message"]
    assert message == "Invalid URL (GET /v1/models)"
    page = _flat(DOC.read_text(encoding="utf-8"))
    assert f"answers that GET with 404 (`{message}`" in page
    # negative control: the route the page says chatting uses is answered
    body = (GOLDEN / "runs" / "plain" / "request-01.json").read_bytes()
    assert answer("/v1/chat/completions", body, provider="openai", cache=PrefixCache()).status == 200


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "zhin_cli", "preset", "check-capture", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_the_exit_table_is_what_check_capture_does(tmp_path: Path) -> None:
    """The page's table: 2 usage, 3 an unreadable file (one line naming it), 0 no departure, 1 departures."""
    page = _flat(DOC.read_text(encoding="utf-8"))
    for row in ("| 0 | no departure |", "| 1 | at least one departure |", "| 2 | usage:", "| 3 | cannot run:"):
        assert row in page, row
    captured = tmp_path / "captured"
    captured.mkdir()
    (captured / "00001-chat-completions.json").write_bytes((GOLDEN / "runs" / "plain" / "request-01.json").read_bytes())
    common = ["--preset", str(GOLDEN / "content" / "golden-preset.json"), "--card",
              str(GOLDEN / "content" / "golden-card.json"), "--lore", str(GOLDEN / "content" / "golden-lore.json"),
              "--persona", "Sol Reyes", "--persona-description",
              json.loads((GOLDEN / "content" / "golden-persona.json").read_text(encoding="utf-8"))["description"]]
    chat = str(GOLDEN / "runs" / "plain" / "chat.jsonl")
    usage = _run(str(captured), "--chat", chat, *common, "--post-processing", "sideways")
    assert usage.returncode == 2, usage.stderr
    broken = tmp_path / "chat.jsonl"
    broken.write_text('{"chat_metadata": {}, "user_name": "unused"\n', encoding="utf-8")
    unreadable = _run(str(captured), "--chat", str(broken), *common)
    assert unreadable.returncode == 3, unreadable.stderr
    assert unreadable.stderr.startswith("zhin: error: ") and str(broken) in unreadable.stderr
    assert "Traceback" not in unreadable.stderr and unreadable.stderr.count("\n") == 1
    clean = _run(str(captured), "--chat", chat, *common)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    # negative control: the same capture with one character of the first entry changed departs (exit 1)
    body = (captured / "00001-chat-completions.json").read_text(encoding="utf-8")
    assert "quiet conversation" in body
    (captured / "00001-chat-completions.json").write_text(body.replace("quiet conversation", "quick conversation", 1),
                                                         encoding="utf-8")
    departed = _run(str(captured), "--chat", chat, *common)
    assert departed.returncode == 1, departed.stdout + departed.stderr
