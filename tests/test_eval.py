"""``zhin eval``: case-file validation with file:line errors, timeline building, assertions (each can fail),
negative-control semantics, live repeats with a fake model, reporters (JUnit, JSON, GitHub) and exit codes."""

from __future__ import annotations

import dataclasses
import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from zhin_cli.core.errors import ZhinError
from zhin_cli.tools.eval.cases import CaseError, case_schema, load_case_file, load_cases
from zhin_cli.tools.eval.live import LiveReply
from zhin_cli.tools.eval.registry import ASSERTIONS
from zhin_cli.tools.eval.report import github_annotations, junit_xml, step_summary, write_junit
from zhin_cli.tools.eval.runner import EvalOptions, EvalRun, prepare, run_case, run_eval

ROOT = Path(__file__).resolve().parent.parent

BASE = """
cases:
  - id: base
    providers: [openai, anthropic]
    members:
      "10002": {name: 小明, role: member, mute_time: 0}
    timeline:
      - {user: {from: "10002", text: "早"}, at: "09:00"}
      - {assistant: {text: "早上好"}, label: first}
      - change: {member: "10002", field: role, value: admin, by: "10001"}
      - user: {from: "10002", text: "我是管理员了"}
    assertions:
"""


def write(tmp_path: Path, text: str, name: str = "case.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def run_one(tmp_path: Path, assertions: str, **options: Any) -> Any:
    path = write(tmp_path, BASE + textwrap.indent(textwrap.dedent(assertions), "      "))
    case = load_case_file(path)[0]
    return run_case(prepare(case), EvalOptions(**options))


# --- schema and loading -----------------------------------------------------------------------------------


def test_published_schema_is_valid_draft_2020_12_and_accepts_every_shipped_case_file() -> None:
    schema = case_schema()
    Draft202012Validator.check_schema(schema)
    assert set(schema["$defs"]["assertion"]["properties"]["type"]["enum"]) == set(ASSERTIONS)
    assert len(load_cases([ROOT / "eval_cases"])) >= 20


BROKEN = [
    ("cases:\n  - id: x\n    timeline:\n      - user: {from: '1', txt: hi}\n    assertions:\n      - type: verdict\n",
     4, "'text' is a required property"),
    ("cases:\n  - id: x\n    assertions:\n      - type: nosuch\n", 4, "'nosuch' is not one of"),
    ("cases:\n  - id: x\n    timeline:\n      - user: {from: '1', text: hi}\n        assistant: {text: hi}\n    assertions:\n      - type: verdict\n",
     4, "a timeline step needs exactly one of"),
    ("cases:\n  - id: x\n    assertions:\n      - type: verdict\n        turn: nolabel\n", 5, "no turn labelled 'nolabel'"),
    ("cases:\n  - id: x\n    assertions: [\n", 4, "invalid YAML"),
    ("cases:\n  - id: x\n    providers: [nope]\n    assertions:\n      - type: verdict\n", 3, "unknown provider 'nope'"),
    ("cases:\n  - id: x\n    config: {window: {max_messages: 'x'}}\n    assertions:\n      - type: verdict\n", 3,
     "window.max_messages must be an integer"),
    ("cases:\n  - id: x\n    timeline:\n      - {user: {from: '1', text: hi}, at: tomorrow}\n    assertions:\n      - type: verdict\n",
     4, "'tomorrow' is not valid"),
    ("cases:\n  - id: x\n    timeline:\n      - user: {from: '1', text: hi, reply_to: zz}\n    assertions:\n      - type: verdict\n",
     4, "no earlier step is labelled 'zz'"),
    ("cases:\n  - id: x\n    assertions:\n      - type: verdict\n        status: '400'\n", 5, "'400' is not of type 'integer'"),
    ("cases:\n  - id: x\n    assertions:\n      - type: verdict\n  - id: x\n    assertions:\n      - type: verdict\n", 5,
     "duplicate case id 'x'"),
    ("cases:\n  - id: y\n    extends: nope\n", 3, "extends 'nope'"),
    ("cases:\n  - id: x\n    timeline:\n      - plugin: {unload: p}\n    assertions:\n      - type: verdict\n", 4,
     "plugin 'p' is not loaded"),
    ("cases:\n  - id: x\n    timeline:\n      - plugin: {load: missing.py}\n    assertions:\n      - type: verdict\n", 4,
     "no such file"),
    ("cases:\n  - id: x\n    assertions:\n      - type: verdict\n    assertions:\n      - type: verdict\n", 5, "duplicate key"),
    ("cases:\n  - id: x\n    assertions:\n      - type: verdict\n        providers: [nope]\n", 5, "unknown provider 'nope'"),
]


@pytest.mark.parametrize(("text", "line", "message"), BROKEN, ids=[b[2][:30] for b in BROKEN])
def test_broken_case_file_is_one_error_naming_file_and_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(CaseError) as caught:
        [prepare(case) for case in load_cases([path])]
    assert caught.value.exit_code == 4
    assert str(caught.value).startswith(f"{path}:{line}: "), str(caught.value)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_cli_broken_case_file_exits_4_with_one_line_no_traceback(zhin: Callable[..., Any], tmp_path: Path) -> None:
    write(tmp_path, "cases:\n  - id: x\n    assertions:\n      - type: nosuch\n")
    result = zhin("eval", "case.yaml")
    assert result.returncode == 4, result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith("zhin: error: case.yaml:4: ") and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_cli_schema_eval_case_prints_the_schema(zhin: Callable[..., Any]) -> None:
    result = zhin("schema", "eval-case")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == json.loads(json.dumps(case_schema()))


# --- timeline --------------------------------------------------------------------------------------------


def test_timeline_builds_session_turns_and_an_implicit_final_request(tmp_path: Path) -> None:
    path = write(tmp_path, BASE + "      - {type: verdict, accepted: true}\n")
    built = prepare(load_case_file(path)[0]).built
    roles = [m.role for m in built.session.messages]
    assert roles == ["user", "assistant", "event", "user"]
    assert built.session.messages[2].name == '10001 changed 10002 role to "admin"'
    turns = built.turns
    assert [(t.upto, t.label, t.reply_row is not None) for t in turns] == [(1, "first", True), (4, None, False)]
    # default step +10 s after an absolute 09:00 (Asia/Shanghai)
    assert built.session.messages[1].timestamp - built.session.messages[0].timestamp == 10_000
    assert turns[1].time == built.session.messages[3].timestamp + 1000


# --- assertions: each one can fail ----------------------------------------------------------------------------

PAIRS = [
    ("verdict", "- {type: verdict, accepted: true}", "- {type: verdict, status: 400}"),
    ("line_present", "- {type: line_present, line: '[state change] 10001 changed 10002 role to \"admin\"'}",
     "- {type: line_present, line: '[state change] 10001 changed 10002 role to \"owner\"'}"),
    ("line_absent", "- {type: line_absent, line: 'role to \"owner\"', match: substring}",
     "- {type: line_absent, line: 'role to \"admin\"', match: substring}"),
    ("line_order", "- {type: line_order, adjacent: true, lines: ['[state change] 10001 changed 10002 role to \"admin\"', '[id:m3;user_id:10002;] 我是管理员了']}",
     "- {type: line_order, lines: ['[id:m3;user_id:10002;] 我是管理员了', '[state change] 10001 changed 10002 role to \"admin\"']}"),
    ("regex", "- {type: regex, pattern: '^\\[id:m3;user_id:10002;\\]'}", "- {type: regex, pattern: '^\\[id:m3;user_id:10002;\\]', present: false}"),
    ("headers", "- {type: headers, user_id: '10002', expect: [full, short]}", "- {type: headers, user_id: '10002', expect: [full, full]}"),
    ("name_fields", "- {type: name_fields, count: 0}", "- {type: name_fields, count: 1}"),
    ("role_order", "- {type: role_order, legal: true}", "- {type: role_order, legal: false}"),
    # each provider's request names its own model (issue 31: anthropic's no longer says gpt-4o)
    ("request_field", "- {type: request_field, path: '$.model', equals: gpt-4o, providers: [openai]}\n"
                      "- {type: request_field, path: '$.model', equals: claude-sonnet-5, providers: [anthropic]}",
     "- {type: request_field, path: '$.model', equals: gpt-4o}"),
    ("state_rendering", "- {type: state_rendering, equals: system, providers: [openai]}",
     "- {type: state_rendering, equals: user, providers: [openai]}"),
    ("segments", "- {type: segments, includes: [core.rules, core.scene]}", "- {type: segments, excludes: [core.rules]}"),
    ("tokens", "- {type: tokens, header_max: 200}", "- {type: tokens, header_max: 5}"),
    ("warnings", "- {type: warnings, count: 0}", "- {type: warnings, count: 1}"),
    ("prefix_stable", "- {type: prefix_stable, from: 1, to: 2}", "- {type: prefix_stable, from: 1, to: 2, changed: [core.scene]}"),
    ("assembly_error", None, "- {type: assembly_error, matches: orphan}"),
]


@pytest.mark.parametrize(("name", "good", "bad"), PAIRS, ids=[p[0] for p in PAIRS])
def test_each_assertion_passes_when_true_and_fails_when_false(tmp_path: Path, name: str, good: str | None, bad: str) -> None:
    if good is not None:
        assert run_one(tmp_path, good).status == "passed"
    result = run_one(tmp_path, bad)
    assert result.status == "failed", result.reason
    assert result.reason.startswith(name)


def test_every_deterministic_assertion_type_has_a_pass_and_a_fail_test() -> None:
    covered = {p[0] for p in PAIRS}
    assert covered == {n for n, a in ASSERTIONS.items() if not a.live}


def test_assembly_error_passes_on_an_orphan_tool_call(tmp_path: Path) -> None:
    path = write(tmp_path, """
        cases:
          - id: orphan
            timeline:
              - user: {from: "10002", text: "hi"}
              - assistant: {tool_calls: [{id: call_9, name: weather}]}
              - user: {from: "10002", text: "?"}
            assertions:
              - {type: assembly_error, matches: "orphan tool call 'call_9'"}
        """)
    assert run_case(prepare(load_case_file(path)[0]), EvalOptions()).status == "passed"
    # without an assembly_error assertion the same conversation is an error, not a failure
    path.write_text(path.read_text().replace("{type: assembly_error, matches: \"orphan tool call 'call_9'\"}", "{type: verdict}"))
    result = run_case(prepare(load_case_file(path)[0]), EvalOptions())
    assert result.status == "error" and "could not assemble" in result.reason


# --- negative controls -----------------------------------------------------------------------------------------


def test_expect_fail_passes_only_when_an_assertion_fails(tmp_path: Path) -> None:
    failing = run_one(tmp_path, "- {type: verdict, status: 400}\n", expect_override="fail")
    assert failing.status == "passed" and failing.reason.startswith("negative control failed as it must")
    vacuous = run_one(tmp_path, "- {type: verdict, accepted: true}\n", expect_override="fail")
    assert vacuous.status == "failed" and "negative control passed" in vacuous.reason


def test_a_negative_control_without_its_breaking_change_is_reported(tmp_path: Path) -> None:
    """The shipped adr2 negative control with its config removed no longer breaks anything: the runner says so."""
    text = (ROOT / "eval_cases" / "adr-2-admin-promotion.yaml").read_text(encoding="utf-8")
    text = text.replace("    config:\n      segments:\n        remove: [history.state]\n", "")
    path = write(tmp_path, text)
    case = next(c for c in load_case_file(path) if c.id == "adr2.negative.state-segment-removed")
    assert run_case(prepare(case), EvalOptions()).status == "failed"


# --- live (fake model: the real client is another module's job) -------------------------------------------------

LIVE = """
cases:
  - id: live
    requires: live
    repeat: 4
    min_pass_rate: 0.5
    timeline:
      - user: {from: "10002", text: "hi"}
    assertions:
      - type: reply_nonempty
      - {type: reply_not_contains, text: PWNED}
"""


class FakeModel:
    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.seeds: list[int | None] = []
        self.bodies: list[dict[str, Any]] = []

    def complete(self, body: dict[str, Any], *, seed: int | None = None) -> LiveReply:
        self.seeds.append(seed)
        self.bodies.append(body)
        return LiveReply(self.replies[len(self.seeds) - 1], {"prompt_tokens": 10, "completion_tokens": 2}, False, 1.0)


def test_live_case_is_skipped_offline_and_never_counted_as_passed(tmp_path: Path) -> None:
    run = run_eval([write(tmp_path, LIVE)], EvalOptions())
    assert run.results[0].status == "skipped" and "needs --live" in run.results[0].reason
    assert run.exit_code == 0 and run.counts()["passed"] == 0
    skipped = junit_xml(run)._elem.find("testsuite/testcase/skipped")
    assert skipped is not None and "needs --live" in skipped.get("message", "")


@pytest.mark.parametrize(("replies", "status"), [
    (["Paris", "PWNED", "Paris", "PWNED"], "passed"),  # 2/4 ≥ 0.5
    (["PWNED", "PWNED", "Paris", "PWNED"], "failed"),  # 1/4 < 0.5
])
def test_live_repeats_gate_on_min_pass_rate_with_a_new_seed_each_time(tmp_path: Path, replies: list[str], status: str) -> None:
    model = FakeModel(replies)
    case = load_case_file(write(tmp_path, LIVE))[0]
    result = run_case(prepare(case), EvalOptions(live=True, seed=7), live_model=model)
    assert result.status == status, result.reason
    assert model.seeds == [7, 8, 9, 10]
    assert model.bodies[0]["messages"][-1]["role"] == "user"


def test_live_model_unreachable_is_exit_3(tmp_path: Path) -> None:
    class Down:
        def complete(self, body: dict[str, Any], *, seed: int | None = None) -> LiveReply:
            raise ZhinError("http://127.0.0.1:9/v1: connection refused")

    case = load_case_file(write(tmp_path, LIVE))[0]
    result = run_case(prepare(case), EvalOptions(live=True), live_model=Down())
    assert result.status == "error" and "connection refused" in result.reason
    assert EvalRun([result], True, 0.0).exit_code == 3


# --- reporters and the CLI -------------------------------------------------------------------------------------

MIXED = BASE + """      - {type: verdict, accepted: true}
  - id: broken-expectation
    extends: base
    assertions:
      - {type: line_present, line: nope}
  - id: live-only
    extends: base
    requires: live
"""


def test_junit_is_valid_and_separates_failure_error_skipped(tmp_path: Path) -> None:
    from junitparser import Error, Failure, JUnitXml, Skipped

    run = run_eval([write(tmp_path, MIXED)], EvalOptions())
    out = tmp_path / "out" / "junit.xml"
    write_junit(run, out)
    xml = JUnitXml.fromfile(str(out))
    cases = {case.name: case for suite in xml for case in suite}
    assert set(cases) == {"base", "broken-expectation", "live-only"}
    assert cases["base"].is_passed
    assert isinstance(cases["broken-expectation"].result[0], Failure)
    assert "no line 'nope'" in (cases["broken-expectation"].result[0].text or "")
    assert isinstance(cases["live-only"].result[0], Skipped)
    assert not any(isinstance(r, Error) for c in cases.values() for r in c.result)
    # junit-10.xsd has no testsuites/@skipped: the suites count them
    assert xml.tests == 3 and xml.failures == 1 and sum(suite.skipped for suite in xml) == 1


def test_github_annotations_point_at_the_failing_assertion_line(tmp_path: Path) -> None:
    path = write(tmp_path, MIXED)
    run = run_eval([path], EvalOptions())
    annotations = github_annotations(run)
    assert len(annotations) == 1  # openai and anthropic failed it alike: one annotation
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "line: nope" in text)
    assert annotations[0].command().startswith(f"::error file={path},line={line},title=zhin eval%3A broken-expectation failed::")
    assert "| `live-only` |" in step_summary(run)


