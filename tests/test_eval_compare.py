"""Eval before/after: ``zhin eval --base X --head Y`` and ``zhin eval compare A.json B.json`` (issue 10 §1)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

CASES = """\
version: 1
cases:
  - id: house.rules-are-sent
    providers: [openai]
    timeline:
      - user: {from: "10002", text: "早"}
      - assistant: {text: "早上好"}
      - user: {from: "10002", text: "在吗"}
      - assistant: {text: "在"}
      - user: {from: "10002", text: "好"}
    assertions:
      - type: regex
        pattern: "群规：不要刷屏"
      - type: verdict
        accepted: true
"""

RULES = """\
segments:
  add:
    - {{id: house.rules, kind: system, weight: 50, retention: required, text: "{text}"}}
"""

CLOCK = """\
class Clock:
    id, kind, weight, retention = "plugin.clock", "environment", 1, "required"
    def inject(self, input):
        return "turn of " + str(len(input.history))
def register(generation):
    generation.register(Clock())
"""


def project(root: Path, rules: str = "群规：不要刷屏", plugin: bool = False) -> None:
    (root / "cases").mkdir(exist_ok=True)
    (root / "cases" / "house.yaml").write_text(CASES, encoding="utf-8")
    config = RULES.format(text=rules)
    if plugin:
        (root / "clock.py").write_text(CLOCK, encoding="utf-8")
        config += "plugins: [clock.py:register]\n"
    (root / "zhin.yaml").write_text(config, encoding="utf-8")


def config_file(root: Path, name: str, **options: Any) -> str:
    folder = root / name
    folder.mkdir()
    project(folder, **options)
    return str(folder / "zhin.yaml")


def compare(zhin: Any, root: Path, base: str, head: str, *opt_in: str) -> tuple[int, dict[str, Any]]:
    result = zhin(*opt_in, "eval", "cases", "--base", base, "--head", head, "--json", cwd=root)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def test_an_unchanged_configuration_is_no_change(zhin: Any, tmp_path: Path) -> None:
    project(tmp_path)
    code, report = compare(zhin, tmp_path, config_file(tmp_path, "a"), config_file(tmp_path, "b"))
    assert code == 0 and report["regressions"] == 0
    assert [c["change"] for c in report["cases"]] == ["same"]


def test_a_changed_text_that_breaks_a_case_is_a_regression(zhin: Any, tmp_path: Path) -> None:
    project(tmp_path)
    code, report = compare(zhin, tmp_path, config_file(tmp_path, "a"), config_file(tmp_path, "b", rules="群规：请勿刷屏"))
    assert code == 1 and report["regressions"] == 1
    [case] = report["cases"]
    assert case["change"] == "regressed" and case["base"] == "passed" and case["head"] == "failed"
    assert case["reasons"][0].startswith("passed → failed: regex (openai)")
    [openai] = case["providers"]
    assert openai["prompt_tokens_delta"] != 0 and openai["header_tokens_delta"] == 0
    table = zhin("eval", "cases", "--base", str(tmp_path / "a" / "zhin.yaml"), "--head", str(tmp_path / "b" / "zhin.yaml"),
                 cwd=tmp_path)
    assert table.returncode == 1 and "regressed" in table.stdout and "1 regression(s)" in table.stdout


def test_a_head_that_breaks_the_prefix_regresses_even_when_assertions_pass(zhin: Any, tmp_path: Path) -> None:
    project(tmp_path)
    code, report = compare(zhin, tmp_path, config_file(tmp_path, "a"), config_file(tmp_path, "b", plugin=True))
    assert code == 1
    [case] = report["cases"]
    assert case["base"] == case["head"] == "passed" and case["change"] == "regressed"
    assert any("prefix now breaks at turn 2 (system_changed in plugin.clock)" in r for r in case["reasons"])
    # and the reverse direction is a fix, not a regression
    code, report = compare(zhin, tmp_path, str(tmp_path / "b" / "zhin.yaml"), str(tmp_path / "a" / "zhin.yaml"))
    assert code == 0 and report["cases"][0]["change"] == "changed"
    assert report["cases"][0]["providers"][0]["fixed_breaks"]


def test_git_refs_with_their_own_plugin_code(zhin: Any, tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    project(tmp_path)
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "base")
    project(tmp_path, plugin=True)
    git("add", ".")
    git("commit", "-qm", "head")
    project(tmp_path)  # the working tree is back to base: only the refs carry the plugin
    code, report = compare(zhin, tmp_path, "HEAD~1", "HEAD", "--allow-ref-plugins")  # a ref's plugin code: opted in
    assert code == 1 and report["head"].startswith("HEAD (")
    assert any("plugin.clock" in r for r in report["cases"][0]["reasons"])


def test_compare_two_saved_results(zhin: Any, tmp_path: Path) -> None:
    project(tmp_path)
    good = zhin("eval", "cases", "--json", cwd=tmp_path)
    (tmp_path / "zhin.yaml").write_text(RULES.format(text="群规：随意"), encoding="utf-8")
    bad = zhin("eval", "cases", "--json", cwd=tmp_path)  # the project's zhin.yaml applies to cases without config
    assert good.returncode == 0 and bad.returncode == 1
    (tmp_path / "good.json").write_text(good.stdout, encoding="utf-8")
    (tmp_path / "bad.json").write_text(bad.stdout, encoding="utf-8")
    assert zhin("eval", "compare", "good.json", "good.json", cwd=tmp_path).returncode == 0
    regressed = zhin("eval", "compare", "good.json", "bad.json", "--json", cwd=tmp_path)
    assert regressed.returncode == 1 and json.loads(regressed.stdout)["regressions"] == 1
    assert zhin("eval", "compare", "bad.json", "good.json", cwd=tmp_path).returncode == 0  # a fix


@pytest.mark.parametrize("args, code, text", [
    (("compare", "only.json"), 2, "two saved"),
    (("compare", "nope.json", "nope.json"), 3, "no such eval result: nope.json"),
    (("compare", "zhin.yaml", "zhin.yaml"), 3, "zhin.yaml:1: eval result is not valid JSON"),
    (("cases", "--base", "zhin.yaml"), 2, "both --base and --head"),
    (("cases", "--base", "zhin.yaml", "--head", "no-such-ref"), 2, "no-such-ref"),
])
def test_usage_errors(zhin: Any, tmp_path: Path, args: tuple[str, ...], code: int, text: str) -> None:
    project(tmp_path)
    result = zhin("eval", *args, cwd=tmp_path)
    assert result.returncode == code, result.stderr
    assert text in result.stderr and "Traceback" not in result.stderr
