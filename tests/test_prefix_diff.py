"""`zhin prefix-diff` (issue 4): causes, byte/token offsets, cache arithmetic, hints, exit codes."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC
from pathlib import Path

import pytest
from builders import MIN, SEC, T0, History, TimeOnlyAssembler, answered_chat, assembler, late_event_history, replay
from conftest import run_zhin

from zhin_cli.cache.diff import diff_pair, diff_turns
from zhin_cli.cache.serialize import serialize
from zhin_cli.core.model import SceneChange
from zhin_cli.store.jsonl import read_session

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def pairs_of(history: History, config: dict | None = None, **options):  # type: ignore[no-untyped-def,type-arg]
    session = history.session()
    return diff_turns(session.session_id, assembler(config, **options).replay(session)).pairs


def two_turns() -> History:
    h = History()
    for i in range(3):
        h.user(T0 + i * SEC, "10002", f"m{i}", display_name="小明")
    h.assistant(T0 + 5 * SEC, "r1")
    return h


def previous_without_tail(request) -> int:  # type: ignore[no-untyped-def]
    """Bytes of the previous request's serialisation before its runtime tail (separator included in the tail)."""
    data = serialize(request).data.decode()
    tail = next(p.text for p in request.parts if p.segment_id == "tail")  # "\n\n[scene_id:…]"
    assert tail.startswith("\n\n[scene_id:")
    return len(data[: data.rindex(json.dumps(tail, ensure_ascii=False)[1:-1])].encode())


def test_busy_fixture_has_no_unexpected_break_on_any_provider() -> None:
    session = read_session(FIXTURES / "group-busy.jsonl")
    for provider, model in (("openai", "gpt-4o"), ("anthropic", "claude-sonnet-5"), ("gemini", "gemini-2.5-flash"),
                            ("deepseek", "deepseek-chat")):
        result = diff_turns(session.session_id, assembler(provider=provider, model=model).replay(session))
        assert {p.cause for p in result.pairs} <= {"append", "tail", "window_shift"}, provider
        assert result.summary()["causes"]["tail"] >= 5


def test_ten_messages_in_a_row_only_append_after_the_replaced_tail() -> None:
    h = two_turns()
    for i in range(10):
        h.user(T0 + (10 + i) * SEC, "10002", f"burst {i}", display_name="小明")
    h.assistant(T0 + 30 * SEC, "r2")
    session = h.session()
    first, second = assembler().replay(session)
    pair = diff_pair(first, second)
    assert pair.cause == "tail" and pair.segment == "tail"
    assert pair.common_prefix_bytes == previous_without_tail(first)


def test_group_rename_changes_only_the_scene_tail_never_the_system_prompt() -> None:
    h = two_turns()
    h.user(T0 + 10 * SEC, "10003", "next")
    h.assistant(T0 + 12 * SEC, "r2")
    session = h.session()
    session.scene_changes = [SceneChange(T0 + 8 * SEC, {"scene_name": "新群名"})]
    first, second = assembler().replay(session)
    pair = diff_pair(first, second)
    assert pair.cause == "tail"
    assert pair.common_prefix_bytes == previous_without_tail(first)
    assert "新群名" in serialize(second).data.decode() and "新群名" not in serialize(first).data.decode()


def test_admin_promotion_adds_a_state_line_without_rewriting_earlier_bytes() -> None:
    h = two_turns()
    h.event(T0 + 10 * SEC, "member_changed", '10001 changed 10002 role to "admin"')
    h.user(T0 + 11 * SEC, "10002", "thanks", display_name="小明", platform_role="admin")
    h.assistant(T0 + 12 * SEC, "r2")
    first, second = assembler().replay(h.session())
    pair = diff_pair(first, second)
    assert pair.cause == "tail" and pair.common_prefix_bytes == previous_without_tail(first)
    assert '[state change] 10001 changed 10002 role to \\"admin\\"' in serialize(second).data.decode()


class MinuteClock:
    """A deliberately unstable segment: it prints the minute of the newest message."""

    id, kind, weight, retention = "bad.clock", "environment", 1, "required"

    def inject(self, input):  # type: ignore[no-untyped-def]
        from datetime import datetime

        return "Current time: " + datetime.fromtimestamp(input.history[-1].timestamp / 1000, tz=UTC).strftime("%H:%M")


def test_negative_control_a_clock_in_the_system_prompt_is_system_changed_with_a_hint() -> None:
    h = two_turns()
    h.user(T0 + 3 * MIN, "10002", "later")
    h.assistant(T0 + 3 * MIN + SEC, "r2")
    from zhin_cli.pipeline.assemble import Assembler
    from zhin_cli.pipeline.config import Config
    from zhin_cli.pipeline.segments.builtin import default_registry

    registry = default_registry()
    registry.register(MinuteClock())
    session = h.session()
    result = diff_turns(session.session_id, Assembler(registry, Config()).replay(session))
    assert [p.cause for p in result.pairs] == ["system_changed"]
    assert result.pairs[0].segment == "bad.clock"
    assert [(h.segment, h.kind) for h in result.hints.values()] == [("bad.clock", "clock_time")]
    assert result.pairs[0].cached_tokens == 0


