"""``zhin preset lint|probe`` and ``--preset`` on trace / prefix-diff, through the real CLI."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

from conftest import clean_env

ROOT = Path(__file__).resolve().parent.parent
PRESETS = ROOT / "fixtures" / "presets"
ST_DEFAULT = PRESETS / "st-default.json"
COMMUNITY = PRESETS / "community-zh.json"
SESSION = ROOT / "fixtures" / "private-chat.jsonl"
Run = Callable[..., CompletedProcess[str]]


def one_line_error(result: CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_lint_exit_codes_and_json(zhin: Run, tmp_path: Path) -> None:
    clean = zhin("preset", "lint", ST_DEFAULT)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "0 error(s), 0 warning(s)" in clean.stdout
    found = zhin("preset", "lint", COMMUNITY, "--json")
    assert found.returncode == 1
    data = json.loads(found.stdout)
    assert data["version"] == 1 and data["order_source"] == "100001"
    assert {"name": "loomStyle", "known": False, "entries": ["loom"]} in data["macros"]
    assert data["counts"]["warning"] >= 4
    assert {d["code"] for d in data["diagnostics"]} >= {"bad-depth", "unknown-macro", "never-sent", "unknown-extension"}
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "prompts": [\n    {"identifier": "x",,}\n  ]\n}\n', encoding="utf-8")
    broken = zhin("preset", "lint", bad)
    assert broken.returncode == 3
    assert one_line_error(broken) == f"zhin: error: {bad}:3: preset file is not valid JSON: Expecting property name enclosed in double quotes (column 24)"
    assert zhin("preset", "lint", tmp_path / "absent.json").returncode == 3


def test_probe_st_default_json(zhin: Run) -> None:
    result = zhin("preset", "probe", ST_DEFAULT, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [m["role"] for m in data["messages"]] == ["system", "system", "system", "user", "assistant", "user", "assistant", "user"]
    assert data["messages"][0]["sources"] == ["preset:main"]
    table = zhin("preset", "probe", ST_DEFAULT, "--session", SESSION, "--provider", "anthropic")
    assert table.returncode == 0, table.stderr
    assert "system (top-level)" in table.stdout and "entry main" in table.stdout and "hole currentTurn" in table.stdout


def test_trace_with_preset_and_bad_preset(zhin: Run, tmp_path: Path) -> None:
    plain = json.loads(zhin("trace", SESSION, "--json").stdout)
    with_preset = zhin("trace", SESSION, "--json", "--preset", COMMUNITY)
    assert with_preset.returncode == 0, with_preset.stderr
    request = json.loads(with_preset.stdout)["requests"][0]
    contents = [m["content"] for m in request["request"]["messages"]]
    assert contents[0] == "你是Zhin，正在和" + contents[0].split("正在和")[1]
    assert contents != [m["content"] for m in plain["requests"][0]["request"]["messages"]]
    assert any("loomStyle" in w for w in request["warnings"])
    missing = zhin("trace", SESSION, "--preset", tmp_path / "nope.json")
    assert missing.returncode == 3
    assert "no such preset file" in one_line_error(missing)


def test_prefix_diff_with_preset(zhin: Run, tmp_path: Path) -> None:
    base = zhin("prefix-diff", SESSION, "--json")
    assert base.returncode == 0, base.stdout + base.stderr
    with_preset = zhin("prefix-diff", SESSION, "--json", "--preset", ST_DEFAULT)
    assert with_preset.returncode in (0, 1), with_preset.stderr
    assert json.loads(with_preset.stdout) != json.loads(base.stdout)
    missing = zhin("prefix-diff", SESSION, "--preset", tmp_path / "nope.json")
    assert missing.returncode == 2  # like diff: any trouble is 2
    assert "no such preset file" in one_line_error(missing)


def test_zhin_yaml_preset_key_with_options(zhin: Run, tmp_path: Path) -> None:
    (tmp_path / "presets").mkdir()
    (tmp_path / "presets" / "p.json").write_text(COMMUNITY.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "zhin.yaml").write_text("preset:\n  file: presets/p.json\n  user: 旅人\n  char: 小知\n", encoding="utf-8")
    result = zhin("trace", SESSION, "--json")
    assert result.returncode == 0, result.stderr
    first = json.loads(result.stdout)["requests"][0]["request"]["messages"][0]["content"]
    assert first == "你是小知，正在和旅人在群里聊天。"
    (tmp_path / "zhin.yaml").write_text("timezone: UTC\npreset:\n  file: presets/p.json\n  colour: red\n", encoding="utf-8")
    bad = zhin("trace", SESSION)
    assert bad.returncode == 3
    # the schema names the unknown key at its own line (zhin schema config)
    assert "unknown preset keys ['colour']" in one_line_error(bad) and "zhin.yaml:4" in bad.stderr


def test_prefix_diff_base_head_with_a_preset_per_side(zhin: Run, tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text(f"preset: {ST_DEFAULT}\n", encoding="utf-8")
    (tmp_path / "head.yaml").write_text(f"preset: {COMMUNITY}\n", encoding="utf-8")
    result = zhin("prefix-diff", SESSION, "--base", "base.yaml", "--head", "head.yaml", "--json")
    assert result.returncode in (0, 1), result.stderr
    comparison = json.loads(result.stdout)["sessions"][0]
    assert comparison["first_divergence"]["segment"] == "preset:main"  # both start with main; its text differs
    (tmp_path / "head.yaml").write_text(f"preset: {ST_DEFAULT}\n", encoding="utf-8")
    same = json.loads(zhin("prefix-diff", SESSION, "--base", "base.yaml", "--head", "head.yaml", "--json").stdout)
    assert same["sessions"][0]["first_divergence"] is None  # negative control: same preset, no divergence


def test_a_changing_preset_entry_after_the_first_message_is_system_changed(zhin: Run, tmp_path: Path) -> None:
    # main is fixed; "clock" (a second system entry, wire message 1) shows the newest message: it changes every
    # turn. prefix-diff must call that system_changed and name the entry, not messages_changed.
    preset = {
        "squash_system_messages": False,
        "prompts": [
            {"identifier": "main", "name": "main", "role": "system", "system_prompt": True, "content": "你是{{char}}。"},
            {"identifier": "clock", "name": "clock", "role": "system", "system_prompt": False, "content": "最新：{{lastUserMessage}}"},
            {"identifier": "chatHistory", "name": "Chat History", "system_prompt": True, "marker": True},
        ],
        "prompt_order": [{"character_id": 100001, "order": [
            {"identifier": "main", "enabled": True}, {"identifier": "clock", "enabled": True},
            {"identifier": "worldInfoBefore", "enabled": True}, {"identifier": "chatHistory", "enabled": True}]}],
    }
    (tmp_path / "clock.json").write_text(json.dumps(preset, ensure_ascii=False), encoding="utf-8")
    result = zhin("prefix-diff", ROOT / "fixtures" / "group-busy.jsonl", "--preset", tmp_path / "clock.json", "--json")
    assert result.returncode == 1, result.stderr
    pairs = json.loads(result.stdout)["sessions"][0]["pairs"]
    changed = [p for p in pairs if p["cause"] == "system_changed"]
    assert changed and all(p["first_divergence"]["segment"] == "preset:clock" for p in changed)
    assert not [p for p in pairs if p["cause"] == "messages_changed"]


def test_lint_text_output_shows_each_code(zhin: Run) -> None:
    # The code in brackets is text, not console markup: `[unknown-macro]` must reach the terminal as written.
    result = zhin("preset", "lint", COMMUNITY)
    assert result.returncode == 1
    assert "[unknown-macro]" in result.stdout and "[bad-depth]" in result.stdout
    # Negative control: the severity word (styled) is printed without markup tags.
    assert "ZP012 warning: unknown macro" in result.stdout and "[/]" not in result.stdout


FINDING = re.compile(r"^(?P<file>.+):(?P<line>\d+): (?P<code>ZP\d{3}) (?P<severity>error|warning|info): (?P<message>.+) \[(?P<name>[a-z-]+)\]$")


def finding_lines(stdout: str) -> list[re.Match[str]]:
    lines = stdout.splitlines()[1:-1]  # between the preset's header line and the counts
    matches = [FINDING.match(line) for line in lines]
    assert all(matches), [line for line, m in zip(lines, matches, strict=True) if not m]
    return [m for m in matches if m]


def test_lint_prints_one_parsable_finding_per_line_sorted_by_line(zhin: Run) -> None:
    narrow = zhin("preset", "lint", COMMUNITY, env={**clean_env(), "COLUMNS": "60"})
    assert narrow.returncode == 1
    found = finding_lines(narrow.stdout)  # at 60 columns too: one physical line each, never wrapped
    assert len(found) >= 10 and {m["file"] for m in found} == {str(COMMUNITY)}
    assert [int(m["line"]) for m in found] == sorted(int(m["line"]) for m in found)
    text = COMMUNITY.read_text(encoding="utf-8").splitlines()
    loom = next(m for m in found if m["name"] == "unknown-macro")
    assert '"identifier": "loom"' in text[int(loom["line"]) - 1]  # the line of the prompt that uses the macro
    clean = zhin("preset", "lint", ST_DEFAULT)  # negative control: a clean preset prints no finding
    assert clean.returncode == 0 and {m["severity"] for m in finding_lines(clean.stdout)} <= {"info"}


def test_a_finding_about_the_order_is_placed_at_prompt_order(zhin: Run, tmp_path: Path) -> None:
    preset = tmp_path / "p.json"
    preset.write_text(json.dumps({"prompts": [{"identifier": "main", "content": "hi"}],
                                  "prompt_order": [{"character_id": 100001, "order": [{"identifier": "main", "enabled": True}]}]},
                                 indent=2), encoding="utf-8")
    found = {m["name"]: m for m in finding_lines(zhin("preset", "lint", preset).stdout)}
    order_line = next(i for i, line in enumerate(preset.read_text(encoding="utf-8").splitlines(), 1) if '"prompt_order"' in line)
    assert found["no-history"]["code"] == "ZP001" and int(found["no-history"]["line"]) == order_line


def test_ignore_by_code_or_name(zhin: Run) -> None:
    every = {m["code"] for m in finding_lines(zhin("preset", "lint", COMMUNITY).stdout)}
    warnings = {m["code"] for m in finding_lines(zhin("preset", "lint", COMMUNITY).stdout) if m["severity"] == "warning"}
    assert warnings == {"ZP004", "ZP012", "ZP032"}
    quiet = zhin("preset", "lint", COMMUNITY, "--ignore", "ZP004", "--ignore", "unknown-macro", "--ignore", "zp032")
    assert quiet.returncode == 0, quiet.stdout  # every warning ignored: the lint passes
    assert {m["code"] for m in finding_lines(quiet.stdout)} == every - warnings
    assert "(3 rule(s) ignored)" in quiet.stdout
    data = json.loads(zhin("preset", "lint", COMMUNITY, "--json", "--ignore", "ZP012").stdout)
    assert data["ignored"] == ["ZP012"] and "unknown-macro" not in {d["code"] for d in data["diagnostics"]}
    assert {d["rule"] for d in data["diagnostics"]} == every - {"ZP012"}
    # negative control: ignoring only notes leaves the warnings failing the lint
    assert zhin("preset", "lint", COMMUNITY, "--ignore", "ZP055").returncode == 1
    unknown = zhin("preset", "lint", COMMUNITY, "--ignore", "ZP777")
    assert unknown.returncode == 2 and "no such preset lint rule" in one_line_error(unknown)


def test_every_rule_the_code_reports_has_a_code_and_is_documented() -> None:
    from zhin_cli.tools.preset.lint import RULES

    sources = [ROOT / "zhin_cli" / "pipeline" / "preset" / "importer.py", ROOT / "zhin_cli" / "tools" / "preset" / "lint.py"]
    reported = set()
    for source in sources:
        reported |= set(re.findall(r'(?:report|Diagnostic)\("(?:error|warning|info)"(?: if runs else "info")?, "([a-z-]+)"', source.read_text(encoding="utf-8")))
    assert len(reported) >= 30 and reported <= set(RULES), sorted(reported - set(RULES))
    assert len(set(RULES.values())) == len(RULES)  # one code per rule
    docs = (ROOT / "docs" / "preset-lint.md").read_text(encoding="utf-8")
    documented = dict(re.findall(r"^\| (ZP\d{3}) \| `([a-z-]+)` \|", docs, flags=re.M))
    assert documented == {code: name for name, code in RULES.items()}
