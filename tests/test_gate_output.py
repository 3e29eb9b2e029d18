"""CI-native output of the gates (issue 17 §5): JUnit XML valid against Jenkins xunit's ``junit-10.xsd``, and GitHub
annotations + a step summary for ``eval`` (every failed assertion), ``budget check`` and ``preset lint``.

The schema is third-party and not committed: ``scripts/junit_xsd.py`` puts it in ``<venv>/share/zhin`` at install.
Without it the schema tests skip with the reason, except under ``CI=true``, where a missing schema is a failure
(a CI that silently skipped the check would pass invalid XML)."""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import pytest

from zhin_cli.tools.eval.report import github_annotations, junit_xml, step_summary, write_junit
from zhin_cli.tools.eval.runner import EvalOptions, run_eval

ROOT = Path(__file__).resolve().parent.parent
XSD = Path(sys.prefix) / "share" / "zhin" / "junit-10.xsd"
Run = Callable[..., CompletedProcess[str]]

CASES = """
cases:
  - id: base
    providers: [openai, anthropic]
    members:
      "10002": {name: 小明, role: member, mute_time: 0}
    timeline:
      - {user: {from: "10002", text: "早"}, at: "09:00"}
      - {assistant: {text: "早上好"}, label: first}
      - user: {from: "10002", text: "在吗"}
    assertions:
      - {type: verdict, accepted: true}
  - id: two-wrong
    extends: base
    assertions:
      - {type: verdict, accepted: true}
      - {type: line_present, line: nope}
      - {type: line_present, line: nope2}
  - id: live-only
    extends: base
    requires: live
  - id: control
    extends: base
    expect: fail
    assertions:
      - {type: verdict, accepted: true}
"""


def schema() -> Any:
    if not XSD.is_file():
        reason = f"{XSD} is missing: `.venv/bin/python scripts/junit_xsd.py` puts it there (make install runs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    import xmlschema

    return xmlschema.XMLSchema10(str(XSD))


def cases_file(tmp_path: Path) -> Path:
    path = tmp_path / "case.yaml"
    path.write_text(textwrap.dedent(CASES).lstrip("\n"), encoding="utf-8")
    return path


def line_of(path: Path, needle: str) -> int:
    return next(i for i, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if needle in text)


# --- JUnit XML -----------------------------------------------------------------------------------------------------


def test_junit_xml_is_valid_against_junit_10_xsd(tmp_path: Path) -> None:
    xsd = schema()
    run = run_eval([cases_file(tmp_path)], EvalOptions(jobs=1))
    out = tmp_path / "junit.xml"
    write_junit(run, out)
    errors = [str(e.reason) for e in xsd.iter_errors(str(out))]
    assert errors == []
    text = out.read_text(encoding="utf-8")
    assert "<skipped" in text and "<failure" in text  # the statuses a CI shows are there, in schema-valid form


def test_junit_with_an_error_a_pass_rate_and_live_answers_is_valid_too(tmp_path: Path) -> None:
    """The other shapes the writer has: an <error>, a live run's suite property, a pass rate, a long duration."""
    import dataclasses

    from zhin_cli.tools.eval.runner import LiveAnswers

    xsd = schema()
    run = run_eval([cases_file(tmp_path)], EvalOptions(jobs=1))
    broken = dataclasses.replace(run.results[0], status="error", reason="orphan tool result (row 3)", pass_rate=0.75,
                                 duration=1234.56789)
    live = dataclasses.replace(run, results=[broken, *run.results[1:]], live=True, duration=0.00001,
                               live_answers=LiveAnswers(4, 1, str(tmp_path / "cache")))
    out = tmp_path / "junit.xml"
    write_junit(live, out)
    assert [str(e.reason) for e in xsd.iter_errors(str(out))] == []
    text = out.read_text(encoding="utf-8")
    assert "<error" in text and 'name="live_answers"' in text and "pass_rate: 0.750" in text


