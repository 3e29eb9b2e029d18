"""Issue 27 items 6–8: SillyTavern inputs that crashed, exhausted memory or took minutes.

* 6 — a number no JavaScript double holds (a 400-digit lorebook ``order`` crashed ``math.isfinite`` with an
  ``OverflowError`` traceback and exit 1, check-capture's "departures found") is one line at its ``file:line``,
  exit 3, for every numeric field of a chat, card, World Info book or preset (one rule: ``core/jsnumbers.py``).
* 7 — a PNG card's text chunks are read without decoding its pixels: a decompression bomb (12,000 × 12,000
  RGBA in a few hundred KB) costs nothing, and oversized or over-compressed chunks are one line.
* 8 — check-capture's turn matching is linear in the chat's turns (it recounted earlier turns per candidate).
"""

from __future__ import annotations

import base64
import json
import struct
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from zhin_cli.core.errors import ConfigError, InputError
from zhin_cli.core.jsnumbers import JS_MAX_SAFE_INTEGER, js_number_problem
from zhin_cli.pipeline.preset.importer import load_preset
from zhin_cli.store.sillytavern import read_card, read_chat, read_lore

GOLDEN = Path(__file__).resolve().parent / "st_golden"
CONTENT = GOLDEN / "content"
HUGE = int("9" * 400)
Zhin = Callable[..., Any]


def _line_of(path: Path, needle: str) -> int:
    """The 1-based line of the only line of ``path`` that holds ``needle``."""
    found = [n for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if needle in line]
    assert len(found) == 1, (needle, found)
    return found[0]


# --- 6: numbers ---------------------------------------------------------------------------------------------------

def test_the_bound_is_javascripts_safe_integer() -> None:
    assert js_number_problem(JS_MAX_SAFE_INTEGER) is None  # the negative controls: the edge and ordinary values pass
    assert js_number_problem(-JS_MAX_SAFE_INTEGER) is None
    assert js_number_problem(100.5) is None
    assert js_number_problem("9" * 400) is None and js_number_problem(True) is None  # not numbers: the reader's call
    for bad in (JS_MAX_SAFE_INTEGER + 1, -JS_MAX_SAFE_INTEGER - 1, HUGE, 1e300, float("inf"), float("nan")):
        assert js_number_problem(bad) is not None, bad
    assert "an integer of 400 digits" in (js_number_problem(HUGE) or "")


def _lore_with(tmp_path: Path, field: str, value: Any) -> Path:
    book = json.loads((CONTENT / "golden-lore.json").read_text(encoding="utf-8"))
    first = next(iter(book["entries"].values()))
    first[field] = value
    path = tmp_path / f"lore-{field}.json"
    path.write_text(json.dumps(book, indent=2), encoding="utf-8")
    return path


@pytest.mark.parametrize("field", ["order", "position", "probability", "depth", "scanDepth", "groupWeight"])
def test_a_lore_number_past_the_bound_is_refused_at_its_line(field: str, tmp_path: Path) -> None:
    path = _lore_with(tmp_path, field, HUGE)
    with pytest.raises(InputError, match=f"'{field}' must be a number") as caught:
        read_lore(path)
    assert caught.value.where == f"{path}:{_line_of(path, '9' * 400)}"
    assert read_lore(_lore_with(tmp_path, field, 7)).path  # the negative control: a small value reads


def test_a_lore_number_at_the_bound_reads(tmp_path: Path) -> None:
    assert read_lore(_lore_with(tmp_path, "order", JS_MAX_SAFE_INTEGER)).after  # the edge itself is fine
    with pytest.raises(InputError):
        read_lore(_lore_with(tmp_path, "order", JS_MAX_SAFE_INTEGER + 1))


