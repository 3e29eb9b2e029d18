"""`zhin prefix-diff` as people and CI read it (issue 17 §3–§5): the per-turn picture, collapsed breaks, the
marked divergence, why a shared prefix cached nothing, ``--jsonl``, whole identifiers, GitHub annotations.

Every behaviour has a negative control: the case that must not trigger it.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from builders import T0, History, replay
from conftest import clean_env, run_zhin
from rich.console import Console

from zhin_cli._cli.prefix_diff import BAR_MAX, CACHED, NEW, SHARED, print_result
from zhin_cli.cache.diff import PairDiff, SessionDiff, diff_pair
from zhin_cli.core.terminaltext import MARK, terminal_safe
from zhin_cli.pipeline.provenance import segment_sources
from zhin_cli.tools.diff.prefix import PrefixDiffResult

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
BUSY = str(FIXTURES / "group-busy.jsonl")
PRIVATE = str(FIXTURES / "private-chat.jsonl")
BUSY_ID = "icqq:8596238:group:1048877509#1761699600000-1"
ROW = re.compile(r"^[✗ ] (\d+)→(\d+) ")
PYTHON_VALUE = re.compile(r"\b(None|True|False)\b|\[\s*'|'\s*\]|\{\s*'")
DEFAULT_FAIL_ON = ["system_changed", "tools_changed", "messages_changed", "model_changed"]


def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = clean_env()
    environment.update(env or {})
    return run_zhin(*args, cwd=cwd, env=environment)


def write_clock(tmp_path: Path) -> Path:
    """``tmp_path/clock``: a zhin.yaml whose plugin segment prints the minute of the newest message, a break on most
    turns (``tmp_path`` itself, without a zhin.yaml, is for negative controls)."""
    folder = tmp_path / "clock"
    folder.mkdir()
    (folder / "clock.py").write_text(
        "from datetime import datetime, timezone\n"
        "class Clock:\n"
        "    id, kind, weight, retention = 'plugin.clock', 'environment', 1, 'required'\n"
        "    def inject(self, input):\n"
        "        return 'Now: ' + datetime.fromtimestamp(input.history[-1].timestamp / 1000, tz=timezone.utc).strftime('%H:%M')\n"
        "def register(generation):\n"
        "    generation.register(Clock())\n",
        encoding="utf-8",
    )
    (folder / "zhin.yaml").write_text("plugins: ['clock.py:register']\n", encoding="utf-8")
    return folder


def pair(to: int, cause: str = "tail", segment: str | None = None, *, common: int = 1900, cached: int = 1792,
         prompt: int = 2000, detail: str = "") -> PairDiff:
    return PairDiff(from_turn=to - 1, to_turn=to, cause=cause, common_prefix_bytes=700 + to, common_prefix_tokens=common,
                    prompt_tokens=prompt, message_index=0, segment=segment, before='"Now: 09:1" more', after='"Now: 09:2" more',
                    cached_tokens=cached, cache_hit=cached > 0, detail=detail, excerpt_mark=9)


def render(result: PrefixDiffResult, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, no_color=True, highlight=False, color_system=None)
    print_result(console, result)
    return console.file.getvalue()  # type: ignore[attr-defined]


def turns_result(*pairs: PairDiff, session_id: str = BUSY_ID) -> PrefixDiffResult:
    session = SessionDiff(session_id, "openai", "gpt-4o", turns=len(pairs) + 1, pairs=list(pairs))
    return PrefixDiffResult("turns", list(DEFAULT_FAIL_ON), sessions=[session])


# --- collapse ---------------------------------------------------------------------------------------


def test_fifteen_identical_breaks_are_one_line_two_different_ones_two() -> None:
    clock = [pair(t, "system_changed", "core.clock", cached=0, common=300) for t in range(3, 18)]
    text = render(turns_result(*clock, pair(18, "system_changed", "core.date", cached=0, common=300)), 100)
    breaks = [line for line in text.splitlines() if line.startswith("✗ ") and not ROW.match(line)]
    assert breaks == [
        "✗ 15 × system_changed in core.clock (requests 3–17; first shown): request 2→3 differs at byte 703",
        "✗ system_changed in core.date (request 18): request 17→18 differs at byte 718",
    ]
    assert text.count("before: ") == 2  # the first of each group only
    # every turn keeps its row
    assert [int(m.group(2)) for m in map(ROW.match, text.splitlines()) if m] == list(range(3, 19))


def test_the_clock_plugin_breaks_are_one_collapsed_line(tmp_path: Path) -> None:
    result = run("--allow-plugins", "prefix-diff", BUSY, cwd=write_clock(tmp_path))
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert [line for line in lines if "× system_changed" in line] == [
        "✗ 13 × system_changed in plugin.clock (requests 2–6, 8–11, 13–16; first shown): request 1→2 differs at byte 784"]
    assert result.stdout.count("before: ") == 1
    rows = [m for m in map(ROW.match, lines) if m]
    assert len(rows) == 15 and sum(line.startswith("✗ ") and bool(ROW.match(line)) for line in lines) == 13
    # negative control: the same session without the plugin has no break line at all
    plain = run("prefix-diff", BUSY, cwd=tmp_path)
    assert plain.returncode == 0 and "× system_changed" not in plain.stdout and "before: " not in plain.stdout


# --- the divergence, marked ---------------------------------------------------------------------------


def test_the_mark_stands_before_the_first_differing_character_even_inside_a_shared_utf8_byte() -> None:
    h = History()
    h.user(T0, "10002", "hi", display_name="小明")
    h.assistant(T0 + 1000, "r")
    old = replay(h.session(), {"segments": {"add": [{"id": "house.rules", "kind": "system", "text": "规则：你好"}]}})[-1]
    new = replay(h.session(), {"segments": {"add": [{"id": "house.rules", "kind": "system", "text": "规则：他好"}]}})[-1]
    result = diff_pair(old, new)
    assert "你".encode()[0] == "他".encode()[0]  # the two characters share their first byte
    assert result.before[result.excerpt_mark] == "你" and result.after[result.excerpt_mark] == "他"
    assert result.before[: result.excerpt_mark] == result.after[: result.excerpt_mark]
    assert "\ufffd" not in result.before + result.after
    assert result.marked_before.endswith(MARK + result.before[result.excerpt_mark :]) and MARK + "你" in result.marked_before
    # negative control: the same configuration on both sides differs nowhere before the end
    same = diff_pair(old, replay(h.session(), {"segments": {"add": [{"id": "house.rules", "kind": "system", "text": "规则：你好"}]}})[-1])
    assert same.cause == "append" and same.before == same.after


def test_excerpts_in_text_carry_the_mark(tmp_path: Path) -> None:
    lines = run("--allow-plugins", "prefix-diff", BUSY, cwd=write_clock(tmp_path)).stdout.splitlines()
    before = next(line for line in lines if line.lstrip().startswith("before:"))
    after = next(line for line in lines if line.lstrip().startswith("after:"))
    assert "Now: 0" + MARK + "1:11" in before and "Now: 0" + MARK + "2:43" in after


def test_excerpts_are_shown_verbatim_whatever_markup_they_resemble() -> None:
    tricky = PairDiff(from_turn=1, to_turn=2, cause="system_changed", common_prefix_bytes=6, common_prefix_tokens=1,
                      prompt_tokens=10, message_index=0, segment="x", before='ab\\\\[red]c', after='ab\\\\[/]d',
                      cached_tokens=0, cache_hit=False, excerpt_mark=4)
    text = render(turns_result(tricky), 100)
    assert "before: …ab\\\\" + MARK + "[red]c…" in text and "after:  …ab\\\\" + MARK + "[/]d…" in text


def test_printable_escapes_terminal_controls_and_leaves_text_alone() -> None:
    assert terminal_safe("a\x9bb\u202ec\u2028d\x7f") == "a\\u009bb\\u202ec\\u2028d\\u007f"
    text = "中文 😀 é \\n [state change] 👨‍👩‍👧"  # negative control: CJK, emoji (with joiners), JSON escapes
    assert terminal_safe(text) == text


# --- why 0 cached ---------------------------------------------------------------------------------


def test_zero_cached_is_explained_for_a_short_prompt_and_not_for_a_long_one(tmp_path: Path) -> None:
    short = run("prefix-diff", PRIVATE, cwd=tmp_path)
    assert "below OpenAI's 1,024-token minimum" in short.stdout
    document = json.loads(run("prefix-diff", PRIVATE, "--json", cwd=tmp_path).stdout)
    reasons = [p["cache"]["uncached_reason"] for p in document["sessions"][0]["pairs"]]
    assert reasons and all(r is not None and r["code"] == "below_minimum" for r in reasons)

    long_text = "规则。" * 700  # > 1,024 tokens of stable system prompt
    (tmp_path / "zhin.yaml").write_text(json.dumps({"segments": {"add": [{"id": "long", "kind": "system", "text": long_text}]}}),
                                        encoding="utf-8")
    long = run("prefix-diff", PRIVATE, cwd=tmp_path)
    assert "0 cached" not in long.stdout and "minimum" not in long.stdout
    pairs = json.loads(run("prefix-diff", PRIVATE, "--json", cwd=tmp_path).stdout)["sessions"][0]["pairs"]
    assert all(p["cache"]["cached_tokens"] > 0 and p["cache"]["uncached_reason"] is None for p in pairs)


def test_anthropic_reasons_come_from_its_breakpoint_rules(tmp_path: Path) -> None:
    document = json.loads(run("prefix-diff", BUSY, "--provider", "anthropic", "--json", cwd=tmp_path).stdout)
    pairs = document["sessions"][0]["pairs"]
    codes = {p["to_turn"]: (p["cache"]["uncached_reason"] or {}).get("code") for p in pairs}
    assert codes[2] == "below_minimum"  # the first request's breakpoints end below 1,024 tokens: nothing written
    assert codes[8] == codes[9] == "before_breakpoint"  # the window moved before the first breakpoint
    assert all(codes[p["to_turn"]] is None for p in pairs if p["cache"]["cached_tokens"] > 0)  # negative control


# --- --jsonl ------------------------------------------------------------------------------------------


def test_jsonl_is_one_object_per_pair_equal_to_json(tmp_path: Path) -> None:
    document = json.loads(run("prefix-diff", BUSY, "--json", cwd=tmp_path).stdout)
    streamed = run("prefix-diff", BUSY, "--jsonl", cwd=tmp_path)
    assert streamed.returncode == 0 and streamed.stderr == ""
    lines = [json.loads(line) for line in streamed.stdout.splitlines()]
    assert len(lines) == document["sessions"][0]["summary"]["pairs"] == 15
    assert lines == document["sessions"][0]["pairs"]


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_jsonl_of_several_sessions_in_order(tmp_path: Path, jobs: str) -> None:
    files = [BUSY, PRIVATE, str(FIXTURES / "legacy-upstream.jsonl")]
    document = json.loads(run("prefix-diff", *files, "--json", "-j", jobs, cwd=tmp_path).stdout)
    streamed = [json.loads(line) for line in run("prefix-diff", *files, "--jsonl", "-j", jobs, cwd=tmp_path).stdout.splitlines()]
    assert streamed == [p for session in document["sessions"] for p in session["pairs"]]
    assert [p["session_id"] for p in streamed] == [s["session_id"] for s in document["sessions"] for _ in s["pairs"]]


def test_jsonl_with_base_head_is_one_object_per_session(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("segments: {add: [{id: house.rules, kind: system, text: 'Be kind.'}]}\n", encoding="utf-8")
    (tmp_path / "head.yaml").write_text("segments: {add: [{id: house.rules, kind: system, text: 'Be brief.'}]}\n", encoding="utf-8")
    args = ("prefix-diff", BUSY, PRIVATE, "--base", "base.yaml", "--head", "head.yaml")
    document = json.loads(run(*args, "--json", cwd=tmp_path).stdout)
    streamed = [json.loads(line) for line in run(*args, "--jsonl", cwd=tmp_path).stdout.splitlines()]
    assert len(streamed) == 2 and streamed == document["sessions"]


def test_json_and_jsonl_together_is_a_usage_error(tmp_path: Path) -> None:
    both = run("prefix-diff", PRIVATE, "--json", "--jsonl", cwd=tmp_path)
    assert (both.returncode, both.stdout, both.stderr) == (2, "", "zhin: error: --json and --jsonl: choose one\n")
    for flag in ("--json", "--jsonl"):  # negative control: either alone is fine
        assert run("prefix-diff", PRIVATE, flag, cwd=tmp_path).returncode == 0


def test_jsonl_into_a_pipe_closed_after_one_line_exits_0_quietly(tmp_path: Path) -> None:
    env = clean_env()
    env["PYTHONPATH"] = str(ROOT)
    process = subprocess.Popen([sys.executable, "-m", "zhin_cli", "prefix-diff", BUSY, "--jsonl"], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert process.stdout is not None and process.stderr is not None
    first = json.loads(process.stdout.readline())
    assert first["to_turn"] == 2  # the first pair arrived while the replay went on (streamed, not at the end)
    process.stdout.close()  # `| head -1`
    assert process.wait(timeout=120) == 0
    assert process.stderr.read() == b""


# --- whole identifiers, human values, the bar, the legend -------------------------------------------------


@pytest.mark.parametrize("width", [60, 100])
def test_identifiers_are_never_cut(width: int) -> None:
    session_id = "icqq:8596238:group:1048877509#1761699600000-1/a-very-long-branch-name-indeed"  # 75 characters
    segment = "plugin.an-unusually-long-segment-identifier"
    result = turns_result(pair(2, "append"), pair(3, "system_changed", segment, cached=0, common=500),
                          pair(4, "window_shift", "history.state", detail="tail limit", cached=0, common=200),
                          session_id=session_id)
    text = render(result, width)
    assert session_id in text and segment in text and "(tail limit)" in text
    assert not PYTHON_VALUE.search(text)
    for line in text.splitlines():
        if line.lstrip().startswith(("before:", "after:")):
            continue  # excerpts are data, shown unwrapped
        assert len(line) <= width or line.strip() in (session_id, segment, f"in {segment}"), line


@pytest.mark.parametrize("columns", ["60", "100"])
def test_identifiers_are_whole_through_the_cli(tmp_path: Path, columns: str) -> None:
    text = run("--allow-plugins", "prefix-diff", BUSY, cwd=write_clock(tmp_path), env={"COLUMNS": columns}).stdout
    assert BUSY_ID in text and "plugin.clock" in text and not PYTHON_VALUE.search(text)


def test_the_bar_shows_cached_shared_and_new_tokens() -> None:
    text = render(turns_result(pair(2, "append", common=1000, cached=1000, prompt=1000),
                               pair(3, "tail", common=500, cached=0, prompt=1000)), 100)
    rows = [line for line in text.splitlines() if ROW.match(line)]
    assert CACHED * BAR_MAX in rows[0] and SHARED not in rows[0] and NEW not in rows[0]
    assert CACHED not in rows[1] and SHARED in rows[1] and NEW in rows[1]  # negative control: nothing cached


def test_the_legend_names_each_cause_present_once(tmp_path: Path) -> None:
    text = run("prefix-diff", BUSY, cwd=tmp_path).stdout
    legend = [line.split()[:2] for line in text.splitlines() if re.match(r"^  [a-z_]+ +(expected|✗)", line)]
    assert legend == [["append", "expected"], ["tail", "expected"], ["window_shift", "expected"]]
    unstable = run("--allow-plugins", "prefix-diff", BUSY, cwd=write_clock(tmp_path)).stdout
    assert re.search(r"^  system_changed  ✗ unexpected  ", unstable, re.M)
    assert not re.search(r"^  tools_changed ", unstable, re.M)  # absent causes are not explained


# --- header line ------------------------------------------------------------------------------------------


def test_the_header_names_the_config_in_text_mode_only(tmp_path: Path) -> None:
    (tmp_path / "zhin.yaml").write_text("{}\n", encoding="utf-8")
    assert run("prefix-diff", PRIVATE, cwd=tmp_path).stderr == "config: zhin.yaml\n"
    assert run("prefix-diff", PRIVATE, "--json", cwd=tmp_path).stderr == ""
    assert run("prefix-diff", PRIVATE, "--jsonl", cwd=tmp_path).stderr == ""


def test_the_header_names_the_database_a_session_id_was_read_from(tmp_path: Path) -> None:
    assert run("import", PRIVATE, "--db", str(tmp_path / ".zhin" / "data.sqlite"), cwd=tmp_path).returncode == 0
    (tmp_path / "sub").mkdir()
    stored = run("prefix-diff", "icqq:8596238:private:10002", cwd=tmp_path / "sub")
    assert stored.returncode == 0 and stored.stderr == "config: none (built-in defaults) · db: ../.zhin/data.sqlite\n"
    # negative control: a session read from a file names no database
    assert run("prefix-diff", PRIVATE, cwd=tmp_path / "sub").stderr == "config: none (built-in defaults)\n"


# --- GitHub Actions ---------------------------------------------------------------------------------------


def annotations(stderr: str, level: str = "error") -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(f"::{level} ")]


def test_every_unexpected_break_is_an_annotation_at_the_plugin_file(tmp_path: Path) -> None:
    clock = write_clock(tmp_path)
    summary = tmp_path / "summary.md"
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    result = run("--allow-plugins", "prefix-diff", BUSY, "--json", cwd=clock, env=env)
    document = json.loads(result.stdout)
    errors = annotations(result.stderr)
    assert len(errors) == document["unexpected"] == 13
    assert all(line.startswith("::error file=clock.py,line=3,title=prefix-diff%3A system_changed in plugin.clock::")
               for line in errors)
    assert f"| {BUSY_ID} | 15 | system_changed 13 | 13.2% |" in summary.read_text(encoding="utf-8")
    # negative controls: outside GitHub Actions nothing; a stable configuration, no annotation and "none"
    assert "::" not in run("--allow-plugins", "prefix-diff", BUSY, "--json", cwd=clock).stderr
    clean = run("prefix-diff", BUSY, cwd=tmp_path, env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(tmp_path / "s.md")})
    assert annotations(clean.stderr) == [] and f"| {BUSY_ID} | 15 | none | 69.1% |" in (tmp_path / "s.md").read_text(encoding="utf-8")


def test_base_head_annotates_each_changed_segment_at_its_config_line(tmp_path: Path) -> None:
    common = "    - id: house.same\n      kind: system\n      text: Unchanged.\n"
    (tmp_path / "base.yaml").write_text("segments:\n  add:\n" + common + "    - id: house.rules\n      kind: system\n      text: Be kind.\n",
                                        encoding="utf-8")
    (tmp_path / "head.yaml").write_text("segments:\n  add:\n" + common + "    - id: house.rules\n      kind: system\n      text: Be brief.\n",
                                        encoding="utf-8")
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(tmp_path / "s.md")}
    result = run("prefix-diff", PRIVATE, "--base", "base.yaml", "--head", "head.yaml", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    notices = annotations(result.stderr, "notice")
    assert len(notices) == 1 and notices[0].startswith("::notice file=head.yaml,line=6,title=prefix-diff%3A house.rules changed::")
    assert "house.same" not in result.stderr  # negative control: the unchanged segment is not annotated
    assert annotations(result.stderr) == []
    assert "house.rules (changed" in (tmp_path / "s.md").read_text(encoding="utf-8")


def test_segment_sources_of_builtin_and_unknown_segments() -> None:
    from zhin_cli.pipeline.config import Config
    from zhin_cli.pipeline.facade import Pipeline

    with Pipeline.open(Config()) as pipeline:
        sources = segment_sources(pipeline, ["core.rules", "no.such.segment", None])
    assert list(sources) == ["core.rules"]
    source = sources["core.rules"]
    assert source.file is not None and source.file.endswith(os.path.join("segments", "builtin.py")) and source.line
    assert '"core.rules"' in Path(source.file).read_text(encoding="utf-8").splitlines()[source.line - 1]


def test_a_git_ref_plugin_segment_is_annotated_at_the_checkout_file(tmp_path: Path) -> None:
    """A ref's files are read from a temporary tree; the annotation names the file in the checkout."""
    from test_prefix_diff import git

    repo = tmp_path / "bot"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    (repo / "persona.py").write_text(
        "from zhin_cli.pipeline.segments import TextSegment\n"
        "def register(generation):\n"
        "    generation.register(TextSegment('plugin.persona', 'role_rules', 'You like cats.', weight=5))\n"
        "    generation.register(TextSegment('plugin.same', 'role_rules', 'Unchanged.', weight=1))\n",
        encoding="utf-8")
    (repo / "zhin.yaml").write_text("plugins: ['persona.py:register']\n", encoding="utf-8")
    git("add", "-A", cwd=repo)
    git("commit", "-qm", "v1", cwd=repo)
    (repo / "persona.py").write_text((repo / "persona.py").read_text(encoding="utf-8").replace("cats", "cats and dogs"), encoding="utf-8")
    git("commit", "-qam", "v2", cwd=repo)
    result = run("--allow-ref-plugins", "prefix-diff", PRIVATE, "--base", "HEAD~1", "--head", "main", cwd=repo,
                 env={"GITHUB_ACTIONS": "true"})
    assert result.returncode == 0, result.stderr
    notices = annotations(result.stderr, "notice")
    assert len(notices) == 1 and notices[0].startswith("::notice file=persona.py,line=3,title=prefix-diff%3A plugin.persona changed::")
    assert "zhin-ref-" not in result.stderr  # never the deleted temporary tree