def test_the_old_junit_shape_fails_the_schema(tmp_path: Path) -> None:
    """Negative control: what zhin wrote before (testsuites/@skipped, properties inside a testcase) is refused, so the
    test above can fail."""
    xsd = schema()
    old = tmp_path / "old.xml"
    old.write_text(
        '<?xml version="1.0" encoding="utf-8"?>\n'
        '<testsuites name="zhin eval" tests="1" failures="0" errors="0" skipped="0" time="0.1">'
        '<testsuite name="c.yaml" tests="1" failures="0" errors="0" skipped="0" time="0.1">'
        '<testcase classname="c" name="x" time="0.1"><properties><property name="expect" value="pass"/></properties>'
        "</testcase></testsuite></testsuites>", encoding="utf-8")
    reasons = " ".join(str(e.reason) for e in xsd.iter_errors(str(old)))
    assert "skipped" in reasons and "properties" in reasons


def test_junit_keeps_every_failed_assertion_and_the_case_facts(tmp_path: Path) -> None:
    from junitparser import Failure, JUnitXml, Skipped

    path = cases_file(tmp_path)
    run = run_eval([path], EvalOptions(jobs=1))
    out = tmp_path / "junit.xml"
    write_junit(run, out)
    xml = JUnitXml.fromfile(str(out))
    cases = {case.name: case for suite in xml for case in suite}
    failure = cases["two-wrong"].result[0]
    assert isinstance(failure, Failure)
    assert f"case.yaml:{line_of(path, 'line: nope}')}:" in (failure.text or "")
    assert f"case.yaml:{line_of(path, 'line: nope2')}:" in (failure.text or "")
    assert isinstance(cases["live-only"].result[0], Skipped)
    assert cases["base"].is_passed and "expect: pass" in (cases["base"].system_out or "")
    assert f"file: {path}:" in (cases["base"].system_out or "")
    assert xml.tests == 4 and xml.failures == 2 and sum(suite.skipped for suite in xml) == 1
    assert junit_xml(run).tests == 4


# --- GitHub annotations and step summary ---------------------------------------------------------------------------


def github_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZHIN_", "GITHUB_"))}
    return {**env, "NO_COLOR": "1", "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")}


def annotations(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(("::error", "::warning", "::notice"))]


def test_eval_annotates_every_failed_assertion_at_its_line(tmp_path: Path) -> None:
    path = cases_file(tmp_path)
    run = run_eval([path], EvalOptions(jobs=1))
    found = github_annotations(run)
    lines = sorted({(a.line, a.title) for a in found if a.title and "two-wrong" in a.title})
    assert [line for line, _ in lines] == [line_of(path, "line: nope}"), line_of(path, "line: nope2")]
    # the providers that failed the same assertion are one annotation, not one per provider
    assert len([a for a in found if a.title and "two-wrong" in a.title]) == 2
    assert all("openai" in a.message and "anthropic" in a.message for a in found if a.title and "two-wrong" in a.title)
    control = [a for a in found if a.title and "control" in a.title]
    assert [a.line for a in control] == [line_of(path, "id: control")]
    # negative controls: a passing case and a skipped one are not annotated
    assert not [a for a in found if a.title and ("base" in a.title or "live-only" in a.title)]
    summary = step_summary(run)
    assert "| `two-wrong` |" in summary and "| `live-only` |" in summary


def test_eval_cli_publishes_only_under_github_actions(zhin: Run, tmp_path: Path) -> None:
    cases_file(tmp_path)
    gh = zhin("eval", "case.yaml", "-j", "1", env=github_env(tmp_path))
    assert gh.returncode == 1
    assert len([a for a in annotations(gh.stderr) if "two-wrong" in a]) == 2
    assert "::error file=case.yaml,line=" in gh.stderr
    assert "two-wrong" in (tmp_path / "summary.md").read_text(encoding="utf-8")
    plain = zhin("eval", "case.yaml", "-j", "1")  # negative control: no GITHUB_ACTIONS, no workflow commands
    assert plain.returncode == 1 and annotations(plain.stderr) == []


def budget_project(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "fixtures" / "group-busy.jsonl", tmp_path / "busy.jsonl")
    (tmp_path / "zhin.yaml").write_text("{}\n", encoding="utf-8")
    return tmp_path


