"""pipeline/preset/worldinfo.py: SillyTavern's World Info activation rules and the Author's Note, on our own data.

Every rule is shown both ways (an entry that fires and one that, changed in one respect, does not), so each test
can fail. The behaviour is ST 1.18's (world-info.js / authors-note.js); the real-ST check is
tests/test_st_golden2_wi.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from zhin_cli.pipeline.preset import worldinfo as wi
from zhin_cli.pipeline.preset.worldinfo import Activation, AuthorsNote, Book, Entry, Settings, WorldInfo


def _entry(uid: str, content: str = "", **fields: Any) -> Entry:
    return Entry(uid=uid, world="Harbour", content=content or f"text {uid}", **fields)


DEFAULTS = Settings()  # ST's


def _fire(chat: list[str], *entries: Entry, settings: Settings = DEFAULTS, books: tuple[Book, ...] | None = None,
          tokens: Any = len, max_context: int = 100_000, seed: str = "s") -> Activation:
    world = WorldInfo(books if books is not None else (Book("Harbour", "global", entries),), settings)
    return wi.activate(world, chat, expand=lambda text: text.replace("{{char}}", "Wren"), count_tokens=tokens,
                       max_context=max_context, seed=seed)


def _uids(activation: Activation) -> list[str]:
    return [entry.uid for entry in activation.fired]


# --- keys ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "text", "fires"), [
    ("oar", "Pass me an oar.", True),
    ("oar", "the harbour board", False),  # whole words: not inside "board"
    ("tide table", "the old tide tables", True),  # a key of two words is a plain substring
    ("白鹭", "河口那边的白鹭是不是", True),  # JavaScript's \W (ASCII): CJK around the key is a boundary
    ("ab", "xaby", False),
    ("/fo+g/i", "FOOG rolls in", True),  # a regular-expression key
    ("/fo+g/", "FOOG rolls in", False),
])
def test_whole_word_matching(key: str, text: str, fires: bool) -> None:
    assert (_uids(_fire([f"Hal: {text}"], _entry("1", keys=(key,)))) == ["1"]) is fires


def test_whole_words_off_matches_inside_words() -> None:
    entry = _entry("1", keys=("oar",))
    assert _uids(_fire(["Hal: the harbour board"], entry, settings=Settings(whole_words=False))) == ["1"]
    assert _uids(_fire(["Hal: the harbour board"], replace(entry, whole_words=False))) == ["1"]  # per entry
    assert _uids(_fire(["Hal: the harbour board"], entry)) == []


def test_case_sensitivity() -> None:
    entry = _entry("1", keys=("Patience",))
    assert _uids(_fire(["Hal: thanks for your patience"], entry)) == ["1"]  # insensitive by default
    assert _uids(_fire(["Hal: thanks for your patience"], replace(entry, case_sensitive=True))) == []
    assert _uids(_fire(["Hal: we take the Patience"], replace(entry, case_sensitive=True))) == ["1"]
    assert _uids(_fire(["Hal: thanks for your patience"], entry, settings=Settings(case_sensitive=True))) == []


@pytest.mark.parametrize(("logic", "text", "fires"), [
    (wi.AND_ANY, "toll paid", True), (wi.AND_ANY, "toll only", False),
    (wi.AND_ALL, "toll paid receipt", True), (wi.AND_ALL, "toll paid", False),
    (wi.NOT_ANY, "toll only", True), (wi.NOT_ANY, "toll receipt", False),
    (wi.NOT_ALL, "toll paid", True), (wi.NOT_ALL, "toll paid receipt", False),
])
def test_secondary_key_logic(logic: int, text: str, fires: bool) -> None:
    entry = _entry("1", keys=("toll",), secondary=("paid", "receipt"), logic=logic)
    assert (_uids(_fire([f"Hal: {text}"], entry)) == ["1"]) is fires


def test_secondary_keys_need_the_primary() -> None:
    entry = _entry("1", keys=("toll",), secondary=("paid",), logic=wi.NOT_ANY)
    assert _uids(_fire(["Hal: nothing here"], entry)) == []


def test_constant_disabled_and_keyless_entries() -> None:
    assert _uids(_fire(["Hal: hi"], _entry("1", constant=True))) == ["1"]
    assert _uids(_fire(["Hal: hi"], _entry("1", constant=True, disabled=True))) == []
    assert _uids(_fire(["Hal: hi"], _entry("1", keys=("hi",), disabled=True))) == []
    assert _uids(_fire(["Hal: hi"], _entry("1"))) == []  # no keys, not constant


def test_decorators() -> None:
    assert _uids(_fire(["Hal: hi"], _entry("1", "@@activate\nalways"))) == ["1"]
    assert _uids(_fire(["Hal: hi"], _entry("1", "@@dont_activate\nnever", keys=("hi",)))) == []
    activation = _fire(["Hal: hi"], _entry("1", "@@activate\nalways", position=wi.AFTER))
    assert [text for _e, text in activation.after] == ["always"]  # the decorator line is not sent


def test_keys_are_expanded_and_trimmed() -> None:
    assert _uids(_fire(["Hal: Wren, row!"], _entry("1", keys=(" {{char}} ",)))) == ["1"]
    assert _uids(_fire(["Hal: Robin, row!"], _entry("1", keys=(" {{char}} ",)))) == []


# --- scan depth and recursion ----------------------------------------------------------------------------------


def test_scan_depth() -> None:
    chat = ["Hal: newest", "Wren: middle", "Hal: the sandbar"]  # newest first
    entry = _entry("1", keys=("sandbar",))
    assert _uids(_fire(chat, entry)) == []  # depth 2 (ST's default)
    assert _uids(_fire(chat, entry, settings=Settings(depth=3))) == ["1"]
    assert _uids(_fire(chat, replace(entry, scan_depth=3))) == ["1"]  # the entry's own depth wins
    assert _uids(_fire(chat, replace(entry, scan_depth=0), settings=Settings(depth=3))) == []


def test_recursion_and_its_opt_outs() -> None:
    chat = ["Hal: the sandbar"]
    sandbar = _entry("2", "Pilots mark it with the bell buoy.", keys=("sandbar",))
    buoy = _entry("3", "The buoy is red.", keys=("bell buoy",))
    assert _uids(_fire(chat, sandbar, buoy)) == ["2", "3"]
    assert _uids(_fire(chat, sandbar, buoy, settings=Settings(recursive=False))) == ["2"]
    assert _uids(_fire(chat, replace(sandbar, prevent_recursion=True), buoy)) == ["2"]
    assert _uids(_fire(chat, sandbar, replace(buoy, exclude_recursion=True))) == ["2"]
    assert _uids(_fire(chat, sandbar, buoy, settings=Settings(max_recursion_steps=1))) == ["2"]


def test_delay_until_recursion() -> None:
    delayed = _entry("9", keys=("sandbar",), delay_until_recursion=1)
    assert _uids(_fire(["Hal: the sandbar"], delayed)) == []  # no recursion pass: never
    starter = _entry("1", "Something else.", keys=("sandbar",))
    assert _uids(_fire(["Hal: the sandbar"], starter, delayed)) == ["1", "9"]  # fires on the recursion pass


# --- probability and budget ------------------------------------------------------------------------------------


def test_probability() -> None:
    assert _uids(_fire(["Hal: hi"], _entry("1", constant=True, probability=0))) == []
    assert _uids(_fire(["Hal: hi"], _entry("1", constant=True, probability=0, use_probability=False))) == ["1"]
    half = _entry("1", constant=True, probability=50)
    fired = [bool(_fire(["Hal: hi"], half, seed=str(n)).fired) for n in range(200)]
    assert 60 < sum(fired) < 140  # a roll per seed …
    assert fired == [bool(_fire(["Hal: hi"], half, seed=str(n)).fired) for n in range(200)]  # … reproducible


def test_the_budget_binds() -> None:
    entries = [_entry(str(n), "x" * 30, constant=True, order=100 - n) for n in range(5)]
    # context 400, 25 %: 100 "tokens" (characters here); each entry costs 31 with its newline
    activation = _fire(["Hal: hi"], *entries, max_context=400)
    assert _uids(activation) == ["0", "1", "2"] and activation.budget_overflowed
    assert _uids(_fire(["Hal: hi"], *entries, max_context=4000)) == ["0", "1", "2", "3", "4"]
    capped = _fire(["Hal: hi"], *entries, max_context=4000, settings=Settings(budget_cap=40))
    assert _uids(capped) == ["0"]


# --- order and placement ---------------------------------------------------------------------------------------


def test_positions_order_and_ties() -> None:
    entries = (_entry("a", "A", constant=True, order=100, position=wi.AFTER),
               _entry("b", "B", constant=True, order=50, position=wi.AFTER),
               _entry("c", "C", constant=True, order=50, position=wi.AFTER),  # ties with b, fired after it
               _entry("d", "D", constant=True, order=90, position=wi.BEFORE),
               _entry("e", "E", constant=True, position=wi.AN_TOP), _entry("f", "F", constant=True, position=wi.AN_BOTTOM))
    activation = _fire(["Hal: hi"], *entries)
    assert [t for _e, t in activation.after] == ["C", "B", "A"]  # ascending order; a tie: the later fired first
    assert [t for _e, t in activation.before] == ["D"]
    assert [t for _e, t in activation.an_top] == ["E"] and [t for _e, t in activation.an_bottom] == ["F"]


def test_at_depth_groups_by_depth_and_role() -> None:
    entries = (_entry("1", "one", constant=True, position=wi.AT_DEPTH, depth=1, role="system", order=100),
               _entry("2", "two", constant=True, position=wi.AT_DEPTH, depth=1, role="system", order=50),
               _entry("3", "three", constant=True, position=wi.AT_DEPTH, depth=3, role="assistant"),
               _entry("4", "four", constant=True, position=wi.AT_DEPTH, depth=1, role="user"))
    groups = [(depth, role, [t for _e, t in placed]) for depth, role, placed in _fire(["Hal: hi"], *entries).at_depth]
    assert groups == [(1, "system", ["two", "one"]), (3, "assistant", ["three"]), (1, "user", ["four"])]


def test_content_is_expanded_once_fired() -> None:
    activation = _fire(["Hal: hi"], _entry("1", "{{char}} rows.", constant=True, position=wi.AFTER))
    assert activation.after[0][1] == "Wren rows."


def test_book_order_by_strategy() -> None:
    def book(name: str, source: str) -> Book:
        return Book(name, source, (Entry(uid=name, world=name, content=name, constant=True, order=100),))

    books = (book("G", "global"), book("C", "character"), book("T", "chat"))
    assert [e.uid for e in wi.sorted_entries(books, wi.CHARACTER_FIRST)] == ["T", "C", "G"]
    assert [e.uid for e in wi.sorted_entries(books, wi.GLOBAL_FIRST)] == ["T", "G", "C"]
    assert [e.uid for e in wi.sorted_entries(books, wi.EVENLY)] == ["T", "G", "C"]
    same = (book("G", "global"), Book("G", "character", (Entry(uid="again", world="G", content="x"),)))
    assert [e.uid for e in wi.sorted_entries(same)] == ["G"]  # a global book is not read again as the character's


# --- the Author's Note -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("interval", "fires_at"), [(1, {1, 2, 3, 4, 5, 6, 7}), (3, {3, 6}), (2, {2, 4, 6}), (0, set())])
def test_note_interval(interval: int, fires_at: set[int]) -> None:
    note = AuthorsNote("n", interval=interval)
    assert {count for count in range(1, 8) if wi.note_fires(note, count)} == fires_at


def test_note_pieces() -> None:
    top, bottom = _entry("t"), _entry("b")

    def text(note: str, tops: list[str], bottoms: list[str]) -> str:
        activation = Activation(an_top=[(top, t) for t in tops], an_bottom=[(bottom, b) for b in bottoms])
        return "".join(piece for _owner, piece in wi.note_pieces(note, activation))

    assert text("N", [], []) == "N"
    assert text("N", ["T1", "T2"], ["B"]) == "T1\nT2\nN\nB"
    assert text("", ["T"], ["B"]) == "T\n\nB"  # ST's join: an empty note leaves a blank line
    assert text("", ["T"], []) == "T\n"  # one trailing newline dropped, the other stays (trimmed later)
    assert text("", [], []) == ""


def test_reading_st_entries_and_character_books() -> None:
    raw = {"uid": 7, "key": ["fog"], "keysecondary": ["mist"], "selectiveLogic": 2, "order": 40, "position": 4,
           "depth": 1, "role": 2, "caseSensitive": None, "matchWholeWords": False, "scanDepth": 5,
           "delayUntilRecursion": True, "probability": 30, "useProbability": True, "content": "c", "sticky": 2}
    entry = wi.entry_from_st("7", raw, "Book")
    assert (entry.uid, entry.keys, entry.secondary, entry.logic, entry.order, entry.position, entry.depth,
            entry.role, entry.case_sensitive, entry.whole_words, entry.scan_depth, entry.delay_until_recursion,
            entry.probability, entry.unsimulated) == ("7", ("fog",), ("mist",), wi.NOT_ANY, 40, wi.AT_DEPTH, 1,
                                                      "assistant", None, False, 5, 1, 30, ("sticky",))
    card_book = {"entries": [{"keys": ["eel"], "content": "eels", "insertion_order": 5, "enabled": False,
                              "position": "before_char"},
                             {"keys": ["oar"], "content": "oars", "enabled": True, "selective": True,
                              "secondary_keys": ["pole"], "extensions": {"position": 4, "depth": 2, "scan_depth": 6,
                                                                         "match_whole_words": False}},
                             {"keys": ["pole"], "content": "no enabled, no selective", "secondary_keys": ["x"]}]}
    first, second, third = wi.entries_from_character_book(card_book, "Card")
    assert (first.keys, first.order, first.disabled, first.position) == (("eel",), 5, True, wi.BEFORE)
    assert (second.position, second.depth, second.disabled, second.selective, second.scan_depth,
            second.whole_words) == (wi.AT_DEPTH, 2, False, True, 6, False)
    assert (third.disabled, third.selective, third.position) == (True, False, wi.AFTER)  # ST's defaults


def test_settings_and_note_from_st() -> None:
    settings = wi.settings_from_st({"world_info_depth": 4, "world_info_recursive": False, "world_info_budget": "x"})
    assert (settings.depth, settings.recursive, settings.budget_percent) == (4, False, 25)
    assert wi.note_from_metadata({}) is None
    assert wi.note_from_metadata({"note_prompt": "p", "note_role": 1, "note_depth": 3}) == \
        AuthorsNote("p", interval=1, depth=3, position=1, role="user")


def test_example_message_entries_wrap_the_card_examples(tmp_path: Any) -> None:
    """Entries at the top / bottom of the example messages become example blocks before / after the card's (not
    in the real-ST set: built from ST's parseMesExamples rules); with the position changed they are not there."""
    import json
    from pathlib import Path

    from zhin_cli.store.sillytavern import read_card, read_chat, read_lore
    from zhin_cli.tools.preset.check import prepare, zhin_request

    golden = Path(__file__).resolve().parent / "st_golden2"
    book = json.loads((golden / "content" / "lore-Greyreach_Almanac.json").read_text(encoding="utf-8"))
    for uid, position, text in (("0", wi.EM_TOP, "{{user}}: Top question?\n{{char}}: Top answer."),
                                ("1", wi.EM_BOTTOM, "<START>\n{{user}}: Bottom question?\n{{char}}: Bottom answer.")):
        book["entries"][uid].update(position=position, content=text)
    path = Path(tmp_path) / "lore.json"
    path.write_text(json.dumps(book), encoding="utf-8")

    def examples(lore: Path) -> list[str]:
        chat = read_chat(golden / "runs" / "wi" / "chat.jsonl")
        setup = prepare(golden / "content" / "st-default-preset.json", chat,
                        card=read_card(golden / "content" / "card-Mirela_Stoyan.json"), lore=read_lore(lore))
        messages = zhin_request(setup, chat.turns[0]).request["messages"]
        return [m["content"] for m in messages if m.get("name") in ("example_user", "example_assistant")
                or m["content"] == "[Example Chat]"]

    assert examples(path) == ["[Example Chat]", "Top question?", "Top answer.",
                              "[Example Chat]", "How deep is it here?",
                              "Deep enough to drown in, shallow enough to run aground. Depends on the hour.",
                              "[Example Chat]", "Do you ever take a day off?",
                              "The river doesn't. *She pours two cups of tea.*",
                              "[Example Chat]", "Bottom question?", "Bottom answer."]
    assert examples(golden / "content" / "lore-Greyreach_Almanac.json")[:2] == ["[Example Chat]", "How deep is it here?"]