def test_model_change_between_turns() -> None:
    h = two_turns()
    h.user(T0 + 10 * SEC, "10002", "x")
    reply = h.assistant(T0 + 11 * SEC, "r2")
    reply.model = "gpt-4.1"
    pairs = pairs_of(h)
    assert pairs[0].cause == "model_changed" and pairs[0].detail == "gpt-4o → gpt-4.1" and pairs[0].cached_tokens == 0


def test_rewritten_history_is_messages_changed() -> None:
    """Without the append-only rule a late event would be inserted into sent history: that is caught."""
    from zhin_cli.pipeline.config import Config
    from zhin_cli.pipeline.segments.builtin import default_registry

    h = late_event_history()
    session = h.session()
    naive = diff_turns(session.session_id, TimeOnlyAssembler(default_registry(), Config()).replay(session))
    assert naive.pairs[0].cause == "messages_changed" and naive.pairs[0].message_index == 2
    assert pairs_of(h)[0].cause == "tail"


def test_reordered_tools_are_tools_changed() -> None:
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in ("a", "b")]
    h = two_turns()
    old = replay(h.session(), {"tools": tools})[-1]
    new = replay(h.session(), {"tools": list(reversed(tools))})[-1]
    pair = diff_pair(old, new)
    assert (pair.cause, pair.detail, pair.segment) == ("tools_changed", "same tools, different order", "tools")


def test_openai_cache_arithmetic_minimum_and_128_steps() -> None:
    long_text = "规则。" * 700  # > 1024 tokens of stable system prompt
    h = two_turns()
    h.user(T0 + 10 * SEC, "10002", "x")
    h.assistant(T0 + 11 * SEC, "r2")
    pair = pairs_of(h, {"segments": {"add": [{"id": "long", "kind": "system", "text": long_text}]}})[0]
    assert pair.common_prefix_tokens >= 1024
    assert pair.cached_tokens == pair.common_prefix_tokens // 128 * 128 and pair.cached_tokens % 128 == 0
    short = pairs_of(two_turns_plus())[0]
    assert short.common_prefix_tokens < 1024 and short.cached_tokens == 0


def two_turns_plus() -> History:
    h = two_turns()
    h.user(T0 + 10 * SEC, "10002", "x")
    h.assistant(T0 + 11 * SEC, "r2")
    return h


def test_tail_limit_window_shift_is_reported_with_a_hint() -> None:
    session = answered_chat(6, gap=SEC).session()
    result = diff_turns(session.session_id, assembler({"window": {"max_messages": 4}}).replay(session))
    shifts = [p for p in result.pairs if p.cause == "window_shift"]
    assert shifts and all(p.detail == "tail limit" for p in shifts)
    assert ("window", "tail_limit") in result.hints


