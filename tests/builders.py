"""Small builders for sessions in tests: explicit facts, explicit times, no fixture files."""

from __future__ import annotations

from typing import Any

from zhin_cli.core.model import (
    Actor,
    AssistantMessage,
    BotFacts,
    EventMessage,
    Message,
    SceneFacts,
    Session,
    Summary,
    ToolResultMessage,
    UserMessage,
)
from zhin_cli.pipeline.assemble import AssembledRequest, Assembler
from zhin_cli.pipeline.config import Config, parse_config

T0 = 1761699600000  # 2025-10-29 09:00 Asia/Shanghai
MIN = 60_000
SEC = 1000
BOT = BotFacts(user_id="8596238", name="Zhin", group_nickname="小知", platform_role="admin")
SCENE = SceneFacts(scene_id="1048877509", scene_type="group", scene_name="测试群", owner_id="10001",
                   admins=("10003",), member_count=42, global_mute=False)


class History:
    """Appends messages with increasing row ids."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.summaries: list[Summary] = []

    def _row(self) -> int:
        return len(self.messages) + 1

    def user(self, ts: int, uid: str, text: str, *, message_id: str | None = None, reply_to: str | None = None,
             **facts: Any) -> UserMessage:
        defaults: dict[str, Any] = {"display_name": f"name{uid}", "platform_role": "member", "card": None,
                                    "title": None, "muted_until": 0}
        defaults.update(facts)
        actor = Actor(subject_id=uid, **defaults)
        message = UserMessage([{"type": "text", "text": text}], ts, actor, self._row(), message_id=message_id, reply_to=reply_to)
        self.messages.append(message)
        return message

    def assistant(self, ts: int, text: str = "ok", *, calls: list[tuple[str, str]] = (), message_id: str | None = None,  # type: ignore[assignment]
                  actor: Actor | None = None) -> AssistantMessage:
        content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        content += [{"type": "toolCall", "id": cid, "name": name, "arguments": {"q": cid}} for cid, name in calls]
        message = AssistantMessage(content, ts, self._row(), assistant_actor=actor, message_id=message_id, model="gpt-4o")
        self.messages.append(message)
        return message

    def result(self, ts: int, call_id: str, text: str = "done") -> ToolResultMessage:
        message = ToolResultMessage(call_id, "tool", [{"type": "text", "text": text}], False, ts, self._row())
        self.messages.append(message)
        return message

    def event(self, ts: int, kind: str, line: str) -> EventMessage:
        message = EventMessage(kind, line, ts, self._row())
        self.messages.append(message)
        return message

    def summary(self, ts: int, anchor_row: int, text: str = "earlier talk") -> None:
        self.summaries.append(Summary(ts, text, anchor_row))

    def session(self, *, scene: SceneFacts = SCENE, bot: BotFacts = BOT) -> Session:
        return Session("s#1", "icqq:8596238:group:1048877509", "Asia/Shanghai", bot, scene,
                       list(self.messages), summaries=list(self.summaries))


def reply_gap(between: int) -> History:
    """The bot answers, then ``between`` member messages a second apart, then the bot answers again (one cache
    group): how many blocks an Anthropic breakpoint must look back across."""
    h = History()
    h.user(T0, "10002", "早", display_name="小明")
    h.assistant(T0 + 5 * SEC, "好", message_id="p-2")
    for n in range(between):
        h.user(T0 + (10 + n) * SEC, "10003", f"第{n}条", display_name="Lily")
    h.assistant(T0 + (20 + between) * SEC, "嗯", message_id="p-9")
    return h


def answered_chat(turns: int, gap: int = MIN) -> History:
    """``turns`` member messages from 10002, each answered by the bot: two stored messages per turn."""
    h = History()
    for i in range(turns):
        h.user(T0 + i * gap, "10002", f"m{i}")
        h.assistant(T0 + i * gap + 500, f"r{i}")
    return h


def assembler(config: dict[str, Any] | Config | None = None, **options: Any) -> Assembler:
    cfg = config if isinstance(config, Config) else parse_config(config or {})
    registry, _ = cfg.registry()
    return Assembler(registry, cfg, **options)


def replay(session: Session, config: dict[str, Any] | None = None, **options: Any) -> list[AssembledRequest]:
    return list(assembler(config, **options).replay(session))


def request_for_next(history: History, ts: int, config: dict[str, Any] | None = None, **options: Any) -> AssembledRequest:
    """The request made at ``ts`` after everything in ``history`` (as if the bot answers now)."""
    history.assistant(ts, "(reply)")
    return replay(history.session(), config, **options)[-1]


def contents(request: AssembledRequest) -> list[str]:
    return [m.get("content") or "" for m in request.request["messages"]]


def roles(request: AssembledRequest) -> list[str]:
    return [m["role"] for m in request.request["messages"]]


class TimeOnlyAssembler(Assembler):
    """A broken assembler for negative controls: merges by time alone, ignoring what was already sent."""

    def assemble(self, session, upto, request_time, **kwargs):  # type: ignore[no-untyped-def]
        kwargs["sent_prefix"] = None
        return super().assemble(session, upto, request_time, **kwargs)


def late_event_history() -> History:
    """A leave event delivered after the bot already replied to later messages."""
    h = History()
    h.user(T0, "10002", "a")
    h.user(T0 + 10 * SEC, "10003", "b")
    h.assistant(T0 + 11 * SEC, "r1")
    h.event(T0 + 5 * SEC, "member_left", "10008 leave 1048877509 on 09:00 by 10001")  # delivered late
    h.user(T0 + 20 * SEC, "10002", "c")
    h.assistant(T0 + 21 * SEC, "r2")
    return h
