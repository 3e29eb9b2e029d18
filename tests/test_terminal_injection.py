"""Input text never acts on a terminal or a CI log (issue 27 item 5).

One hostile string — ESC sequences (clear screen, cursor home, OSC window title), CR, LF, U+2028, a C1 CSI, bidi
controls, rich markup and GitHub workflow commands (``::error::``, ``::stop-commands::``, an indented ``::warning``,
the older ``##[error]``) — is put where each command reads input text that it prints: a session line's id, an ST chat's
``integrity``, a capture folder's file names, a capture's keys, a lorebook comment, an ST header's keys, a budget's
part names, a preset entry, an eval assertion, a request body's keys. Every such command runs (a) with pipes, in
this process, (b) as a real process on a terminal (a pty: rich draws colours, the progress bar and tables there)
and (c) under ``GITHUB_ACTIONS=true``, where zhin writes its own annotations. The output must hold no raw control
character, no line that input text starts and no workflow command but zhin's own annotations; and it must show the
hostile text (escaped), so the command did print it.

Negative controls: the detector flags the raw string and each of its parts; zhin's own annotations are still
written (and pass the detector) with ``GITHUB_ACTIONS=true``.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import termios
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from conftest import FIXTURES, clean_env, run_zhin

from zhin_cli.core.ghactions import Annotation, summary_cell
from zhin_cli.core.terminaltext import markup_safe, terminal_safe, terminal_safe_lines, unsafe_character

MARK = "PWN"  # every part of the hostile text begins with it: a line that starts with it was started by input
HOSTILE = ("\x1b[2J\x1b[H\x1b]0;PWN-title\x07"  # clear the screen, cursor home, set the window title
           "\rPWN-cr\nPWN-lf\u2028PWN-ls\x9b2JPWN-c1\u202ePWN-bidi\u2066PWN-isolate\u2069"
           "\n::error::PWN-cmd\n::stop-commands::PWN-token\n  ::warning file=x.py::PWN-indented"
           " ##[error]PWN-v1 [bold]PWN-markup[/bold]")
OWN_COMMANDS = {"error", "warning", "notice"}  # what zhin_cli.core.ghactions writes, titled by the gate
OWN_TITLE = re.compile(r"[ ,]title=(zhin (eval|budget|preset lint)|prefix-diff|request-diff)%3A")
# rich's own drawing on a terminal: colours, the progress bar's cursor moves and line erasing, cursor hide/show
OWN_SEQUENCES = re.compile(r"\x1b\[[0-9;]*m|\x1b\[[0-9]*[AK]|\x1b\[\?25[hl]")


# --- the detector ---------------------------------------------------------------------------------------------


def injections(text: str, *, terminal: bool = False) -> list[str]:
    """What in ``text`` (a command's output) input text did to a terminal or a CI log: raw control characters,
    lines it starts, workflow commands not zhin's own, markup rich read as a style. ``terminal``: text read from a
    pty, where zhin's own colours and progress bar are drawn and lines end in CR LF."""
    found: list[str] = []
    if terminal:
        text = OWN_SEQUENCES.sub("", text).replace("\r\n", "\n").replace("\r", "\n")
    found += [f"raw {ord(c):#x}" for c in sorted(set(text)) if c != "\n" and acts_on_a_terminal(c)]
    for line in text.split("\n"):
        start = line.lstrip()  # the runner trims leading white space before it looks for "::"
        if start.startswith(MARK):
            found.append(f"a line started by input: {line!r}")
        if start.startswith("::") and not own_annotation(start):
            found.append(f"a workflow command: {line!r}")
        if "##[" in line:  # the runner's older form, read anywhere in a line
            found.append(f"a ##[ command: {line!r}")
    if f"{MARK}-markup" in text and f"[bold]{MARK}-markup" not in text:
        found.append("rich markup from input read as a style")
    return found


def acts_on_a_terminal(character: str) -> bool:
    """The detector's own rule, from Unicode's tables (not the code under test): a control, a line or paragraph
    separator, or an explicit bidi formatting character."""
    return (unicodedata.category(character) in ("Cc", "Zl", "Zp")
            or unicodedata.bidirectional(character) in ("LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI"))


def own_annotation(line: str) -> bool:
    """A ``::error|warning|notice …,title=<a zhin gate>: …::message`` line: the command and title zhin writes (input
    text in it is escaped: it cannot end the head early, add a property or start a line)."""
    end = line.find("::", 2)
    head = line[2:end] if end >= 0 else line[2:]
    return end >= 0 and head.split(" ")[0] in OWN_COMMANDS and OWN_TITLE.search(head) is not None


def test_the_detector_flags_the_raw_text_and_each_of_its_parts() -> None:
    raw = injections(f"session: {HOSTILE}")
    assert {"raw 0x1b", "raw 0xd", "raw 0x7", "raw 0x2028", "raw 0x9b", "raw 0x202e", "raw 0x2066"} <= set(raw)
    assert any("started by input" in p for p in raw) and any("workflow command" in p and "stop-commands" in p for p in raw)
    assert any("##[" in p for p in raw)
    assert injections("  ::warning file=x.py::PWN-indented") and injections("ok ##[error]x")
    assert injections("[bold]", terminal=True) == [] and injections("PWN-markup")  # markup eaten by rich
    assert injections("\x1b[2Jx", terminal=True) == ["raw 0x1b"]  # a terminal's own colours aside, not a clear
    # negative controls: escaped text, zhin's own annotation and rich's own drawing pass
    assert injections(f"session: {terminal_safe(HOSTILE)}") == []
    assert all(unsafe_character(c) for c in map(chr, range(0x30000)) if acts_on_a_terminal(c))  # the code agrees
    assert injections("::error file=a.py,line=3,title=zhin eval%3A x::message " + terminal_safe(HOSTILE)) == []
    assert injections("::error file=a.py,line=3,title=zhin%3A x::message")  # not a gate's title
    assert injections("\x1b[1mbold\x1b[0m\r\n\x1b[?25l\x1b[2K\x1b[1A", terminal=True) == []


# --- the one escaping function ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "shown"), [
    ("\x1b[2J", "\\u001b[2J"), ("a\rb\nc\td", "a\\u000db\\u000ac\\u0009d"), ("\x9b\x7f\x00", "\\u009b\\u007f\\u0000"),
    ("\u2028\u2029", "\\u2028\\u2029"), ("\u202e\u2066\u2069\u200f\u200e\u061c", "\\u202e\\u2066\\u2069\\u200f\\u200e\\u061c"),
    ("::error::x", ":\\u003aerror:\\u003ax"), ("a:::b", "a:\\u003a:b"), ("##[error]x", "\\u0023#[error]x"),
    ("###[x", "#\\u0023#[x"), ("a\u200bb\u2060c\ufeffd\u206ae", "a\\u200bb\\u2060c\\ufeffd\\u206ae"),
])
def test_terminal_safe_escapes_each_kind(raw: str, shown: str) -> None:
    assert terminal_safe(raw) == shown
    assert terminal_safe(shown) == shown  # escaping twice changes nothing more


