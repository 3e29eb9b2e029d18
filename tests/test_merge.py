"""Merge & constraints (ADR 0041 §2–3): tie order, tool groups atomic (criterion 6), append-only, orphans."""

from __future__ import annotations

import copy

import pytest
from builders import SEC, T0, History, contents, replay, request_for_next, roles

from zhin_cli.core.errors import AssemblyError
from zhin_cli.pipeline.validate import validate


def tool_call_history() -> History:
    h = History()
    h.user(T0, "10007", "@小知 今晚下雨吗")
    h.assistant(T0 + 2 * SEC, "", calls=[("call_1", "weather")])
    h.result(T0 + 6 * SEC, "call_1", "小雨")
    # arrived while the tool ran (timestamp between call and result), stored after the result
    h.event(T0 + 4 * SEC, "member_joined", "10010 join 1048877509 on 09:00 by 10003")
    return h


def test_criterion_6_join_during_tool_call_lands_after_the_results_and_validates() -> None:
    h = tool_call_history()
    request = request_for_next(h, T0 + 8 * SEC)
    assert roles(request) == ["system", "user", "assistant", "tool", "system"]
    assert contents(request)[4] == "[state change] 10010 join 1048877509 on 09:00 by 10003"
    assert request.verdict.ok


def test_criterion_6_negative_control_naive_placement_gets_the_exact_openai_400() -> None:
    request = request_for_next(tool_call_history(), T0 + 8 * SEC)
    naive = copy.deepcopy(request.request)
    event = naive["messages"].pop(4)
    naive["messages"].insert(3, event)  # by timestamp: between the call and its result
    verdict = validate("openai-chat", naive, "gpt-4o")
    assert verdict.status == 400
    assert verdict.message == (
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. "
        "The following tool_call_ids did not have response messages: call_1"
    )


def test_tool_group_is_atomic_even_for_a_user_message_timed_inside_it() -> None:
    h = History()
    h.user(T0, "10007", "q")
    h.assistant(T0 + 2 * SEC, "", calls=[("call_1", "a"), ("call_2", "b")])
    h.user(T0 + 3 * SEC, "10002", "meanwhile")
    h.result(T0 + 5 * SEC, "call_1")
    h.result(T0 + 6 * SEC, "call_2")
    request = request_for_next(h, T0 + 8 * SEC)
    assert roles(request) == ["system", "user", "assistant", "tool", "tool", "user"]
    assert request.verdict.ok


def test_ties_state_before_user_before_tool_before_assistant() -> None:
    h = History()
    h.user(T0, "10002", "first", display_name="小明")
    h.user(T0 + SEC, "10002", "same time as the event", display_name="小明", platform_role="admin")
    h.event(T0 + SEC, "member_changed", '10001 changed 10002 role to "admin"')  # stored after, same ms
    request = request_for_next(h, T0 + 2 * SEC)
    assert roles(request)[1:] == ["user", "system", "user"]
    assert contents(request)[2].startswith("[state change] 10001 changed 10002 role")
    assert not any("system changed 10002" in c for c in contents(request))  # no synthesized duplicate


def test_late_event_is_appended_never_inserted_into_the_sent_prefix() -> None:
    h = History()
    h.user(T0, "10002", "a")
    h.user(T0 + 10 * SEC, "10003", "b")
    h.assistant(T0 + 11 * SEC, "reply 1")
    h.event(T0 + 5 * SEC, "member_changed", '10001 changed 10004 group_title to "夜猫子"')  # late: older than b
    h.user(T0 + 20 * SEC, "10002", "c")
    h.assistant(T0 + 21 * SEC, "reply 2")
    first, second = replay(h.session())
    sent = first.request["messages"]
    now = second.request["messages"]
    assert now[:2] == sent[:2]
    assert now[2]["content"] == sent[2]["content"].split("\n\n")[0]  # b, its runtime tail replaced
    assert [m["role"] for m in now] == ["system", "user", "user", "assistant", "system", "user"]
    assert now[4]["content"] == '[state change] 10001 changed 10004 group_title to "夜猫子"'


def test_negative_control_without_a_sent_prefix_the_late_event_sorts_by_time() -> None:
    h = History()
    h.user(T0, "10002", "a")
    h.user(T0 + 10 * SEC, "10003", "b")
    h.event(T0 + 5 * SEC, "member_changed", '10001 changed 10004 group_title to "夜猫子"')
    request = request_for_next(h, T0 + 21 * SEC)  # first request: nothing sent yet
    assert roles(request)[1:] == ["user", "system", "user"]


def test_orphan_tool_result_is_rejected_with_the_row() -> None:
    h = History()
    h.user(T0, "10002", "a")
    h.result(T0 + SEC, "call_x")
    with pytest.raises(AssemblyError, match=r"orphan tool result for 'call_x' \(row 2\)"):
        request_for_next(h, T0 + 2 * SEC)


def test_orphan_tool_call_is_rejected_with_the_row() -> None:
    h = History()
    h.user(T0, "10002", "a")
    h.assistant(T0 + SEC, "", calls=[("call_1", "a"), ("call_2", "b")])
    h.result(T0 + 2 * SEC, "call_1")
    with pytest.raises(AssemblyError, match=r"orphan tool call 'call_2' \(b\) in row 2"):
        request_for_next(h, T0 + 3 * SEC)


def test_tool_loop_continuation_only_appends() -> None:
    """Within one tool loop the next request is the previous one plus the call and its results."""
    h = History()
    h.user(T0, "10007", "q")
    h.assistant(T0 + SEC, "", calls=[("call_1", "a")])
    h.result(T0 + 2 * SEC, "call_1")
    h.assistant(T0 + 3 * SEC, "answer")
    first, second = replay(h.session())
    assert second.request["messages"][: len(first.request["messages"])] == first.request["messages"]