def test_the_budget_is_counted_in_linear_time() -> None:
    """ST recounts the whole new text after each entry (n² characters tokenized); zhin counts each part once and
    the joined text only near the budget. Counted, not timed: the characters handed to the counter."""
    counted: list[int] = []

    def tokens(text: str) -> int:
        counted.append(len(text))
        return len(text)

    entries = [_entry(str(n), "x" * 30, constant=True) for n in range(200)]
    assert len(_fire(["Hal: hi"], *entries, tokens=tokens, max_context=10**9).fired) == 200
    assert sum(counted) <= 2 * 200 * 31  # each part once (and the pass's fired text once): linear
    counted.clear()
    activation = _fire(["Hal: hi"], *entries, tokens=tokens, max_context=4 * 31 * 100)  # binds at 100 entries
    assert len(activation.fired) == 99 and activation.budget_overflowed  # the 100th reaches the budget
    assert sum(counted) < 200 * 31 * 10  # near the budget only a few joined counts, not one per entry


def test_a_backtracking_regex_key_is_bounded() -> None:
    """A key is input: ``/(a|aa)+$/`` on a long run of "a"s backtracks for ages; it is stopped at the request's
    matching budget, taken as not found, and named in a warning. The control: a plain regex key still matches."""
    import time

    chat = ["Hal: " + "a" * 40 + "!"]
    started = time.perf_counter()
    activation = _fire(chat, _entry("1", keys=("/(a|aa)+$/",)), _entry("2", keys=("/a{3}!/",)))
    assert time.perf_counter() - started < 5  # a bound, not a measurement: unbounded this takes hours
    assert _uids(activation) == ["2"]
    assert len(activation.warnings) == 1 and "ran past its matching bound" in activation.warnings[0]


