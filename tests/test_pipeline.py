"""The Pipeline facade (issue 16 item 1): one call wires config → registry → assembler and releases the plugin
generations; ``preset=`` is a parameter; one turn costs its window (item 2, the 20k-message case of the brief)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import MIN, SEC, T0, History, answered_chat

from zhin_cli import Pipeline as ExportedPipeline
from zhin_cli.pipeline.assemble import AssembledRequest, Assembler, Breakpoint, WindowReport
from zhin_cli.pipeline.config import parse_config
from zhin_cli.pipeline.facade import Pipeline
from zhin_cli.pipeline.preset.importer import load_preset

PRESET = Path(__file__).resolve().parent.parent / "fixtures" / "presets" / "st-default.json"
PLUGIN = (
    "from zhin_cli.pipeline.segments import TextSegment\n"
    "def register(generation):\n"
    "    generation.register(TextSegment('my.platform', 'platform', 'FROM PLUGIN', weight=5))\n"
)


def test_the_package_exports_the_pipeline_lazily() -> None:
    assert ExportedPipeline is Pipeline


def test_plugin_generations_are_released_when_the_pipeline_closes(tmp_path: Path) -> None:
    (tmp_path / "myplugin.py").write_text(PLUGIN, encoding="utf-8")
    (tmp_path / "zhin.yaml").write_text("plugins:\n  - myplugin.py:register\n", encoding="utf-8")
    session = answered_chat(2).session()
    with Pipeline.open(tmp_path / "zhin.yaml") as pipeline:  # a named file: its plugins may run
        assert "my.platform" in pipeline.registry
        assert "FROM PLUGIN" in json.dumps(pipeline.request(session).request, ensure_ascii=False)
    assert "my.platform" not in pipeline.registry
    pipeline.close()  # idempotent


def test_the_generations_are_released_when_the_body_raises(tmp_path: Path) -> None:
    (tmp_path / "myplugin.py").write_text(PLUGIN, encoding="utf-8")
    (tmp_path / "zhin.yaml").write_text("plugins:\n  - myplugin.py:register\n", encoding="utf-8")
    with pytest.raises(RuntimeError), Pipeline.open(str(tmp_path / "zhin.yaml")) as pipeline:
        raise RuntimeError("boom")
    assert "my.platform" not in pipeline.registry


def test_preset_is_a_parameter_a_path_or_a_preset() -> None:
    session = answered_chat(3).session()
    config = parse_config({})
    with Pipeline.open(config, preset=PRESET) as by_path, Pipeline.open(config, preset=load_preset(PRESET)) as by_object, \
            Pipeline.open(config) as plain:
        assert by_path.preset is not None and plain.preset is None
        with_preset = by_path.request(session).as_dict()
        assert with_preset == by_object.request(session).as_dict()
        assert with_preset != plain.request(session).as_dict()  # negative control: the preset changes the request
    # the config's own preset: options apply to a preset given as a path too
    with Pipeline.open(parse_config({"preset": {"file": str(PRESET), "greeting": "hi {{user}}"}}), preset=PRESET) as opened:
        assert opened.turns(session).card_greeting


def test_turn_numbers_count_from_the_end_and_out_of_range_is_a_usage_error() -> None:
    from zhin_cli.core.errors import UsageError

    session = answered_chat(4).session()
    with Pipeline.open(parse_config({})) as pipeline:
        assert pipeline.request(session, turn=-1).turn == 4 and pipeline.request(session, turn=-4).turn == 1
        assert [r.turn for r in pipeline.replay(session, turns=[3, -1])] == [3, 4]
        for turn in (0, 5, -5):
            with pytest.raises(UsageError, match="out of range"):
                pipeline.request(session, turn=turn)


class _Counting(Assembler):
    """Counts the requests rendered and the placements made (a placement-only turn is not rendered)."""

    rendered = 0
    placed = 0

    def render(self, placement, **kwargs):  # type: ignore[no-untyped-def]
        type(self).rendered += 1
        return super().render(placement, **kwargs)

    def place(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        type(self).placed += 1
        return super().place(*args, **kwargs)


def _long_chat(turns: int) -> History:
    h = History()
    for i in range(turns):
        h.user(T0 + i * MIN, "10002" if i % 3 else "10003", f"m{i}")
        if i % 7 == 3:
            h.event(T0 + i * MIN - 30 * SEC, "member_left", "10008 leave 1048877509")  # late: before the reply
        h.assistant(T0 + i * MIN + 500, f"r{i}")
    return h


def test_one_turn_of_a_20k_message_session_renders_only_that_turn() -> None:
    """The brief's case: ``trace --turn k`` on a 20k-message session must not assemble turns 1..k-1. It renders
    one request and places only the turns since its window last moved (≤ the window's step, 40 by default)."""
    _Counting.rendered = _Counting.placed = 0
    session = _long_chat(8_000).session()  # 8,000 turns: ≈ 17k messages with the late events
    assert len(session.messages) > 16_000
    config = parse_config({})
    pipeline = Pipeline(_Counting(config.registry()[0], config), [])
    request = pipeline.request(session, turn=7_000)
    assert request.turn == 7_000 and _Counting.rendered == 1
    assert 1 <= _Counting.placed <= 1 + 40  # the turn itself and those since the last move
    # negative control: the replay the old trace ran renders every turn up to the wanted one
    _Counting.rendered = _Counting.placed = 0
    short = _long_chat(300).session()
    for replayed in pipeline.replay(short):
        if replayed.turn == 250:
            break
    assert _Counting.rendered == 250
    assert replayed.as_dict() == pipeline.request(short, turn=250).as_dict()


def test_records_are_typed_and_keep_the_json() -> None:
    session = answered_chat(3).session()
    with Pipeline.open(parse_config({"window": {"max_messages": 4}}), provider="anthropic", model="claude-sonnet-4-5") as pipeline:
        request = pipeline.request(session)
    assert isinstance(request, AssembledRequest) and isinstance(request.window, WindowReport)
    assert all(isinstance(b, Breakpoint) for b in request.cache_breakpoints) and request.cache_breakpoints
    data = request.as_dict()
    assert data["window"] == {"messages": request.window.messages, "dropped": request.window.dropped,
                              "summary_anchor": None, "carried_events": 0}
    assert data["cache_breakpoints"][0] == {"after": "system", "message_index": -1, "explicit": True}
    assert request.profile.name == "anthropic"
    assert request.tail_text is not None and request.tail_text.startswith("[scene_id:1048877509;")
    assert request.tail_text in json.dumps(request.request, ensure_ascii=False)  # the tail as the wire carries it
    texts = dict(request.system_texts)
    wire = json.dumps(request.request, ensure_ascii=False)
    assert texts["core.rules"] and all(json.dumps(text, ensure_ascii=False)[1:-1] in wire for text in texts.values())


def test_a_preset_given_to_one_pipeline_never_reaches_another() -> None:
    """``--preset`` is a parameter, not ambient state: the ContextVar it replaced made every config loaded while
    it was set use the preset, so a second pipeline opened meanwhile got it too."""
    import zhin_cli.pipeline.config as config_module

    assert not hasattr(config_module, "preset_override")
    config = parse_config({})
    with Pipeline.open(config, preset=PRESET) as with_preset, Pipeline.open(config) as without:
        assert with_preset.preset is not None and without.preset is None and config.preset() is None


def test_one_turn_reads_only_its_window_from_a_lazy_session() -> None:
    """With a source that parses rows on demand (``LazyMessages``), one turn of a 17k-message session parses its
    window, the membership events carried into it and the turns since the last move — also with the card
    greeting in front, which is a view, not a copy. Negative control: a full replay parses every row."""
    from dataclasses import replace

    from zhin_cli.core.model import LazyMessages, SessionOutline

    stored = _long_chat(8_000).session()
    rows = list(stored.messages)

    def lazy() -> LazyMessages:
        return LazyMessages(SessionOutline.of_messages(rows), lambda positions: [rows[i] for i in positions])

    card = parse_config({"preset": {"file": str(PRESET), "greeting": "hi {{user}}"}})
    for config in (parse_config({}), card):
        messages = lazy()
        with Pipeline.open(config) as pipeline:
            request = pipeline.request(replace(stored, messages=messages), turn=7_000)
            assert request.as_dict() == pipeline.request(stored, turn=7_000).as_dict()
        assert len(messages.parsed_positions) < 400 < len(rows)
    short = _long_chat(300).session()
    rows = list(short.messages)
    messages = lazy()
    with Pipeline.open(parse_config({})) as pipeline:
        assert [r.turn for r in pipeline.replay(replace(short, messages=messages), turns=[40, 250])] == [40, 250]
        assert len(messages.parsed_positions) < 400
        sum(1 for _ in pipeline.replay(replace(short, messages=messages)))
    assert len(messages.parsed_positions) == len(rows) - 1  # every row but the last reply, which no request sees
