"""The CI comment reads a gate's --json and GitHub's answers as any JSON: a member of the wrong type is read as
empty or becomes one GitHubApiError line, never a traceback (issue 32: typed, narrowed readers)."""

import json
from pathlib import Path

import pytest

from zhin_cli.tools.ci import comment
from zhin_cli.tools.ci.comment import GateRun, GitHubApiError, eval_section, find_marked_comment, options_from


def _eval_run(reasons: object) -> GateRun:
    case = {"case": "c1", "base": "pass", "head": "fail", "change": "regressed", "providers": [], "reasons": reasons}
    return GateRun("eval", ("eval",), 1, {"cases": [case], "regressions": 1}, "")  # type: ignore[list-item]


def test_reasons_that_are_a_list_are_joined() -> None:
    # negative control for the test below: the reasons column does show reasons
    lines = eval_section(_eval_run(["prompt grew", "tool dropped"]))
    assert any("prompt grew; tool dropped" in line for line in lines)


def test_reasons_of_the_wrong_type_read_as_none() -> None:
    # before: "; ".join(5) raised TypeError while the comment was being written
    lines = eval_section(_eval_run(5))
    row = next(line for line in lines if line.startswith("| c1 |"))
    assert row.endswith("|  |")


def _comments(monkeypatch: pytest.MonkeyPatch, comment_id: object) -> None:
    page = [{"id": comment_id, "body": f"report {comment.MARKER}"}]
    monkeypatch.setattr(comment, "api_call", lambda *args, **kwargs: page)


def test_a_marked_comment_is_found_by_its_id(monkeypatch: pytest.MonkeyPatch) -> None:
    _comments(monkeypatch, 42)  # negative control: a numeric id is read
    assert find_marked_comment("https://api.github.invalid", "t", "o/r", 7) == 42


@pytest.mark.parametrize("bad", [None, [1], "abc"])
def test_a_comment_id_that_is_not_a_number_is_one_api_error(monkeypatch: pytest.MonkeyPatch, bad: object) -> None:
    # before: int(None) / int([1]) raised TypeError, int("abc") ValueError: a traceback in the action's log
    _comments(monkeypatch, bad)
    with pytest.raises(GitHubApiError, match="a comment without a numeric id"):
        find_marked_comment("https://api.github.invalid", "t", "o/r", 7)


def test_options_fill_from_the_event_where_the_arguments_are_empty(tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 12, "base": {"sha": "b0"}, "head": {"sha": "h1"}}}))
    environ = {"GITHUB_EVENT_PATH": str(event), "GITHUB_REPOSITORY": "o/r"}
    values: dict[str, str | int | bool | None] = {"eval": "cases more", "base": "", "head": "", "pull_request": None}
    options = options_from(values, environ)
    assert (options.eval_paths, options.base, options.head, options.pull_request, options.repository) == (
        ("cases", "more"), "b0", "h1", 12, "o/r")
    # negative control: given arguments win over the event
    given = options_from({**values, "base": "main", "pull_request": 3}, environ)
    assert (given.base, given.head, given.pull_request) == ("main", "h1", 3)


def test_an_event_whose_refs_are_not_objects_gives_no_refs(tmp_path: Path) -> None:
    # before: event.get("base", {}).get("sha") raised AttributeError on a string base
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": [1], "base": "b0", "head": None}}))
    options = options_from({}, {"GITHUB_EVENT_PATH": str(event)})
    assert (options.base, options.head, options.pull_request) == ("", "", None)