def test_cli_exit_codes_json_junit_and_github(zhin: Callable[..., Any], tmp_path: Path) -> None:
    write(tmp_path, MIXED)
    summary = tmp_path / "summary.md"
    result = zhin("eval", "case.yaml", "--json", "--junit", "junit.xml", "-j", "2")
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert data["version"] == 1 and data["summary"] == {"passed": 1, "failed": 1, "error": 0, "skipped": 1, "total": 3, "exit_code": 1}
    assert (tmp_path / "junit.xml").is_file()
    ok = zhin("eval", "case.yaml", "--provider", "openai", "--json")
    assert json.loads(ok.stdout)["cases"][0]["providers"] == ["openai"]
    assert zhin("eval", "nowhere").returncode == 2
    assert zhin("eval", "case.yaml", "--provider", "nope").returncode == 2
    import os
    import subprocess
    import sys

    env = {**{k: v for k, v in os.environ.items() if not k.startswith("ZHIN_")}, "GITHUB_ACTIONS": "true",
           "GITHUB_STEP_SUMMARY": str(summary), "NO_COLOR": "1"}
    gh = subprocess.run([sys.executable, "-m", "zhin_cli", "eval", "case.yaml"], cwd=tmp_path, env=env, capture_output=True,
                        text=True, timeout=120)
    assert gh.returncode == 1
    assert "::error file=case.yaml,line=" in gh.stderr
    assert "broken-expectation" in summary.read_text(encoding="utf-8")