def run(*args: str, cwd: Path, opt_in: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """``opt_in``: global flags such as ``--allow-plugins`` (plugins of a found zhin.yaml run only when trusted)."""
    env = {"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "HOME": str(Path.home())}
    return run_zhin(*opt_in, "prefix-diff", *args, cwd=cwd, env=env)  # in this process (conftest)


def write_clock_plugin(path: Path) -> None:
    """A deliberately unstable plugin segment: it prints the minute of the newest message."""
    path.write_text(
        "from datetime import datetime, timezone\n"
        "class Clock:\n"
        "    id, kind, weight, retention = 'plugin.clock', 'environment', 1, 'required'\n"
        "    def inject(self, input):\n"
        "        return 'Now: ' + datetime.fromtimestamp(input.history[-1].timestamp / 1000, tz=timezone.utc).strftime('%H:%M')\n"
        "def register(generation):\n"
        "    generation.register(Clock())\n",
        encoding="utf-8",
    )


def test_cli_exit_codes_like_diff(tmp_path: Path) -> None:
    ok = run(str(FIXTURES / "group-busy.jsonl"), "--json", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    document = json.loads(ok.stdout)
    assert document["version"] == 1 and document["unexpected"] == 0
    pair = document["sessions"][0]["pairs"][0]
    assert set(pair) >= {"cause", "common_prefix", "first_divergence", "before", "after", "cache"}
    strict = run(str(FIXTURES / "group-busy.jsonl"), "--fail-on", "tail", cwd=tmp_path)
    assert strict.returncode == 1
    bad = run(str(FIXTURES / "group-busy.jsonl"), "--fail-on", "nonsense", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.startswith("zhin: error: --fail-on: unknown cause nonsense")
    missing = run(str(tmp_path / "nope.jsonl"), cwd=tmp_path)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr


def test_cli_negative_control_unstable_config_exits_1(tmp_path: Path) -> None:
    write_clock_plugin(tmp_path / "clock.py")
    (tmp_path / "zhin.yaml").write_text("plugins: ['clock.py:register']\n", encoding="utf-8")
    result = run(str(FIXTURES / "group-busy.jsonl"), cwd=tmp_path, opt_in=("--allow-plugins",))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "system_changed" in result.stdout and "plugin.clock" in result.stdout and "clock_time" in result.stdout


def test_base_head_config_files_report_exactly_the_changed_segment(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("segments: {add: [{id: house.rules, kind: system, text: 'Be kind.'}]}\n", encoding="utf-8")
    (tmp_path / "head.yaml").write_text("segments: {add: [{id: house.rules, kind: system, text: 'Be kind and brief.'}]}\n", encoding="utf-8")
    result = run(str(FIXTURES / "private-chat.jsonl"), "--base", "base.yaml", "--head", "head.yaml", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    comparison = json.loads(result.stdout)["sessions"][0]
    assert [(s["id"], s["status"], s["chars"]) for s in comparison["segments"]] == [("house.rules", "changed", 10)]
    assert comparison["first_divergence"]["segment"] == "house.rules"
    assert comparison["differing_turns"] == list(range(1, comparison["turns"] + 1))
    assert comparison["head_stability"]["unexpected"] == 0


@pytest.mark.parametrize("flag", [["--base", "x.yaml"], ["--head", "x.yaml"]])
def test_base_and_head_go_together(tmp_path: Path, flag: list[str]) -> None:
    result = run(str(FIXTURES / "private-chat.jsonl"), *flag, cwd=tmp_path)
    assert result.returncode == 2 and "--base and --head go together" in result.stderr


def git(*args: str, cwd: Path) -> str:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout


def test_base_head_git_refs_report_exactly_the_changed_segment(tmp_path: Path) -> None:
    repo = tmp_path / "bot"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    (repo / "persona.py").write_text(
        "from zhin_cli.pipeline.segments import TextSegment\n"
        "def register(generation):\n"
        "    generation.register(TextSegment('plugin.persona', 'role_rules', 'You like cats.', weight=5))\n",
        encoding="utf-8",
    )
    (repo / "zhin.yaml").write_text(
        "plugins: ['persona.py:register']\nsegments: {add: [{id: house.rules, kind: system, text: 'Be kind.'}]}\n", encoding="utf-8")
    git("add", "-A", cwd=repo)
    git("commit", "-qm", "v1", cwd=repo)
    (repo / "persona.py").write_text((repo / "persona.py").read_text(encoding="utf-8").replace("cats", "cats and dogs"), encoding="utf-8")
    git("commit", "-qam", "persona v2", cwd=repo)
    result = run(str(FIXTURES / "private-chat.jsonl"), "--base", "HEAD~1", "--head", "main", "--json", cwd=repo,
                 opt_in=("--allow-ref-plugins",))
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    comparison = document["sessions"][0]
    assert [(s["id"], s["status"], s["chars"]) for s in comparison["segments"]] == [("plugin.persona", "changed", 9)]
    assert comparison["first_divergence"]["segment"] == "plugin.persona"
    assert document["base"].startswith("HEAD~1 (") and document["head"].startswith("main (")
    same = run(str(FIXTURES / "private-chat.jsonl"), "--base", "HEAD", "--head", "main", "--json", cwd=repo,
               opt_in=("--allow-ref-plugins",))
    assert json.loads(same.stdout)["sessions"][0]["segments"] == []


def test_base_head_flags_an_unstable_head_configuration(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("{}\n", encoding="utf-8")
    write_clock_plugin(tmp_path / "clock.py")
    (tmp_path / "head.yaml").write_text("plugins: ['clock.py:register']\n", encoding="utf-8")
    result = run(str(FIXTURES / "private-chat.jsonl"), "--base", "base.yaml", "--head", "head.yaml", cwd=tmp_path)
    assert result.returncode == 1
    assert "plugin.clock" in result.stdout and "unexpected break" in result.stdout


def test_hysteresis_window_shifts_get_no_hint() -> None:
    # Negative control of the test above: one shift per five turns is the designed cost, not a problem.
    session = answered_chat(30, gap=SEC).session()
    result = diff_turns(session.session_id, assembler({"window": {"max_messages": 20}}).replay(session))
    assert [p.to_turn for p in result.pairs if p.cause == "window_shift"] == [11, 16, 21, 26]
    assert ("window", "tail_limit") not in result.hints