def test_terminal_safe_leaves_ordinary_text_alone() -> None:
    text = "qq:group:1 file.json:3: 中文 😀 👨‍👩‍👧 é # [x] ## #[ \\n [state change]"  # negative control
    assert terminal_safe(text) == text
    assert markup_safe("[bold]x") == "\\[bold]x" and markup_safe("\x1b") == "\\u001b"


def test_request_diff_excerpts_escape_workflow_commands_too() -> None:
    from zhin_cli.core.textdiff import readable

    assert readable("a\n##[error]x ::error::y") == "a\\n\\u0023#[error]x :\\u003aerror:\\u003ay"
    assert readable("qq:group:1 \\") == "qq:group:1 \\\\"  # negative control: one colon kept, a backslash doubled


def test_terminal_safe_lines_keeps_line_breaks_and_json_values() -> None:
    value = {"k::": ["\u2028##[e]\x1b", ":", "a\nb"], "::stop-commands::t": 1}
    document = json.dumps(value, ensure_ascii=False, indent=2)
    shown = terminal_safe_lines(document)
    assert json.loads(shown) == value and shown.count("\n") == document.count("\n")
    assert injections(shown) == [] and injections(document)  # negative control: the raw document is caught


def test_annotations_escape_input_and_keep_their_line_breaks() -> None:
    command = Annotation("error", f"first{HOSTILE}\nsecond", title=f"zhin eval: {HOSTILE}", file=f"f{HOSTILE}",
                         line=3).command()
    assert "\n" not in command and command.startswith("::error file=f")
    assert injections(command) == [] and "%0Asecond" in command  # the message's own line break: the runner's %0A
    assert "\\u001b[2J" in command and "\\u2028" in command  # shown, escaped
    assert injections(Annotation("error", HOSTILE).command().replace("%0A", "\n").replace("%0D", "\r"))  # control
    assert injections(summary_cell(HOSTILE)) == []


