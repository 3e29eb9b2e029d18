"""A synthetic, realistic group-chat session (``zhin fixtures synth``; docs/economy.md).

Deterministic for a seed (one ``random.Random(seed)``, no clock, no global state). The distributions, chosen
to look like a busy QQ group rather than to flatter any layout:

* **Speakers** — Zipf-like popularity over the members (weight ``1 / rank^1.1``): a few members talk a lot,
  a long tail speaks rarely or never.
* **Bursts** — a chosen speaker sends a run of messages, length geometric (``p = 0.45``, mean ≈ 2.2, cap 15);
  gaps inside a run are exponential (mean 12 s), between runs exponential (mean 75 s).
* **Lulls and days** — after a run, with probability 0.05 a lull (exponential, mean 40 min); the group is
  quiet from 01:00 to a random time between 08:00 and 10:00 local, so sessions cross day boundaries.
* **Replies** — 12 % of member messages reply to one of the last 20 messages that have a platform id.
* **Bot turns** — a member message @-mentions the bot with probability ``bot_rate``; the bot answers
  3–15 s later. With probability ``tool_rate`` the answer is a tool loop first (one call, or two calls in one
  message with probability 0.2; a second round with probability 0.15), each result right after its call.
* **Member changes** — after a member message, with probability ``event_rate``, one event (join 30 %,
  leave 20 %, card 25 %, role 10 %, mute 10 %, title 5 %); the actor facts of later messages follow it.
* **Compactions** — when more than ``compact_every`` rows have passed since the last summary's anchor, the
  next bot turn is preceded by a summary anchored 5 rows before the @-mention (as upstream compacts).

``messages`` counts every message row (member, bot, tool result, event); the last row is a bot reply.

``synthesize_lines`` gives the JSONL objects as they are made (``zhin fixtures synth`` writes its first line at
once, and a 150k-message file never exists as a session in memory); ``synthesize`` is the same lines parsed into a
``Session``. Both parse and pair every row as the JSONL reader would.
"""

from __future__ import annotations

import random
from bisect import insort
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from zhin_cli.core.errors import UsageError
from zhin_cli.core.model import BotFacts, Message, SceneChange, SceneFacts, Session, Summary
from zhin_cli.store.payload import ToolPairing, check_tool_pairing, message_from_payload

TIMEZONE = "Asia/Shanghai"
START = datetime(2026, 3, 2, 9, 0, tzinfo=ZoneInfo(TIMEZONE))  # a Monday morning; fixed, never "now"
BOT_ID = "8596238"
BOT_ACTOR = {"subjectId": BOT_ID, "displayName": "Zhin", "platformRole": "admin", "card": "小知"}
ZIPF_EXPONENT = 1.1
BURST_P = 0.45
BURST_CAP = 15
GAP_IN_BURST_S = 12.0
GAP_BETWEEN_S = 75.0
LULL_P = 0.05
LULL_MEAN_S = 40 * 60.0
REPLY_P = 0.12
EVENT_WEIGHTS = {"join": 30, "leave": 20, "card": 25, "role": 10, "mute": 10, "title": 5}

_NAMES = ("小明", "阿杰", "Lily", "老王", "糖糖", "小胖", "路人甲", "阿May", "大橘", "Kevin", "星星", "老张", "木木",
          "Echo", "团子", "阿飞", "小鹿", "饭团", "Tom", "雪碧", "阿珍", "柚子", "老李", "Momo", "豆豆", "大熊",
          "小雨", "Jason", "布丁", "阿强", "栗子", "夏天", "Coco", "小白", "阿亮", "月亮", "Leo", "可乐", "桃子")
_CARDS = ("明明", "专业代练", "莉莉｜管理", "摸鱼中", "今天也要加油", "国服上分中", "退坑了", "萌新求带", "夜猫子",
          "勿扰", "上班中", "鸽王", "学生党", "深渊满星", "肝帝", "佛系玩家")
