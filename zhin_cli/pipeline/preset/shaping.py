"""ST's two reshaping layers, kept apart as ST keeps them (docs/spec/sillytavern.md §3), matched to what real
ST 1.18 sends (tests/st_golden, the squash/merge/semi/strict/single runs).

* ``squash`` (client side, ``squash_system_messages``): adjacent unnamed system messages are joined with
  one ``"\n"``; ``[Start a new Chat]`` / ``[Example Chat]`` separators (``exempt``) and named example turns
  are never folded and break a chain. It works inside the chatHistory block too (an in-chat system group
  next to the Post-History Instructions becomes one message there, as in ST); zhin's history messages are
  not ST messages and are never squashed (state changes keep their own message).
* ``post_process`` (server side, ``custom_prompt_post_processing``): names become ``"speaker: "`` prefixes;
  ``merge`` joins adjacent same-role messages with ``"\n\n"`` — preset messages and history text messages
  alike, across the preset/history boundary (a reply and the depth-1 assistant entry after it become one
  assistant message), each history message keeping its header where its text starts; ``semi`` also turns
  every system message after the first into user and merges again; ``strict`` adds the placeholder user
  turn; ``single`` makes the whole prompt one user message, parts joined with ``"\n\n"``, user and assistant
  parts prefixed with ``{{user}}: ``/``{{char}}: ``. What zhin never folds into another message: tool calls
  and results (the ``_tools`` variants and the no-tools ones alike — zhin never drops a tool call), state
  changes (downgraded to user through the profile under semi/strict/single) — they break a merge chain.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from zhin_cli.pipeline.headers import Projected
from zhin_cli.pipeline.preset.layout import Item, PresetMessage, speaker_prefix
from zhin_cli.pipeline.preset.model import PLACEHOLDER

USER_LIKE = ("user", "summary", "state")
MERGE_JOINER = "\n\n"  # ST's server-side post-processing (merge, semi, strict, single)
SQUASH_JOINER = "\n"  # ST's client-side squash
Pieces = list[tuple[str, str]]


def squash(items: list[Item]) -> list[Item]:
    out: list[Item] = []
    chain = False
    for item in items:
        squashable = isinstance(item, PresetMessage) and item.role == "system" and not item.name and not item.exempt
        if isinstance(item, PresetMessage) and item.role == "system" and not item.text:
            continue  # ST drops empty system messages while squashing
        if squashable and chain:
            previous = out[-1]
            assert isinstance(previous, PresetMessage) and isinstance(item, PresetMessage)
            out[-1] = replace(previous, pieces=[*previous.pieces, ("", SQUASH_JOINER), *item.pieces])
            continue
        out.append(replace(item, pieces=list(item.pieces)) if isinstance(item, PresetMessage) else item)
        chain = squashable
    return out


def _role(item: Item) -> str:
    if isinstance(item, PresetMessage):
        return item.role
    return "user" if item.role in USER_LIKE else item.role


def foldable(item: Item) -> bool:
    """Whether post-processing may join ``item`` with a neighbour: preset messages, and history messages that
    are plain text (a member's message, a reply without tool calls, the compaction summary)."""
    if isinstance(item, PresetMessage):
        return True
    return item.role in ("user", "assistant", "summary") and not item.tool_calls and bool(item.text)


def _own_pieces(item: Projected) -> Pieces:
    return [(item.segment_id, item.text)]


class _Shaper:
    def __init__(self, history_pieces: Callable[[Projected], Pieces] | None, user: str, char: str) -> None:
        self.history_pieces = history_pieces or _own_pieces
        self.user = user
        self.char = char

    def pieces(self, item: Item) -> Pieces:
        return list(item.pieces) if isinstance(item, PresetMessage) else self.history_pieces(item)

    def merge(self, items: list[Item]) -> list[Item]:
        out: list[Item] = []
        for item in items:
            previous = out[-1] if out else None
            if (previous is not None and foldable(previous) and foldable(item) and _role(previous) == _role(item)
                    and (item.text if isinstance(item, PresetMessage) else True)):
                in_history = not isinstance(previous, PresetMessage) or previous.in_history or not isinstance(item, PresetMessage)
                out[-1] = PresetMessage(_role(previous), [*self.pieces(previous), ("", MERGE_JOINER), *self.pieces(item)],  # type: ignore[arg-type]
                                        in_history=in_history)
            else:
                out.append(item)
        return out

    def single(self, items: list[Item]) -> list[Item]:
        """One user message for every run of foldable items (the whole prompt, unless a tool call or a state
        change sits in it); user and assistant parts say who speaks (unless their text already starts with
        ``"Name: "``, as ST checks), system parts do not."""
        out: list[Item] = []
        run: Pieces = []

        def flush() -> None:
            if run:
                out.append(PresetMessage("user", list(run), in_history=True))
                run.clear()

        for item in items:
            if not foldable(item):
                flush()
                out.append(item)
                continue
            pieces = self.pieces(item)
            role = _role(item)
            speaker = self.user if role == "user" else self.char
            said = item.text if isinstance(item, PresetMessage) else item.body  # a header is zhin's, not the text
            prefix = speaker_prefix(speaker, said) if role in ("user", "assistant") else ""
            if prefix:
                pieces = [(pieces[0][0] if pieces else "", prefix), *pieces]
            if run:
                run.append(("", MERGE_JOINER))
            run.extend(pieces)
        flush()
        return out


def post_process(items: list[Item], mode: str, *, history_pieces: Callable[[Projected], Pieces] | None = None,
                 user: str = "User", char: str = "Assistant") -> tuple[list[Item], bool]:
    """Returns the items and whether mid-conversation system must be downgraded (semi, strict, single).

    ``history_pieces`` gives the attributed text of a history message that gets folded into another message
    (the skeleton adds the scene tail to the current input there); ``user``/``char`` are the names the
    ``"speaker: "`` prefixes use ({{user}}, {{char}})."""
    if mode == "claude":
        mode = "merge"
    base = mode.removesuffix("_tools")
    if base not in ("merge", "semi", "strict", "single"):
        return items, False
    shaper = _Shaper(history_pieces, user, char)
    named = [PresetMessage(i.role, i.spoken_pieces(), exempt=i.exempt, in_history=i.in_history)
             if isinstance(i, PresetMessage) and i.name else i for i in items]
    if base == "single":
        return shaper.single(named), True
    out = shaper.merge(named)
    if base == "merge":
        return out, False
    out = [replace(i, role="user") if isinstance(i, PresetMessage) and i.role == "system" and index > 0 else i
           for index, i in enumerate(out)]
    if base == "strict" and out:
        placeholder = PresetMessage("user", [("preset:placeholder", PLACEHOLDER)])
        if _role(out[0]) == "system" and (len(out) < 2 or _role(out[1]) != "user"):
            out.insert(1, placeholder)
        elif _role(out[0]) not in ("system", "user"):
            out.insert(0, placeholder)
    return shaper.merge(out), True


def is_projected(item: Item) -> bool:
    return isinstance(item, Projected)