# --- every command that prints input text -----------------------------------------------------------------------


def hostile_session(folder: Path) -> Path:
    lines = (FIXTURES / "private-chat.jsonl").read_text(encoding="utf-8").splitlines()
    head = json.loads(lines[0])
    head["session_id"] = "s" + HOSTILE
    path = folder / "hostile.jsonl"
    path.write_text("\n".join([json.dumps(head, ensure_ascii=False), *lines[1:]]) + "\n", encoding="utf-8")
    return path


def hostile_group(folder: Path) -> Path:
    """The busy group with the hostile text as its name, an admin's id and the model of every logged request."""
    lines = [json.loads(line) for line in (FIXTURES / "group-busy.jsonl").read_text(encoding="utf-8").splitlines()]
    lines[0]["scene"] |= {"scene_name": "group" + HOSTILE, "admins": ["admin" + HOSTILE]}
    for line in lines:
        if line.get("role") == "assistant" and "model" in line:
            line["model"] = "model" + HOSTILE
        if line.get("type") == "scene":  # the facts an import stores are those the last scene line leaves
            line |= {"scene_name": "group" + HOSTILE, "admins": ["admin" + HOSTILE]}
    path = folder / "group.jsonl"
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    return path


def group_facts(folder: Path) -> list[object]:
    database = folder / "group.sqlite"
    assert run_zhin("import", hostile_group(folder), "--db", database, cwd=folder).returncode == 0
    return ["facts", "show", json.loads((folder / "group.jsonl").read_text(encoding="utf-8").split("\n")[0])["session_key"],
            "--db", database]


def st_chat(folder: Path) -> Path:
    lines = (FIXTURES / "st" / "chat.jsonl").read_text(encoding="utf-8").splitlines()
    head = json.loads(lines[0])
    head["chat_metadata"]["integrity"] = HOSTILE
    path = folder / "st-chat.jsonl"
    path.write_text("\n".join([json.dumps(head, ensure_ascii=False), *lines[1:]]) + "\n", encoding="utf-8")
    return path


def capture_folder(folder: Path) -> Path:
    """ST's captures, one with a sampling key named by the hostile text, and a stray file named by it."""
    captures = folder / "captured"
    shutil.copytree(FIXTURES / "st" / "captured", captures)
    (captures / ("stray" + HOSTILE.replace("/", "_"))).write_text("x", encoding="utf-8")
    first = sorted(captures.glob("*-chat-completions.json"))[0]
    body = json.loads(first.read_text(encoding="utf-8"))
    body["sampling" + HOSTILE] = 1
    first.write_text(json.dumps(body, ensure_ascii=False), encoding="utf-8")
    return captures