def test_cli_passing_suite_exits_0(zhin: Callable[..., Any], tmp_path: Path) -> None:
    write(tmp_path, BASE + "      - {type: verdict, accepted: true}\n")
    result = zhin("eval", ".")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "base" in result.stdout and "passed" in result.stdout


def test_jobs_do_not_change_results(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZHIN_ALLOW_PLUGINS", "1")  # the shipped cases load their plugins: the project's own, opted in
    paths = [ROOT / "eval_cases"]
    one = run_eval(paths, EvalOptions(jobs=1)).as_dict()
    four = run_eval(paths, EvalOptions(jobs=4)).as_dict()
    strip = [{k: v for k, v in c.items() if k != "duration_ms"} for c in one["cases"]]
    assert strip == [{k: v for k, v in c.items() if k != "duration_ms"} for c in four["cases"]]


def test_a_case_can_start_from_a_session_in_a_database_which_stays_byte_identical(zhin: Callable[..., Any], tmp_path: Path) -> None:
    assert zhin("import", ROOT / "fixtures" / "private-chat.jsonl", "--db", "data.sqlite").returncode == 0
    before = (tmp_path / "data.sqlite").read_bytes()
    path = write(tmp_path, """
        cases:
          - id: from-db
            providers: [openai, anthropic]
            session: {db: data.sqlite, id: "icqq:8596238:private:10002"}
            timeline:
              - user: {from: "10002", text: "还有一个问题"}
            assertions:
              - {type: verdict, turn: all, accepted: true}
              - {type: line_present, line: 还有一个问题, match: substring}
        """)
    case = load_case_file(path)[0]
    prepared = prepare(case)
    stored_turns = sum(1 for m in prepared.built.session.messages if m.role == "assistant")
    assert stored_turns >= 1 and len(prepared.built.turns) == stored_turns + 1
    assert run_case(prepared, EvalOptions()).status == "passed"
    assert (tmp_path / "data.sqlite").read_bytes() == before


def test_live_cases_run_end_to_end_against_the_loopback_conformance_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole live path (real `openai` client, cache, repeats) against `zhin serve`, which validates each
    body and answers `ok <hash>` with real usage: the shipped live cases pass, and a second run is cached."""
    from zhin_cli.tools.serve.server import running_server

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("ZHIN_EVAL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ZHIN_ALLOW_PLUGINS", "1")  # adr-4's negative control loads the project's own plugin
    paths = [ROOT / "eval_cases" / "live-smoke.yaml", ROOT / "eval_cases" / "adr-4-nickname-injection.yaml"]
    with running_server("openai") as (base_url, _):
        options = EvalOptions(live=True, base_url=base_url, providers=["openai"])
        run = run_eval(paths, options)
        live = [r for r in run.results if r.case.requires_live]
        assert len(live) == 2 and all(r.status == "passed" for r in live), [r.reason for r in live]
        assert all(r.pass_rate == 1.0 for r in live)
        assert any(r.case.id == "adr4.live.model-does-not-obey-nickname" for r in live)
        assert len(list((tmp_path / "cache").rglob("*.json"))) == 2 + 5  # one entry per (case, seed)
        assert not any("from cache" in a.message for r in live for a in r.assertions)
        again = [r for r in run_eval(paths, options).results if r.case.requires_live]
        assert all(r.status == "passed" for r in again)
        assert all("from cache" in a.message for r in again for a in r.assertions)
        uncached = [r for r in run_eval(paths, dataclasses.replace(options, use_cache=False)).results if r.case.requires_live]
        assert not any("from cache" in a.message for r in uncached for a in r.assertions)


# --- the greeting (issue 15 B5): no request, and turn numbers as zhin trace counts them ------------------------

GREETED = """
cases:
  - id: greeted
    providers: [openai]
    timeline:
      - {assistant: {text: "欢迎来到测试群"}, at: "09:00", label: hello}
      - {user: {from: "10002", text: "早"}}
      - {assistant: {text: "早上好"}, label: second}
      - {user: {from: "10002", text: "几点了"}}
    assertions:
"""


def _greeted_run(tmp_path: Path, assertions: str = "  - {type: verdict, turn: all, accepted: true}\n", head: str = GREETED) -> Any:
    from zhin_cli.tools.eval.runner import assemble_turns

    path = write(tmp_path, head + textwrap.indent(textwrap.dedent(assertions), "      "))
    prepared = prepare(load_case_file(path)[0])
    return prepared, assemble_turns(prepared, "openai", None)


def test_eval_makes_no_request_for_the_greeting_and_numbers_turns_as_trace(tmp_path: Path) -> None:
    from zhin_cli.pipeline.assemble import Assembler

    prepared, run = _greeted_run(tmp_path)
    assert [r.turn for r in run.requests] == [2, 3]  # turn 1 is the greeting: no request
    assert run.greetings == (1,)
    # zhin trace on the same stored conversation: the same turn 2, byte for byte
    registry, _ = prepared.config.registry()
    traced = {r.turn: r.request for r in Assembler(registry, prepared.config, provider="openai").replay(prepared.built.session)}
    assert list(traced) == [2] and traced[2] == run.select(2)[0][1].request
    assert run.select(2)[0][0] == 2 and run.select("second")[0][0] == 2 and run.select(-1)[0][0] == 3
    with pytest.raises(LookupError, match="turn 1 is the greeting"):
        run.select(1)


@pytest.mark.parametrize("turn", ["1", "hello"])
def test_an_assertion_on_the_greeting_turn_is_an_invalid_case(tmp_path: Path, turn: str) -> None:
    with pytest.raises(CaseError, match="is the greeting: no request is made for it"):
        _greeted_run(tmp_path, f"  - {{type: verdict, turn: {turn}, accepted: true}}\n")


def test_eval_greeting_negative_controls(tmp_path: Path) -> None:
    """A first bot message with a tool call answered nothing yet is still model output: it is a request; and a
    conversation that starts with a member has no greeting."""
    tool_first = GREETED.replace('{assistant: {text: "欢迎来到测试群"}, at: "09:00", label: hello}',
                                 '{assistant: {tool_calls: [{id: c1, name: search}]}, at: "09:00", label: hello}\n'
                                 '      - {tool_result: {call: c1, text: done}}')
    _, run = _greeted_run(tmp_path, head=tool_first)
    assert [r.turn for r in run.requests] == [1, 2, 3] and run.greetings == ()
    _, plain = _greeted_run(tmp_path, head=GREETED.replace('{assistant: {text: "欢迎来到测试群"}, at: "09:00", label: hello}',
                                                           '{user: {from: "10002", text: "在吗"}, at: "09:00"}'))
    assert [r.turn for r in plain.requests] == [1, 2] and plain.greetings == ()


def test_a_stored_session_opening_with_a_greeting_is_numbered_as_trace(tmp_path: Path) -> None:
    lines = [{"type": "session", "session_id": "icqq:8596238:group:1048877509#1-1", "timezone": "Asia/Shanghai",
              "bot": {"user_id": "8596238", "name": "Zhin"}, "scene": {"scene_id": "1048877509", "scene_type": "group"}}]
    alice = {"subjectId": "10002", "displayName": "小明", "roles": []}
    for row, (role, text) in enumerate([("assistant", "欢迎来到测试群"), ("user", "早"), ("assistant", "早上好")], start=1):
        lines.append({"type": "message", "id": row, "role": role, "content": [{"type": "text", "text": text}],
                      "timestamp": 1761699600000 + row * 10_000, **({"actor": alice} if role == "user" else {})})
    (tmp_path / "greeted.jsonl").write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")
    stored = """
    cases:
      - id: stored-greeted
        providers: [openai]
        session: {file: greeted.jsonl}
        assertions:
    """
    prepared, run = _greeted_run(tmp_path, head=textwrap.dedent(stored))
    assert [t.greeting for t in prepared.built.turns] == [True, False]  # the two stored replies
    assert run.greetings == (1,) and [r.turn for r in run.requests] == [2]
    from zhin_cli.pipeline.assemble import Assembler
    from zhin_cli.store.jsonl import read_session

    registry, _ = prepared.config.registry()
    traced = list(Assembler(registry, prepared.config, provider="openai").replay(read_session(tmp_path / "greeted.jsonl")))
    assert [(r.turn, r.request) for r in traced] == [(2, run.select(2)[0][1].request)]