def test_budget_check_annotates_the_part_that_grew_at_its_budget_line(zhin: Run, tmp_path: Path) -> None:
    budget_project(tmp_path)
    assert zhin("budget", "update", "-s", "busy.jsonl", "-p", "openai").returncode == 0
    same = zhin("budget", "check", env=github_env(tmp_path))  # negative control: nothing grew, nothing annotated
    assert same.returncode == 0 and annotations(same.stderr) == []
    (tmp_path / "zhin.yaml").write_text("segments:\n  texts:\n    core.rules: " + "回答要简短，不要重复别人说过的话。" * 30 + "\n",
                                        encoding="utf-8")
    grown = zhin("budget", "check", env=github_env(tmp_path))
    assert grown.returncode == 1
    budget = tmp_path / "prompt-budget.yaml"
    found = annotations(grown.stderr)
    rules = [a for a in found if "core.rules" in a]
    # paths inside the working directory are relative (GitHub resolves them against the checkout)
    assert rules and rules[0].startswith(f"::error file=prompt-budget.yaml,line={line_of(budget, 'core.rules:')},")
    assert "grew from" in rules[0]
    # where the segment's text comes from: the zhin.yaml key that set it
    assert any(a.startswith("::notice file=zhin.yaml,line=3,") and "core.rules" in a for a in found)
    assert "core.rules" in (tmp_path / "summary.md").read_text(encoding="utf-8")


def test_budget_check_annotates_a_new_part_at_its_profile_and_its_add_entry(zhin: Run, tmp_path: Path) -> None:
    budget_project(tmp_path)
    assert zhin("budget", "update", "-s", "busy.jsonl", "-p", "openai").returncode == 0
    (tmp_path / "zhin.yaml").write_text("segments:\n  add:\n    - {id: house.rules, kind: system, text: 禁止刷屏。}\n",
                                        encoding="utf-8")
    result = zhin("budget", "check", env=github_env(tmp_path))
    assert result.returncode == 1
    found = annotations(result.stderr)
    budget = tmp_path / "prompt-budget.yaml"
    assert any(a.startswith(f"::error file=prompt-budget.yaml,line={line_of(budget, 'parts:')},") and "house.rules" in a
               for a in found)
    assert any(a.startswith("::notice file=zhin.yaml,line=3,") and "house.rules" in a for a in found)
    assert not any("core.persona" in a for a in found)  # negative control: unchanged parts are not annotated


def test_preset_lint_annotates_each_finding_at_its_line(zhin: Run, tmp_path: Path) -> None:
    community = ROOT / "fixtures" / "presets" / "community-zh.json"
    shutil.copy(community, tmp_path / "p.json")
    result = zhin("preset", "lint", "p.json", env=github_env(tmp_path))
    assert result.returncode == 1
    found = annotations(result.stderr)
    printed = [line for line in result.stdout.splitlines() if line.startswith("p.json:")]
    assert len(found) == len(printed) >= 10  # one annotation per finding
    for annotation, line in zip(found, printed, strict=True):
        number, code = line.split(":")[1], line.split(": ")[1].split()[0]
        assert annotation.startswith(("::error", "::warning", "::notice"))
        assert f"file=p.json,line={number}," in annotation and code in annotation
    levels = {a.split()[0] for a in found}
    assert levels == {"::warning", "::notice"}  # warnings as warnings, notes as notices
    assert "ZP012" in (tmp_path / "summary.md").read_text(encoding="utf-8")
    ignored = zhin("preset", "lint", "p.json", "--ignore", "ZP012", env=github_env(tmp_path))
    assert not any("ZP012" in a for a in annotations(ignored.stderr))  # an ignored rule is not annotated either
    plain = zhin("preset", "lint", "p.json")  # negative control: outside GitHub Actions, no workflow commands
    assert annotations(plain.stderr) == []


def test_junit_into_a_folder_that_cannot_be_made_is_one_line(zhin: Run, tmp_path: Path) -> None:
    case = ROOT / "eval_cases" / "adr-1-ten-messages.yaml"
    (tmp_path / "afile").write_text("", encoding="utf-8")
    result = zhin("eval", case, "-j", "1", "--junit", "afile/out.xml")
    assert result.returncode == 3 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()] and "afile/out.xml" in result.stderr
    made = zhin("eval", case, "-j", "1", "--junit", "new/out.xml")  # control: a folder that can be made is
    assert made.returncode == 0 and (tmp_path / "new" / "out.xml").is_file()