def hostile_lore(folder: Path) -> Path:
    """The fixture lorebook plus a keyword-triggered entry whose comment is the hostile text (a note names it)."""
    lore = json.loads((FIXTURES / "st" / "lore.json").read_text(encoding="utf-8"))
    entry = {**next(iter(lore["entries"].values())), "uid": 99, "constant": False, "comment": "lore" + HOSTILE}
    lore["entries"]["99"] = entry
    path = folder / "lore.json"
    path.write_text(json.dumps(lore, ensure_ascii=False), encoding="utf-8")
    return path


def check_capture(folder: Path) -> list[object]:
    st = FIXTURES / "st"
    return ["preset", "check-capture", capture_folder(folder), "--preset", st / "preset.json", "--chat",
            st / "chat.jsonl", "--card", st / "card.json", "--lore", hostile_lore(folder)]


def bad_st_header(folder: Path) -> list[object]:
    """An ST chat whose first line is no header: the error line lists its keys."""
    chat = folder / "bad-chat.jsonl"
    chat.write_text(json.dumps({HOSTILE: 1}, ensure_ascii=False) + "\n", encoding="utf-8")
    st = FIXTURES / "st"
    return ["preset", "check-capture", st / "captured", "--preset", st / "preset.json", "--chat", chat]


def budget(folder: Path) -> list[object]:
    path = folder / "budget.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "sessions": [str(FIXTURES / "private-chat.jsonl")], "profiles": [
        {"provider": "openai", "parts": {"core.rules": 1, "gone" + HOSTILE: 5}}]}, allow_unicode=True), encoding="utf-8")
    return ["budget", "check", "-f", path]


def preset(folder: Path) -> Path:
    data = json.loads((FIXTURES / "presets" / "st-default.json").read_text(encoding="utf-8"))
    data["prompts"][0]["name"] = "entry" + HOSTILE
    data["prompts"][0]["content"] = "{{bogus" + HOSTILE + "}}"
    path = folder / "preset.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def eval_cases(folder: Path) -> list[object]:
    cases = yaml.safe_load((Path(__file__).resolve().parent.parent / "eval_cases" / "adr-1-ten-messages.yaml").read_text(encoding="utf-8"))
    case = {**cases["cases"][0], "id": "case.hostile", "assertions": [{"type": "line_present", "line": "absent" + HOSTILE}]}
    path = folder / "cases.yaml"
    path.write_text(yaml.safe_dump({**cases, "cases": [case]}, allow_unicode=True), encoding="utf-8")
    return ["eval", path]


def request_bodies(folder: Path) -> list[object]:
    a, b = folder / "a.json", folder / "b.json"
    a.write_text(json.dumps({"model": "m", "messages": [{"role": "user", "content": "a" + HOSTILE}], "k" + HOSTILE: 1},
                            ensure_ascii=False), encoding="utf-8")
    b.write_text(json.dumps({"model": "m", "messages": [{"role": "user", "content": "b" + HOSTILE}]}, ensure_ascii=False),
                 encoding="utf-8")
    return ["request-diff", a, b]


def imported(folder: Path) -> Path:
    database = folder / "data.sqlite"
    assert run_zhin("import", hostile_session(folder), "--db", database, cwd=folder).returncode == 0
    return database


COMMANDS: dict[str, Callable[[Path], list[object]]] = {
    "trace": lambda d: ["trace", hostile_session(d)],
    "trace --all": lambda d: ["trace", hostile_session(d), "--all"],
    "trace --json": lambda d: ["trace", hostile_session(d), "--json"],
    "trace --jsonl": lambda d: ["trace", hostile_session(d), "--jsonl"],
    "trace ST integrity": lambda d: ["trace", st_chat(d)],
    "prefix-diff": lambda d: ["prefix-diff", hostile_session(d)],
    "prefix-diff --jsonl": lambda d: ["prefix-diff", hostile_session(d), "--jsonl"],
    "report economy": lambda d: ["report", "economy", hostile_session(d)],
    "preset check-capture": check_capture,
    "zhin: error: (ST header keys)": bad_st_header,
    "budget check": budget,
    "preset lint": lambda d: ["preset", "lint", preset(d)],
    "preset probe": lambda d: ["preset", "probe", preset(d), "--session", hostile_session(d)],
    "eval": eval_cases,
    "request-diff": request_bodies,
    "import": lambda d: ["import", hostile_session(d), "--db", d / "data.sqlite"],
    "sessions": lambda d: ["sessions", "--db", imported(d)],
    "export": lambda d: ["export", "s" + HOSTILE, "--db", imported(d)],
    "facts show": group_facts,
    "stats cache": lambda d: ["stats", "cache", hostile_group(d)],
}


