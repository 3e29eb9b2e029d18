"""ST's two reshaping layers, kept apart as ST keeps them (reference/sillytavern.md §3).

* ``squash`` (client side, ``squash_system_messages``): adjacent unnamed system messages are joined with
  one ``"\n"``; ``[Start a new Chat]`` / ``[Example Chat]`` separators (``exempt``) and named example turns
  are never folded. Unlike ST it never folds inside the chatHistory block, so an in-chat system
  injection stays where its depth put it (preset-message-skeleton: 历史区只合并相邻同角色).
* ``post_process`` (server side, ``custom_prompt_post_processing``): ``merge`` joins adjacent same-role
  messages with ``"\n\n"`` (names become "speaker: " prefixes); ``semi`` also turns every system message
  after the first into user; ``strict`` adds the placeholder user turn. History messages are kept whole —
  they are never merged with preset text — so their headers and the cached prefix stay as they are;
  mid-conversation state changes follow the same rule through the profile (downgraded to user).
"""

from __future__ import annotations

from dataclasses import replace

from zhin_cli.headers import Projected
from zhin_cli.preset.layout import Item, PresetMessage
from zhin_cli.preset.model import PLACEHOLDER

USER_LIKE = ("user", "summary", "state")


def squash(items: list[Item]) -> list[Item]:
    out: list[Item] = []
    chain = False
    for item in items:
        squashable = (isinstance(item, PresetMessage) and item.role == "system" and not item.name and not item.exempt
                      and not item.in_history)
        if isinstance(item, PresetMessage) and item.role == "system" and not item.text:
            continue  # ST drops empty system messages while squashing
        if squashable and chain:
            previous = out[-1]
            assert isinstance(previous, PresetMessage) and isinstance(item, PresetMessage)
            out[-1] = replace(previous, pieces=[*previous.pieces, ("", "\n"), *item.pieces])
            continue
        out.append(replace(item, pieces=list(item.pieces)) if isinstance(item, PresetMessage) else item)
        chain = squashable
    return out


def _role(item: Item) -> str:
    if isinstance(item, PresetMessage):
        return item.role
    return "user" if item.role in USER_LIKE else item.role


def _merge(items: list[Item]) -> list[Item]:
    out: list[Item] = []
    for item in items:
        previous = out[-1] if out else None
        if (isinstance(item, PresetMessage) and isinstance(previous, PresetMessage) and previous.role == item.role
                and item.text):
            out[-1] = replace(previous, pieces=[*previous.pieces, ("", "\n\n"), *item.pieces])
        else:
            out.append(item)
    return out


def post_process(items: list[Item], mode: str) -> tuple[list[Item], bool]:
    """Returns the items and whether mid-conversation system must be downgraded (semi, strict)."""
    if mode == "claude":
        mode = "merge"
    base = mode.removesuffix("_tools")
    if base == "single":
        base = "strict"  # documented: 'single' would fold the real history into one user message
    if base not in ("merge", "semi", "strict"):
        return items, False
    named = [PresetMessage(i.role, i.spoken_pieces(), exempt=i.exempt, in_history=i.in_history)
             if isinstance(i, PresetMessage) and i.name else i for i in items]
    out = _merge(named)
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
    return _merge(out), True


def is_projected(item: Item) -> bool:
    return isinstance(item, Projected)
