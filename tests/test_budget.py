"""The fixed-prompt-cost budget gate: ``zhin budget check`` / ``update`` (issue 10 §2)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TOOL = {"type": "function", "function": {"name": "weather", "description": "查询城市天气",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


def project(tmp_path: Path, config: dict[str, Any] | None = None) -> Path:
    shutil.copy(FIXTURES / "group-busy.jsonl", tmp_path / "busy.jsonl")
    (tmp_path / "zhin.yaml").write_text(yaml.safe_dump(config or {}, allow_unicode=True), encoding="utf-8")
    return tmp_path


def parts(tmp_path: Path) -> dict[str, dict[str, int]]:
    data = yaml.safe_load((tmp_path / "prompt-budget.yaml").read_text(encoding="utf-8"))
    return {p["provider"]: p["parts"] for p in data["profiles"]}


def test_a_grown_segment_fails_the_gate_and_passes_after_update(zhin: Any, tmp_path: Path) -> None:
    project(tmp_path)
    made = zhin("budget", "update", "--session", "busy.jsonl", "--provider", "openai", "--provider", "anthropic")
    assert made.returncode == 0, made.stderr
    assert zhin("budget", "check").returncode == 0
    before = parts(tmp_path)["openai"]["core.rules"]

    longer = {"segments": {"texts": {"core.rules": "你是群聊助手。" + "回答要简短，不要重复别人说过的话。" * 30}}}
    project(tmp_path, longer)
    check = zhin("budget", "check", "--json")
    assert check.returncode == 1, check.stderr
    report = json.loads(check.stdout)
    over = [p for p in report["parts"] if p["status"] == "over"]
    assert {(p["provider"], p["part"]) for p in over} == {("openai", "core.rules"), ("openai", "total"),
                                                          ("anthropic", "core.rules"), ("anthropic", "total")}
    grown = next(p for p in over if p["provider"] == "openai" and p["part"] == "core.rules")
    assert grown["budget"] == before and grown["delta"] == grown["measured"] - before > 0
    table = zhin("budget", "check")
    assert table.returncode == 1 and f"openai core.rules grew from {before} to {grown['measured']} tokens" in table.stdout

    assert zhin("budget", "update").returncode == 0  # deliberate: keeps the file's sessions and profiles
    assert parts(tmp_path)["openai"]["core.rules"] == grown["measured"]
    assert zhin("budget", "check").returncode == 0


def test_a_new_part_fails_and_a_smaller_one_passes(zhin: Any, tmp_path: Path) -> None:
    project(tmp_path)
    assert zhin("budget", "update", "-s", "busy.jsonl", "-p", "openai").returncode == 0
    added = {"segments": {"add": [{"id": "house.rules", "kind": "system", "weight": 50, "retention": "required",
                                    "text": "禁止刷屏。"}]}}
    project(tmp_path, added)
    check = json.loads(zhin("budget", "check", "--json").stdout)
    assert [p["part"] for p in check["parts"] if p["status"] == "new"] == ["house.rules"]
    project(tmp_path, {"segments": {"texts": {"core.rules": "简短。"}}})
    smaller = zhin("budget", "check")
    assert smaller.returncode == 0 and "under" in smaller.stdout and "locks the saving in" in smaller.stdout


def test_tool_schemas_are_a_part_measured_as_each_provider_sends_them(zhin: Any, tmp_path: Path) -> None:
    project(tmp_path, {"tools": [TOOL]})
    assert zhin("budget", "update", "-s", "busy.jsonl", "-p", "openai", "-p", "anthropic").returncode == 0
    measured = parts(tmp_path)
    assert measured["openai"]["tools"] > 0 and measured["anthropic"]["tools"] > 0
    assert measured["openai"]["tools"] != measured["anthropic"]["tools"]  # different wire shapes
    assert measured["openai"]["total"] == sum(v for k, v in measured["openai"].items() if k != "total")


def test_bad_budget_files_are_one_line_errors(zhin: Any, tmp_path: Path) -> None:
    project(tmp_path)
    missing = zhin("budget", "check")
    assert missing.returncode == 3 and "no such budget file" in missing.stderr
    assert zhin("budget", "update").returncode == 2  # nothing to create it from
    for text, expected in [
        ("version: 1\nsessions: [busy.jsonl]\nprofiles:\n  - provider: openai\n    parts: {core.rules: -3}\n",
         "prompt-budget.yaml:5: part 'core.rules': tokens must be a whole number"),
        ("version: 2\nsessions: [busy.jsonl]\n", "prompt-budget.yaml:1: version must be 1"),
        ("version: 1\nsessions: [busy.jsonl]\nprofile: []\n", "prompt-budget.yaml:3: unknown keys ['profile']"),
        ("version: 1\nsessions: [busy.jsonl\n", "prompt-budget.yaml:3: invalid YAML"),
    ]:
        (tmp_path / "prompt-budget.yaml").write_text(text, encoding="utf-8")
        result = zhin("budget", "check")
        assert result.returncode == 3, (text, result.stderr)
        assert expected in result.stderr and len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


COMMENTED = """\
# Fixed prompt cost, reviewed by the prompt owners.   (a header comment)
version: 1
sessions:
  # the busiest group we have
  - busy.jsonl