def shown_and_clean(output: str, *, terminal: bool = False) -> None:
    assert "Traceback" not in output, output[-2000:]
    assert f"{MARK}-" in output, output[-2000:]  # the command did print the hostile text (escaped)
    assert injections(output, terminal=terminal) == [], output[-3000:]


@pytest.mark.parametrize("name", COMMANDS)
def test_piped_output_holds_no_control_and_no_workflow_command(name: str, tmp_path: Path) -> None:
    proc = run_zhin(*COMMANDS[name](tmp_path), cwd=tmp_path)
    shown_and_clean(proc.stdout + "\n" + proc.stderr)


def run_on_terminal(args: list[object], cwd: Path, columns: int = 160) -> tuple[int, str]:
    """``python -m zhin_cli ARGS`` with stdin, stdout and stderr on one pty ``columns`` wide; (status, what the
    terminal received)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {**clean_env(), "TERM": "xterm-256color"}
    env.pop("NO_COLOR")  # colours on: what a person sees
    proc = subprocess.Popen([sys.executable, "-m", "zhin_cli", *map(str, args)], cwd=cwd, env=env, stdin=follower,
                            stdout=follower, stderr=follower)
    os.close(follower)
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # the process closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    return proc.wait(timeout=120), b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.parametrize("name", COMMANDS)
def test_terminal_output_holds_no_control_of_input(name: str, tmp_path: Path) -> None:
    _, received = run_on_terminal(COMMANDS[name](tmp_path), tmp_path)
    shown_and_clean(received, terminal=True)


def test_the_terminal_run_is_a_terminal(tmp_path: Path) -> None:
    """Control of the pty runner: rich draws there (bold, the progress bar), and the raw text is caught there."""
    _, received = run_on_terminal(["trace", hostile_session(tmp_path)], tmp_path)
    assert "\x1b[1m" in received and "\x1b[?25l" in received and "\r\n" in received
    assert injections(received + HOSTILE, terminal=True)


@pytest.mark.parametrize("name", COMMANDS)
def test_github_actions_log_holds_only_zhins_own_commands(name: str, tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    env = {**clean_env(), "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    proc = run_zhin(*COMMANDS[name](tmp_path), cwd=tmp_path, env=env)
    shown_and_clean(proc.stdout + "\n" + proc.stderr)
    if summary.exists():
        assert injections(summary.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(("name", "level", "quoted"), [("budget check", "error", False), ("eval", "error", True),
                                                       ("preset lint", "warning", True), ("request-diff", "error", True)])
def test_zhins_own_annotations_are_still_written(name: str, level: str, quoted: bool, tmp_path: Path) -> None:
    """Negative control of the CI check: zhin's annotations, with the hostile text escaped in them, are there."""
    env = {**clean_env(), "GITHUB_ACTIONS": "true"}
    lines = run_zhin(*COMMANDS[name](tmp_path), cwd=tmp_path, env=env).stderr.splitlines()
    annotations = [line for line in lines if line.startswith(f"::{level} file=")]
    assert annotations and all(own_annotation(line) for line in annotations)
    assert any(f"{MARK}-title" in line for line in annotations) == quoted  # the input text, escaped
    plain = run_zhin(*COMMANDS[name](tmp_path), cwd=tmp_path).stderr
    assert not any(line.startswith("::") for line in plain.splitlines())  # none without GITHUB_ACTIONS