def test_recursion_is_bounded() -> None:
    """A book that chains entries by recursion (each names the next one's key) stops at MAX_PASSES, with a
    warning; a chain within the bound is followed to its end (the control)."""
    def chain(n: int) -> list[Entry]:
        return [_entry(str(i), f"see link{i + 1}", keys=(f"link{i}",)) for i in range(n)]

    short = _fire(["Hal: link0"], *chain(wi.MAX_PASSES - 1))  # the last pass finds nothing new: the end
    assert len(short.fired) == wi.MAX_PASSES - 1 and short.warnings == []
    long = _fire(["Hal: link0"], *chain(wi.MAX_PASSES + 50))
    assert len(long.fired) == wi.MAX_PASSES and "recursion stopped" in long.warnings[0]


def test_wi_format_wraps_each_position(tmp_path: Any) -> None:
    """``wi_format`` wraps the before and after texts (ST formatWorldInfo: the text at ``{0}``, the format's macros
    expanded; without ``{0}`` the format alone); ``{0}`` alone, the text as it is (the control)."""
    import json
    from pathlib import Path

    from zhin_cli.store.sillytavern import read_card, read_chat, read_lore
    from zhin_cli.tools.preset.check import prepare, zhin_messages, zhin_request

    golden = Path(__file__).resolve().parent / "st_golden2"
    chat = read_chat(golden / "runs" / "wi" / "chat.jsonl")
    lore = read_lore(golden / "content" / "lore-Greyreach_Almanac.json")
    before = lore.entries[0][1]["content"]

    def system_texts(wi_format: str) -> list[str]:
        preset = json.loads((golden / "content" / "st-default-preset.json").read_text(encoding="utf-8"))
        preset["wi_format"] = wi_format
        path = Path(tmp_path) / "preset.json"
        path.write_text(json.dumps(preset), encoding="utf-8")
        setup = prepare(path, chat, card=read_card(golden / "content" / "card-Mirela_Stoyan.json"), lore=lore)
        messages, _removed = zhin_messages(zhin_request(setup, chat.turns[0]))
        return [m.content for m in messages[:2]]

    assert system_texts("{0}")[1] == before
    assert system_texts("[Lore of {{char}}: {0}]")[1] == f"[Lore of Mirela Stoyan: {before}]"
    assert system_texts("[no lore here]")[1] == "[no lore here]"