_TITLES = ("老玩家", "群宠", "夜猫子", "活跃分子", "技术大佬", "萌新")
_PHRASES = ("早啊各位", "今天降温了，大家出门多穿点", "昨晚深渊更新了，你们打了没", "我卡在12-3下半了", "哈哈哈哈",
            "那个boss一直瞬移，打得我血压拉满", "刚看了个攻略，说要带万叶聚怪", "有人一起组队吗", "+1", "在吗",
            "下班了下班了", "中午吃什么", "这个活动奖励还挺多的", "我觉得还行吧", "周末有空的一起开黑", "笑死",
            "图片", "确实", "不是吧", "刚抽到了，出货了！", "保底歪了，心态崩了", "有没有人知道这个怎么弄",
            "链接发一下", "晚安", "明天见", "收到", "好的好的", "这波我的锅", "666", "真的假的",
            "地铁上一半人都穿上羽绒服了", "今天加班到九点，累死", "有人看昨天的比赛吗", "这个版本强度怎么样",
            "等我五分钟", "我先去吃个饭", "群主在吗", "欢迎新人", "别刷屏了", "有大佬帮忙看看配队吗",
            "周六晚上8点开黑，来的扣1", "1", "我也想去", "这个价格有点贵", "已经买了", "在路上了",
            "Let's go", "ok", "😂😂😂", "明天下雨记得带伞")
_QUESTIONS = ("帮我查一下明天上海的天气", "帮我们想个开黑的队名", "总结一下刚才大家聊了什么", "这个配队合理吗",
              "今天有什么新闻", "帮我算一下抽卡保底还差多少", "给新人介绍一下群规", "推荐个周末去的地方")
_ANSWERS = ("好的，我来看看。", "明天上海多云转小雨，18~23°C，出门记得带伞。", "可以叫「周六不鸽队」，或者「深渊满星团」。",
            "刚才大家主要在聊深渊更新和周末开黑的时间。", "配队没问题，万叶聚怪加双火输出很稳。", "按你说的次数，还差 23 抽保底。",
            "欢迎新人！群规：友善交流，不刷屏，不发广告。", "今天的新闻主要是版本更新公告和活动预告。")
_TOOLS = (("weather", {"city": "上海"}), ("search_news", {"query": "版本更新"}), ("calculator", {"expression": "90-67"}),
          ("web_search", {"query": "周末 去处"}))
_RESULTS = {"weather": "上海 明天：多云转小雨，18~23°C，东北风3级，傍晚起降水概率70%",
            "search_news": "1. 新版本今晚维护更新 2. 限定活动下周开启 3. 国服周年庆预告",
            "calculator": "23", "web_search": "搜索结果：1. 城市公园徒步 2. 美术馆新展 3. 夜市美食街"}


REPLY_LOOK_BACK = 20  # a reply targets one of the last 20 rows that have a platform id
MAX_MEMBERS = 100_000  # a group larger than any platform allows; each member costs memory before a row is written