profiles:
  - provider: openai  # the main deployment
    parts:
      core.rules: {rules}  # the house rules; grows with every incident
      # the environment line (model, time zone)
      core.environment: {environment}
      core.persona: {persona}
      core.platform: {platform}   # keep short
      total: {total}
# the end
"""


def test_update_keeps_every_comment_and_changes_only_the_numbers_that_moved(zhin: Any, tmp_path: Path) -> None:
    project(tmp_path)
    assert zhin("budget", "update", "-s", "busy.jsonl", "-p", "openai").returncode == 0
    measured = parts(tmp_path)["openai"]
    names = {"rules": "core.rules", "environment": "core.environment", "persona": "core.persona",
             "platform": "core.platform", "total": "total"}
    budget = tmp_path / "prompt-budget.yaml"
    before = COMMENTED.format(**{key: measured[name] for key, name in names.items()})
    budget.write_text(before, encoding="utf-8")
    assert zhin("budget", "update").returncode == 0
    assert budget.read_text(encoding="utf-8") == before  # nothing measured changed: the file is byte-identical

    project(tmp_path, {"segments": {"texts": {"core.rules": "简短。"}}})
    assert zhin("budget", "update").returncode == 0
    after = budget.read_text(encoding="utf-8")
    assert len(after.splitlines()) == len(before.splitlines())
    changed = [(old, new) for old, new in zip(before.splitlines(), after.splitlines(), strict=True) if old != new]
    smaller = parts(tmp_path)["openai"]
    assert smaller["core.rules"] < measured["core.rules"]
    assert [old for old, _ in changed] == [f"      core.rules: {measured['core.rules']}  # the house rules; grows with every incident",
                                          f"      total: {measured['total']}"]
    # the new numbers, the comment where it was (ruamel keeps its column)
    assert changed[0][1].split() == ["core.rules:", str(smaller["core.rules"]), "#", "the", "house", "rules;", "grows", "with",
                                     "every", "incident"]
    assert changed[1][1] == f"      total: {smaller['total']}"
    comments = [line.strip() for line in before.splitlines() if "#" in line]
    assert all(any(c.split("#", 1)[1] in line for line in after.splitlines()) for c in comments)


def test_update_adds_a_new_part_where_it_is_measured_and_drops_a_gone_one(zhin: Any, tmp_path: Path) -> None:
    project(tmp_path)
    assert zhin("budget", "update", "-s", "busy.jsonl", "-p", "openai").returncode == 0
    budget = tmp_path / "prompt-budget.yaml"
    budget.write_text("# top\n" + budget.read_text(encoding="utf-8").replace("core.persona:", "core.gone: 5  # old\n    core.persona:"),
                      encoding="utf-8")
    project(tmp_path, {"segments": {"add": [{"id": "house.rules", "kind": "system", "text": "禁止刷屏。"}]}})
    assert zhin("budget", "update").returncode == 0
    text = budget.read_text(encoding="utf-8")
    keys = list(parts(tmp_path)["openai"])
    # house.rules is a system segment after core.rules (the prompt's order); total stays last
    assert "core.gone" not in keys and keys[:2] == ["core.rules", "house.rules"] and keys[-1] == "total"
    assert text.startswith("# top\n")
    assert zhin("budget", "check").returncode == 0


def test_update_keeps_the_files_quotes(zhin: Any, tmp_path: Path) -> None:
    """A quoted scalar stays quoted: only the moved number's line changes (ruamel keeps quotes only when the loader
    itself is told to — it used to be told after the load, and every quote was dropped)."""
    project(tmp_path)
    assert zhin("budget", "update", "-s", "busy.jsonl", "-p", "openai").returncode == 0
    budget = tmp_path / "prompt-budget.yaml"
    quoted = budget.read_text(encoding="utf-8").replace("- busy.jsonl", '- "busy.jsonl"').replace(
        "provider: openai", "provider: 'openai'")
    assert '"busy.jsonl"' in quoted and "'openai'" in quoted  # the test edits what it means to
    budget.write_text(quoted, encoding="utf-8")
    project(tmp_path, {"segments": {"texts": {"core.rules": "简短。"}}})
    assert zhin("budget", "update").returncode == 0
    after = budget.read_text(encoding="utf-8")
    assert '- "busy.jsonl"' in after and "provider: 'openai'" in after
    assert after != quoted  # control: the numbers did move


def test_update_of_a_file_ruamel_cannot_lay_out_is_one_line(zhin: Any, tmp_path: Path) -> None:
    """A lone "-" line is valid YAML (PyYAML reads it) but ruamel's indentation guess fails on it: one line, exit 3,
    the file untouched — never a traceback."""
    project(tmp_path)
    budget = tmp_path / "prompt-budget.yaml"
    text = "version: 1\nsessions:\n-\n  busy.jsonl\nprofiles:\n-\n  provider: openai\n  parts: {core.rules: 1}\n"
    budget.write_text(text, encoding="utf-8")
    assert zhin("budget", "check").returncode in (0, 1)  # control: the file is a valid budget
    result = zhin("budget", "update")
    assert result.returncode == 3 and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "prompt-budget.yaml" in result.stderr
    assert budget.read_text(encoding="utf-8") == text