def _preset_with(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    preset = json.loads((CONTENT / "golden-preset.json").read_text(encoding="utf-8"))
    change(preset)
    path = tmp_path / "preset.json"
    path.write_text(json.dumps(preset, indent=2), encoding="utf-8")
    return path


def _set_prompt(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(preset: dict[str, Any]) -> None:
        preset["prompts"][0][field] = value
    return change


def _set_top(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(preset: dict[str, Any]) -> None:
        preset[field] = value
    return change


def _set_order(value: Any) -> Callable[[dict[str, Any]], None]:
    def change(preset: dict[str, Any]) -> None:
        preset["prompt_order"][0]["character_id"] = value
    return change


def _set_regex(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(preset: dict[str, Any]) -> None:
        script = {"scriptName": "s", "findRegex": "a", "promptOnly": True, "placement": [1], field: value}
        preset.setdefault("extensions", {})["regex_scripts"] = [script]
    return change


PRESET_FIELDS = {
    "injection_depth": _set_prompt("injection_depth", "VALUE"),
    "injection_order": _set_prompt("injection_order", "VALUE"),
    "injection_position": _set_prompt("injection_position", "VALUE"),
    "temperature": _set_top("temperature", "VALUE"),
    "openai_max_context": _set_top("openai_max_context", "VALUE"),
    "character_id": _set_order("VALUE"),
    "minDepth": _set_regex("minDepth", "VALUE"),
}


@pytest.mark.parametrize("field", sorted(PRESET_FIELDS))
def test_a_preset_number_past_the_bound_is_refused_at_its_line(field: str, tmp_path: Path) -> None:
    def with_value(value: Any) -> Path:
        text = _preset_with(tmp_path, PRESET_FIELDS[field]).read_text(encoding="utf-8")
        path = tmp_path / "preset.json"
        path.write_text(text.replace('"VALUE"', str(value)), encoding="utf-8")
        return path

    path = with_value(HUGE)
    with pytest.raises(ConfigError, match=f"{field} must be a number SillyTavern holds") as caught:
        load_preset(path)
    assert caught.value.where == f"{path}:{_line_of(path, '9' * 400)}"
    assert load_preset(with_value(3)).prompts  # the negative control: a small value reads


def test_a_chat_number_past_the_bound_is_refused_at_its_line(tmp_path: Path) -> None:
    lines = (GOLDEN / "runs" / "plain" / "chat.jsonl").read_text(encoding="utf-8").splitlines()
    message = json.loads(lines[2])
    path = tmp_path / "chat.jsonl"
    for value, refused in ((HUGE, True), (0, False)):  # the negative control: swipe_id 0 reads
        message["swipe_id"] = value
        path.write_text("\n".join([*lines[:2], json.dumps(message), *lines[3:]]) + "\n", encoding="utf-8")
        if refused:
            with pytest.raises(InputError, match="'swipe_id' must be a number") as caught:
                read_chat(path)
            assert caught.value.where == f"{path}:3"
        else:
            assert read_chat(path).turns


def test_a_card_number_past_the_bound_is_refused(tmp_path: Path) -> None:
    card = json.loads((CONTENT / "golden-card.json").read_text(encoding="utf-8"))
    path = tmp_path / "card.json"
    for value, refused in ((float("inf"), True), (1700000000000, False)):
        card["data"]["creation_date"] = value
        path.write_text(json.dumps(card), encoding="utf-8")
        if refused:
            with pytest.raises(InputError, match="'creation_date' must be a number"):
                read_card(path)
        else:
            assert read_card(path).name == "Juniper"


def _capture_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "captures"
    folder.mkdir()
    body = (GOLDEN / "runs" / "plain" / "request-03.json").read_bytes()
    (folder / "00001-chat-completions.json").write_bytes(body)
    return folder


def test_check_capture_with_a_400_digit_order_is_one_line_exit_3(zhin: Zhin, tmp_path: Path) -> None:
    folder = _capture_folder(tmp_path)
    common = (folder, "--preset", CONTENT / "golden-preset.json", "--chat", GOLDEN / "runs" / "plain" / "chat.jsonl",
              "--card", CONTENT / "golden-card.json")
    bad = _lore_with(tmp_path, "order", HUGE)
    result = zhin("preset", "check-capture", *common, "--lore", bad)
    assert result.returncode == 3, result.stderr
    assert result.stderr.splitlines() == [
        f"zhin: error: {bad}:{_line_of(bad, '9' * 400)}: entry '0': 'order' must be a number SillyTavern holds: an "
        "integer of 400 digits is past ±9,007,199,254,740,991, the largest SillyTavern (JavaScript) holds exactly"]
    good = zhin("preset", "check-capture", *common, "--lore", _lore_with(tmp_path, "order", 100))
    assert good.returncode in (0, 1) and "Traceback" not in good.stderr  # the negative control: it runs
    assert "captures" in good.stdout


# --- 7: PNG cards -------------------------------------------------------------------------------------------------

def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _card_text(keyword: bytes = b"chara") -> bytes:
    card = json.loads((CONTENT / "golden-card.json").read_text(encoding="utf-8"))
    return keyword + b"\0" + base64.b64encode(json.dumps(card).encode())


def _png_bytes(width: int, height: int, idat: bytes, *chunks: bytes) -> bytes:
    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)  # 8-bit RGBA
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", idat) + b"".join(chunks) + _chunk(b"IEND", b"")


# Pixels that no decoder can inflate: a reader that decodes the image fails on them; one that never does, does not
UNDECODABLE = b"\xff" * 64


def test_the_pixels_of_a_card_are_never_decoded(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.png"  # 12,000 × 12,000 RGBA: Pillow warned, then decoded 576 MB
    bomb.write_bytes(_png_bytes(12_000, 12_000, UNDECODABLE, _chunk(b"tEXt", _card_text())))
    assert read_card(bomb).name == "Juniper"


def test_the_undecodable_pixels_do_fail_a_decoder(tmp_path: Path) -> None:
    """The negative control of the test above, on a 2 × 2 image: decoding these pixels fails."""
    from PIL import Image

    small = tmp_path / "small.png"
    small.write_bytes(_png_bytes(2, 2, UNDECODABLE, _chunk(b"tEXt", _card_text())))
    with Image.open(small) as image, pytest.raises((OSError, SyntaxError, zlib.error)):
        image.load()


def test_check_capture_with_a_bomb_card_prints_no_warning(zhin_process: Zhin, tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(_png_bytes(12_000, 12_000, UNDECODABLE, _chunk(b"tEXt", _card_text())))
    result = zhin_process("preset", "check-capture", _capture_folder(tmp_path), "--preset", CONTENT / "golden-preset.json",
                          "--chat", GOLDEN / "runs" / "plain" / "chat.jsonl", "--card", bomb,
                          "--lore", CONTENT / "golden-lore.json", env={"PYTHONWARNINGS": "default"})
    assert result.returncode in (0, 1), result.stderr
    assert result.stderr == "" and "captures · 1 turns checked" in result.stdout


@pytest.mark.parametrize(("keyword", "expected"), [(b"ccv3", "Juniper"), (b"CHARA", "Juniper"), (b"Comment", None)])
def test_the_card_keyword_is_read_as_st_reads_it(keyword: bytes, expected: str | None, tmp_path: Path) -> None:
    path = tmp_path / "card.png"
    path.write_bytes(_png_bytes(2, 2, UNDECODABLE, _chunk(b"tEXt", _card_text(keyword))))
    if expected is None:  # the negative control: another keyword is no card
        with pytest.raises(InputError, match="no 'ccv3' or 'chara' text chunk"):
            read_card(path)
    else:
        assert read_card(path).name == expected


def test_ccv3_wins_over_an_earlier_chara(tmp_path: Path) -> None:
    card = json.loads((CONTENT / "golden-card.json").read_text(encoding="utf-8"))
    card["data"]["name"] = "Newer"
    ccv3 = b"ccv3\0" + base64.b64encode(json.dumps(card).encode())
    path = tmp_path / "card.png"
    path.write_bytes(_png_bytes(2, 2, UNDECODABLE, _chunk(b"tEXt", _card_text()), _chunk(b"tEXt", ccv3)))
    assert read_card(path).name == "Newer"


def _refused(path: Path, data: bytes, fragment: str) -> None:
    path.write_bytes(data)
    with pytest.raises(InputError, match=fragment) as caught:
        read_card(path)
    assert caught.value.where == str(path) and "\n" not in str(caught.value)


def test_bad_chunks_are_one_line(tmp_path: Path) -> None:
    path = tmp_path / "card.png"
    good = _png_bytes(2, 2, UNDECODABLE, _chunk(b"tEXt", _card_text()))
    path.write_bytes(good)
    assert read_card(path).name == "Juniper"  # the negative control: the intact file reads
    text_at = good.index(b"tEXt") - 4
    claims_more = good[:text_at] + struct.pack(">I", 2**31 - 1) + good[text_at + 4:]
    _refused(path, claims_more, "chunk b'tEXt' at byte .* claims 2,147,483,647 bytes, past the end")
    _refused(path, good[: text_at + 20], "past the end of the file")  # cut inside the card chunk
    _refused(path, good[: text_at + 3], r"cut short at byte \d+ \(a chunk header\)")
    damaged = bytearray(good)
    damaged[text_at + 20] ^= 0x01
    _refused(path, bytes(damaged), "'chara' chunk is damaged")
    compressed = _chunk(b"zTXt", b"chara\0\0" + zlib.compress(b"A" * 2**20))
    _refused(path, _png_bytes(2, 2, UNDECODABLE, compressed), r"chara \(zTXt\): SillyTavern reads a card only from a tEXt")


# --- 8: turn matching ---------------------------------------------------------------------------------------------

def _whole_parts(needle: str, texts: list[str]) -> int:
    """The rule, by brute force: positions where ``needle`` starts a text, a line or follows ": ", and ends the
    text or a line (the reference :class:`_Parts` must agree with)."""
    count = 0
    for text in texts:
        for at in range(len(text) - len(needle) + 1):
            end = at + len(needle)
            starts = at == 0 or text[at - 1] == "\n" or text[max(0, at - 2):at] == ": "
            if text[at:end] == needle and starts and (end == len(text) or text[end] == "\n"):
                count += 1
    return count


def test_the_part_index_counts_as_the_rule_does() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from zhin_cli.tools.preset.capture import _Parts

    alphabet = st.sampled_from(["a", "b", "ab", ": ", ":", " ", "\n", "a: b", "x" * 70])
    piece = st.lists(alphabet, max_size=12).map("".join)

    @settings(max_examples=400, deadline=None, database=None)
    @given(st.lists(piece, max_size=5), st.lists(piece, min_size=1, max_size=4))
    def agree(texts: list[str], needles: list[str]) -> None:
        parts = _Parts(texts)
        for needle in [*needles, *texts]:
            assert parts.count(needle) == _whole_parts(needle, texts), (needle, texts)
            assert parts.bound(needle) >= parts.count(needle)

    agree()
    # the negative control: the rule is not plain substring counting ("ok" inside "look" is not a part)
    assert _whole_parts("ok", ["look", "ok\nName: ok", "ok 4beed990"]) == 2
    assert _Parts(["look", "ok\nName: ok", "ok 4beed990"]).count("ok") == 2


def _chat(tmp_path: Path, turns: int) -> Path:
    lines: list[dict[str, Any]] = [{"user_name": "unused", "character_name": "unused", "chat_metadata": {"integrity": "x"}}]
    for number in range(1, turns + 1):
        lines.append({"name": "Sol", "is_user": True, "mes": f"question {number} about the tides",
                      "send_date": "2026-03-01T10:00:00.000Z"})
        lines.append({"name": "Juniper", "is_user": False, "mes": f"answer {number}: the tide turns",
                      "send_date": "2026-03-01T10:00:01.000Z"})
    path = tmp_path / f"chat-{turns}.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    return path


def _lines_run(code: Any, run: Callable[[], object]) -> int:
    """Python lines executed in ``code``'s file (its functions, comprehensions, methods) while ``run`` runs: an
    operation count that no machine's speed changes."""
    executed = 0
    filename = code.co_filename

    def trace(frame: Any, event: str, _arg: object) -> Any:
        nonlocal executed
        if frame.f_code.co_filename != filename:
            return None
        if event == "line":
            executed += 1
        return trace

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        run()
    finally:
        sys.settrace(previous)
    return executed


def _old_occurrences(needle: str, texts: list[str]) -> int:
    """``stcapture._occurrences`` as it was before issue 27 item 8, verbatim: with the next function, the negative
    control of the count below."""
    count = 0
    for text in texts:
        at = text.find(needle)
        while at >= 0:
            end = at + len(needle)
            starts = at == 0 or text[at - 1] == "\n" or text[max(0, at - 2):at] == ": "
            if starts and (end == len(text) or text[end] == "\n"):
                count += 1
            at = text.find(needle, at + 1)
    return count


def _old_turn_of(body: dict[str, Any], chat: Any) -> Any:
    """``stcapture.turn_of`` as it was (it recounted turns 1…k for every turn k tried)."""
    users = [m["content"] for m in body["messages"] if m["role"] == "user"]
    everything = [m["content"] for m in body["messages"]]
    for turn in reversed(chat.turns):
        typed = sum(1 for t in chat.turns[: turn.number] if t.user_text == turn.user_text)
        if not turn.user_text or _old_occurrences(turn.user_text, users) < typed:
            continue
        if turn.reply_text and _old_occurrences(turn.reply_text, everything):
            continue
        return turn
    return None


def test_the_matcher_picks_the_turn_the_old_matching_picked() -> None:
    """On generated chats (texts repeat, hold ": " and newlines) and bodies made of their texts in the shapes ST
    sends (alone, "Name: text", several joined by newlines, under any role): the same turn as before, or None."""
    from types import SimpleNamespace

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from zhin_cli.store.sillytavern import ChatTurn
    from zhin_cli.tools.preset.capture import TurnMatcher

    text = st.sampled_from(["ok", "look", "a: b", "two\nlines", "ok 4beed990", "", "b"])
    pairs = st.lists(st.tuples(text, st.one_of(st.none(), text)), min_size=1, max_size=8)
    shape = st.sampled_from(["{}", "Sol: {}", "{}\n{}", "x: {}\nrest"])
    message = st.tuples(st.sampled_from(["user", "assistant", "system"]), shape, st.lists(text, min_size=2, max_size=2))

    matched = 0

    @settings(max_examples=400, deadline=None, database=None)
    @given(pairs, st.lists(message, max_size=8))
    def agree(turn_texts: list[tuple[str, str | None]], messages: list[tuple[str, str, list[str]]]) -> None:
        turns = [ChatTurn(n, 2 * n, 2 * n + 1, user, reply) for n, (user, reply) in enumerate(turn_texts, 1)]
        chat: Any = SimpleNamespace(turns=turns)
        body = {"messages": [{"role": role, "content": form.format(*fill)} for role, form, fill in messages]}
        old, new = _old_turn_of(body, chat), TurnMatcher(chat).turn_of(body)
        assert (old and old.number) == (new and new.number), body
        nonlocal matched
        matched += new is not None

    agree()
    assert matched > 50, matched  # the check is not vacuous: many bodies do match a turn


def _matching_lines(match: Callable[[dict[str, Any], Any], Any], body: dict[str, Any], chat: Any) -> int:
    """Lines executed in ``match``'s file to match ``body``, which must be turn 1's."""
    found: list[Any] = []
    executed = _lines_run(match.__code__, lambda: found.append(match(body, chat)))
    assert found[0].number == 1
    return executed


def test_matching_one_capture_is_linear_in_the_turns(tmp_path: Path) -> None:
    """The capture of turn 1 (every later turn is tried first) against chats of 500 and 2,000 turns."""
    from zhin_cli.tools.preset.capture import turn_of

    body = {"messages": [{"role": "system", "content": "rules"}, {"role": "user", "content": "question 1 about the tides"}]}
    chats = {turns: read_chat(_chat(tmp_path, turns)) for turns in (500, 2000)}
    now = {turns: _matching_lines(turn_of, body, chat) for turns, chat in chats.items()}
    assert now[2000] / now[500] < 4.5, now  # 4× the turns: 4× the work (quadratic: 16×)
    # the negative control: the same count on the matching as it was grows about 16-fold
    before = {turns: _matching_lines(_old_turn_of, body, chat) for turns, chat in chats.items()}
    assert before[2000] / before[500] > 12, before