@dataclass(frozen=True)
class SynthOptions:
    members: int = 60
    messages: int = 2000  # at most ZHIN_MAX_MESSAGES (check)
    seed: int = 1
    bot_rate: float = 0.08
    tool_rate: float = 0.2
    event_rate: float = 0.02
    compact_every: int = 400

    def check(self) -> None:
        from zhin_cli.store import max_messages

        if not 2 <= self.members <= MAX_MEMBERS:
            raise UsageError(f"--members must be from 2 to {MAX_MEMBERS:,}, got {self.members:,}")
        if self.messages < 3:
            raise UsageError("--messages must be at least 3 (a member message, an @-mention and the reply)")
        if self.messages > max_messages():  # a file zhin would refuse to load (and hours and gigabytes to write)
            raise UsageError(f"--messages must be at most {max_messages():,} (ZHIN_MAX_MESSAGES, the limit on what zhin "
                             f"loads), got {self.messages:,}")
        for name in ("bot_rate", "tool_rate", "event_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise UsageError(f"--{name.replace('_', '-')} must be between 0 and 1, got {value}")
        if self.compact_every < 10:
            raise UsageError("--compact-every must be at least 10")


@dataclass(eq=False)  # a member is who it is: `in`/`remove` on the member list compare identity, not every field
class _Member:
    user_id: str
    name: str
    card: str | None
    title: str | None
    platform_role: str
    roles: list[str]
    weight: float
    muted_until: int = 0

    def actor(self) -> dict[str, Any]:
        data: dict[str, Any] = {"subjectId": self.user_id, "displayName": self.name, "roles": list(self.roles),
                                "scope": "group", "platformRole": self.platform_role, "mutedUntil": self.muted_until}
        if self.card is not None:
            data["card"] = self.card
        if self.title is not None:
            data["title"] = self.title
        return data


@dataclass
class _State:
    rng: random.Random
    options: SynthOptions
    scene_id: str
    time_ms: int
    rows: int = 0  # message rows made so far (the last one's id)
    recent: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=REPLY_LOOK_BACK))
    made: list[dict[str, Any]] = field(default_factory=list)  # lines made since the stream last took them
    summaries: int = 0
    members: list[_Member] = field(default_factory=list)
    departed: list[_Member] = field(default_factory=list)
    admins: list[str] = field(default_factory=list)
    next_platform_id: int = 1000
    next_call: int = 1
    last_anchor: int = 0

    # --- time ---------------------------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        self.time_ms += max(1000, int(seconds * 1000))
        local = datetime.fromtimestamp(self.time_ms / 1000, tz=ZoneInfo(TIMEZONE))
        if 1 <= local.hour < 8:  # night: the group wakes up between 08:00 and 10:00
            morning = local.replace(hour=8, minute=0, second=0, microsecond=0)
            wake = morning + timedelta(seconds=self.rng.uniform(0, 2 * 3600))
            self.time_ms = int(wake.timestamp() * 1000)

    def hhmm(self) -> str:
        return datetime.fromtimestamp(self.time_ms / 1000, tz=ZoneInfo(TIMEZONE)).strftime("%H:%M")

    # --- rows ---------------------------------------------------------------------------------------

    def add(self, payload: dict[str, Any]) -> dict[str, Any]:
        self.rows += 1
        line = {"type": "message", **payload, "timestamp": self.time_ms, "id": self.rows}
        self.recent.append(line)
        self.made.append(line)
        return line

    def side_line(self, line: dict[str, Any]) -> None:
        """A summary or scene line (placed among the messages by ``_placed``)."""
        self.made.append(line)

    def platform_id(self) -> str:
        self.next_platform_id += self.rng.choice((1, 1, 2, 3))
        return f"p-{self.next_platform_id}"

    def member_text(self) -> str:
        count = self.rng.choices((1, 2, 3), weights=(70, 22, 8))[0]
        return "，".join(self.rng.choice(_PHRASES) for _ in range(count))

    def speakable(self) -> list[_Member]:
        return [m for m in self.members if m.muted_until <= self.time_ms]

    def user_message(self, member: _Member, text: str) -> dict[str, Any]:
        payload: dict[str, Any] = {"role": "user", "content": [{"type": "text", "text": text}],
                                   "messageId": self.platform_id(), "actor": member.actor()}
        if self.rng.random() < REPLY_P:
            targets = [r["messageId"] for r in self.recent if r.get("messageId")]
            if targets:
                payload["replyTo"] = self.rng.choice(targets)
        return self.add(payload)


def _members(rng: random.Random, count: int) -> tuple[list[_Member], list[str]]:
    ids = rng.sample(range(100_000, 3_999_999_999), count)
    members: list[_Member] = []
    admins: list[str] = []
    admin_count = max(1, count // 30)
    for rank, user_id in enumerate(ids, start=1):
        name = rng.choice(_NAMES) + (str(rng.randint(1, 99)) if rng.random() < 0.3 else "")
        role = "owner" if rank == 1 else ("admin" if rank <= 1 + admin_count else "member")
        if role == "admin":
            admins.append(str(user_id))
        roles = ["master"] if rank == 2 else (["trusted"] if rng.random() < 0.05 else [])
        members.append(_Member(str(user_id), name, rng.choice(_CARDS) if rng.random() < 0.5 else None,
                               rng.choice(_TITLES) if rng.random() < 0.1 else None, role, roles, 0.0))
    rng.shuffle(members)  # popularity is independent of rank in the group
    for rank, member in enumerate(members, start=1):
        member.weight = 1.0 / rank**ZIPF_EXPONENT
    return members, admins


def _event(state: _State) -> None:
    rng = state.rng
    kind = rng.choices(list(EVENT_WEIGHTS), weights=list(EVENT_WEIGHTS.values()))[0]
    owner = next((m for m in state.members if m.platform_role == "owner"), None)
    operator = owner.user_id if owner else "system"
    others = [m for m in state.members if m.platform_role != "owner"]
    if kind == "join" or not others:
        if state.departed and rng.random() < 0.3:
            member = state.departed.pop(rng.randrange(len(state.departed)))
        else:
            user_id = str(rng.randint(100_000, 3_999_999_999))
            member = _Member(user_id, rng.choice(_NAMES), None, None, "member", [], 0.0)
        member.weight = rng.choice((0.02, 0.05, 0.2))  # newcomers say a few words
        state.members.append(member)
        inviter = rng.choice(("self", "self", rng.choice(state.admins) if state.admins else "self"))
        state.add({"role": "event", "kind": "member_joined",
                   "name": f"{member.user_id} join {state.scene_id} on {state.hhmm()} by {inviter}"})
        return
    member = rng.choice(others)
    if kind == "leave":
        state.members.remove(member)
        state.departed.append(member)
        if member.user_id in state.admins:
            state.admins.remove(member.user_id)
            state.side_line({"type": "scene", "timestamp": state.time_ms, "admins": list(state.admins)})
        by = "self" if rng.random() < 0.7 else operator
        state.add({"role": "event", "kind": "member_left",
                   "name": f"{member.user_id} leave {state.scene_id} on {state.hhmm()} by {by}"})
        return
    if kind == "card":
        member.card = rng.choice(_CARDS)
        field_name, value, who = "group_nickname", member.card, "system"
    elif kind == "title":
        member.title = rng.choice(_TITLES)
        field_name, value, who = "group_title", member.title, operator
    elif kind == "role":
        promote = member.platform_role == "member"
        member.platform_role = "admin" if promote else "member"
        if promote:
            state.admins.append(member.user_id)
        elif member.user_id in state.admins:
            state.admins.remove(member.user_id)
        state.side_line({"type": "scene", "timestamp": state.time_ms + 500, "admins": list(state.admins)})
        field_name, value, who = "role", member.platform_role, operator
    else:
        seconds = rng.choice((60, 600, 3600))
        member.muted_until = state.time_ms + seconds * 1000
        field_name, value, who = "mute_time", str(seconds), rng.choice([operator, *state.admins])
    state.add({"role": "event", "kind": "member_changed", "name": f'{who} changed {member.user_id} {field_name} to "{value}"'})


def _bot_turn(state: _State) -> None:
    rng = state.rng
    options = state.options
    rows = state.rows
    if rows - state.last_anchor > options.compact_every and rows > 6:
        anchor = rows - 5
        state.summaries += 1
        state.side_line({"type": "summary", "timestamp": state.time_ms + 500, "anchor_message_id": anchor,
                         "summary": f"（第 {state.summaries} 次压缩）消息 1–{anchor}：群友聊了游戏版本、组队开黑、"
                                    "天气和日常；期间有人进群退群、改名片、被禁言。"})
        state.last_anchor = anchor
    state.advance(rng.uniform(3, 15))
    if rng.random() < options.tool_rate:
        rounds = 2 if rng.random() < 0.15 else 1
        for _ in range(rounds):
            calls: list[dict[str, Any]] = []
            for _ in range(2 if rng.random() < 0.2 else 1):
                name, arguments = rng.choice(_TOOLS)
                calls.append({"type": "toolCall", "id": f"call_{state.next_call:06d}", "name": name, "arguments": arguments})
                state.next_call += 1
            state.add({"role": "assistant", "content": calls, "assistantActor": dict(BOT_ACTOR), "provider": "openai",
                       "model": "gpt-4o", "stopReason": "toolCalls"})
            for call in calls:
                state.advance(rng.uniform(1, 4))
                state.add({"role": "toolResult", "toolCallId": call["id"], "toolName": call["name"],
                           "content": [{"type": "text", "text": _RESULTS[str(call["name"])]}], "isError": False})
            state.advance(rng.uniform(2, 6))
    state.add({"role": "assistant", "content": [{"type": "text", "text": rng.choice(_ANSWERS)}],
               "messageId": state.platform_id(), "assistantActor": dict(BOT_ACTOR), "provider": "openai",
               "model": "gpt-4o", "stopReason": "stop"})


def _mention(state: _State, member: _Member) -> None:
    state.user_message(member, f"@小知 {state.rng.choice(_QUESTIONS)}")


# A bot turn adds at most: summary (no row) + 2 rounds × (1 call message + 2 results) + 1 reply.
_BOT_TURN_MAX_ROWS = 7


def synthesize(options: SynthOptions) -> Session:
    """The session, built row by row and parsed exactly as a JSONL file's lines would be."""
    lines = _lines(options)
    header, _ = next(lines)
    session = Session(session_id=header["session_id"], session_key=header["session_key"], timezone=TIMEZONE,
                      bot=BotFacts.from_mapping(header["bot"]), scene=SceneFacts.from_mapping(header["scene"]),
                      messages=[], source=f"synth(seed={options.seed})", raw=header)
    messages: list[Message] = []
    summaries: list[Summary] = []
    scene_changes: list[SceneChange] = []
    for line, message in lines:
        if message is not None:
            messages.append(message)
        elif line["type"] == "summary":
            summaries.append(Summary(line["timestamp"], line["summary"], line["anchor_message_id"], raw=line))
        else:
            changes = {k: v for k, v in line.items() if k not in ("type", "timestamp")}
            scene_changes.append(SceneChange(line["timestamp"], changes, raw=line))
    session.messages, session.summaries, session.scene_changes = messages, summaries, scene_changes
    return session


def synthesize_lines(options: SynthOptions) -> Iterator[dict[str, Any]]:
    """The session's JSONL objects, each given as soon as it is made: the session line, then the messages with the
    summary and scene lines where they happened — the lines ``store.jsonl.session_lines`` gives for ``synthesize``'s
    session, so the same bytes are written, without the whole session in memory first.

    The options are checked here, before the first line; every message is parsed and tool-paired before it is given."""
    return (line for line, _ in _lines(options))


def _lines(options: SynthOptions) -> Iterator[tuple[dict[str, Any], Message | None]]:
    """Each line, with its parsed message if it is a message line (the options checked before the first)."""
    options.check()
    rng = random.Random(options.seed)
    scene_id = str(rng.randint(100_000_000, 999_999_999))
    members, admins = _members(rng, options.members)
    start_ms = int(START.timestamp() * 1000)
    state = _State(rng, options, scene_id, start_ms, members=members, admins=list(admins))
    header = _header(state, start_ms, options, owner=next(m.user_id for m in members if m.platform_role == "owner"),
                     admins=admins)
    return _placed(header, _made(state))


def _made(state: _State) -> Iterator[list[dict[str, Any]]]:
    """The generator's rows and side lines, a step at a time (a burst, or the closing turn), as they are made."""
    rng = state.rng
    options = state.options
    budget = options.messages - 2  # the final @-mention and its reply

    while state.rows < budget:
        speakers = state.speakable()
        if not speakers:
            state.advance(LULL_MEAN_S)
            continue
        speaker = rng.choices(speakers, weights=[m.weight for m in speakers])[0]
        burst = min(BURST_CAP, 1 + _geometric(rng, BURST_P))
        for index in range(burst):
            if state.rows >= budget:
                break
            state.advance(rng.expovariate(1 / GAP_IN_BURST_S) if index else rng.expovariate(1 / GAP_BETWEEN_S))
            if speaker.muted_until > state.time_ms or speaker not in state.members:
                break
            if rng.random() < options.bot_rate and state.rows + 1 + _BOT_TURN_MAX_ROWS <= budget:
                _mention(state, speaker)
                _bot_turn(state)
                continue
            state.user_message(speaker, state.member_text())
            if rng.random() < options.event_rate and state.rows < budget:
                state.advance(rng.uniform(2, 30))
                _event(state)
        if rng.random() < LULL_P:
            state.advance(rng.expovariate(1 / LULL_MEAN_S))
        yield state.made
        state.made = []

    speakers = state.speakable() or state.members
    state.advance(rng.expovariate(1 / GAP_BETWEEN_S))
    _mention(state, rng.choices(speakers, weights=[m.weight or 0.01 for m in speakers])[0])
    state.advance(rng.uniform(3, 15))
    state.add({"role": "assistant", "content": [{"type": "text", "text": rng.choice(_ANSWERS)}],
               "messageId": state.platform_id(), "assistantActor": dict(BOT_ACTOR), "provider": "openai",
               "model": "gpt-4o", "stopReason": "stop"})
    yield state.made


def _placed(header: dict[str, Any], steps: Iterator[list[dict[str, Any]]]) -> Iterator[tuple[dict[str, Any], Message | None]]:
    """The header, then each message parsed and tool-paired as the JSONL reader does, with each summary or scene
    line before the first message later than it (a summary after its anchor) — ``session_lines``' rule, applied as
    the lines come: a side line is never earlier than the rows made before it, so none made later could have to
    be placed ahead of a message already given."""
    yield header, None
    pairing = ToolPairing()
    pending: list[tuple[int, int, int, dict[str, Any]]] = []  # (timestamp, anchor, order made, line), sorted
    made = 0
    for step in steps:
        for line in step:
            if line["type"] != "message":
                made += 1
                insort(pending, (line["timestamp"], line.get("anchor_message_id", -1), made, line))
                continue
            while pending and pending[0][0] < line["timestamp"] and pending[0][1] < line["id"]:
                yield pending.pop(0)[3], None
            where = f"synth row {line['id']}"
            payload = {k: v for k, v in line.items() if k not in ("type", "id")}
            message = message_from_payload(payload, row_id=line["id"], where=where)
            message.raw = line
            check_tool_pairing(message, pairing, where)
            yield line, message
    for item in pending:
        yield item[3], None


def _geometric(rng: random.Random, p: float) -> int:
    """Failures before the first success (0, 1, 2, …), mean (1 − p) / p."""
    count = 0
    while rng.random() >= p:
        count += 1
    return count


def _header(state: _State, start_ms: int, options: SynthOptions, *, owner: str, admins: list[str]) -> dict[str, Any]:
    session_key = f"synth:{BOT_ID}:group:{state.scene_id}"
    return {
        "type": "session", "session_id": f"{session_key}#{start_ms}-{options.seed}", "session_key": session_key,
        "timezone": TIMEZONE, "bot": {"user_id": BOT_ID, "name": "Zhin", "group_nickname": "小知", "platform_role": "admin"},
        "scene": {"scene_id": state.scene_id, "scene_type": "group", "scene_name": f"合成测试群 {options.seed}",
                  "owner_id": owner, "admins": admins, "member_count": options.members, "global_mute": False},
    }
