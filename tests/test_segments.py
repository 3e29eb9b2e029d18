"""Segments (ADR 0041 §3): fixed kind order, weights, budget trimming, plugin generations (criterion 8)."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders import SEC, T0, History, assembler, contents

from zhin_cli.core.errors import ConfigError
from zhin_cli.pipeline.config import load_config
from zhin_cli.pipeline.segments import TextSegment
from zhin_cli.pipeline.segments.builtin import default_registry


def one_request(config: dict | None = None):  # type: ignore[no-untyped-def,type-arg]
    h = History()
    h.user(T0, "10002", "hi")
    h.assistant(T0 + SEC, "(reply)")
    return list(assembler(config).replay(h.session()))[-1]


def test_kinds_in_fixed_order_and_weight_descending_within_a_kind() -> None:
    config = {"segments": {"add": [
        {"id": "p.low", "kind": "system", "weight": 1, "text": "LOW"},
        {"id": "p.high", "kind": "system", "weight": 500, "text": "HIGH"},
        {"id": "p.env", "kind": "environment", "weight": 1000, "text": "ENV"},
    ]}}
    request = one_request(config)
    ids = [s.id for s in request.segments if s.messages is None]
    assert ids == ["p.high", "core.rules", "p.low", "p.env", "core.environment", "core.persona", "core.platform", "core.scene"]
    system = contents(request)[0]
    assert system.index("HIGH") < system.index("LOW") < system.index("ENV")


def test_duplicate_segment_id_is_an_error() -> None:
    registry = default_registry()
    with pytest.raises(ConfigError, match="duplicate segment id 'core.rules'"):
        registry.register(TextSegment("core.rules", "system", "again"))
    generation = registry.generation("plugin-a")
    generation.register(TextSegment("a.x", "platform", "x"))
    with pytest.raises(ConfigError, match="registered by plugin-a"):
        registry.generation("plugin-b").register(TextSegment("a.x", "platform", "y"))


def test_unknown_kind_is_an_error() -> None:
    with pytest.raises(ConfigError, match="unknown kind"):
        default_registry().register(TextSegment("x", "footer", "x"))


def test_budget_trims_preferred_least_important_first_and_never_required() -> None:
    big = "x" * 400
    config = {
        "budget": {"max_chars": 1500},
        "segments": {"add": [
            {"id": "keep.required", "kind": "platform", "weight": 0, "retention": "required", "text": "R" * 400},
            {"id": "trim.first", "kind": "platform", "weight": 1, "text": big},
            {"id": "trim.second", "kind": "role_rules", "weight": 50, "text": "y" * 400},
        ]},
    }
    request = one_request(config)
    by_id = {s.id: s for s in request.segments}
    assert by_id["keep.required"].trimmed == 0 and by_id["keep.required"].chars == 400
    assert by_id["trim.first"].trimmed == 400 and by_id["trim.first"].chars == 0  # dropped whole
    assert 0 < by_id["trim.second"].trimmed < 400  # cut, then the budget fits
    assert by_id["core.rules"].trimmed == 0
    assert len(contents(request)[0]) <= 1500


def test_without_budget_pressure_nothing_is_trimmed() -> None:
    request = one_request({"budget": {"max_chars": None}, "segments": {"add": [{"id": "big", "kind": "platform", "text": "x" * 5000}]}})
    assert all(s.trimmed == 0 for s in request.segments)


def test_criterion_8_plugin_platform_segment_appears_in_place_and_vanishes_with_its_generation() -> None:
    registry = default_registry()
    h = History()
    h.user(T0, "10002", "hi")
    h.assistant(T0 + SEC, "(reply)")
    session = h.session()
    from zhin_cli.pipeline.assemble import Assembler
    from zhin_cli.pipeline.config import Config

    with registry.loaded("weather-plugin") as generation:
        generation.register(TextSegment("weather.guide", "platform", "WEATHER TOOL GUIDE", weight=10))
        request = list(Assembler(registry, Config()).replay(session))[-1]
        system = contents(request)[0]
        # platform kind: after role_rules (persona), with the built-in platform text (weight 100) first
        assert system.index("You are Zhin") < system.index("Reply as one participant") < system.index("WEATHER TOOL GUIDE")
    assert "weather.guide" not in registry
    after = list(Assembler(registry, Config()).replay(session))[-1]
    assert "WEATHER TOOL GUIDE" not in contents(after)[0]
    assert contents(after)[0] == system.replace("\n\nWEATHER TOOL GUIDE", "")


def test_plugin_from_zhin_yaml_registers_through_a_generation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZHIN_ALLOW_PLUGINS", "1")  # a zhin.yaml found upward runs its plugins only when trusted
    (tmp_path / "myplugin.py").write_text(
        "from zhin_cli.pipeline.segments import TextSegment\n"
        "def register(generation):\n"
        "    generation.register(TextSegment('my.platform', 'platform', 'FROM PLUGIN', weight=5))\n",
        encoding="utf-8",
    )
    (tmp_path / "zhin.yaml").write_text("plugins:\n  - myplugin.py:register\n", encoding="utf-8")
    config = load_config(cwd=tmp_path)
    registry, generations = config.registry()
    assert registry.owner("my.platform") == "myplugin.py:register"
    for generation in generations:
        generation.release()
    assert "my.platform" not in registry


def test_a_plugin_file_may_define_dataclasses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZHIN_ALLOW_PLUGINS", "1")
    # @dataclass looks its class's module up in sys.modules: a plugin file must be registered there while it runs.
    (tmp_path / "dc.py").write_text(
        "from dataclasses import dataclass\n"
        "@dataclass\n"
        "class Note:\n"
        "    id: str = 'dc.note'\n"
        "    kind: str = 'platform'\n"
        "    weight: float = 1\n"
        "    retention: str = 'preferred'\n"
        "    def inject(self, input):\n"
        "        return 'note'\n"
        "def register(generation):\n"
        "    generation.register(Note())\n",
        encoding="utf-8",
    )
    (tmp_path / "zhin.yaml").write_text("plugins:\n  - dc.py:register\n", encoding="utf-8")
    registry, generations = load_config(cwd=tmp_path).registry()
    assert "dc.note" in registry
    for generation in generations:
        generation.release()


def test_broken_plugin_is_a_config_error_not_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZHIN_ALLOW_PLUGINS", "1")
    (tmp_path / "bad.py").write_text("raise RuntimeError('boom')\n", encoding="utf-8")
    (tmp_path / "zhin.yaml").write_text("plugins: [bad.py]\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="plugin 'bad.py' failed to load: RuntimeError: boom"):
        load_config(cwd=tmp_path).registry()


def test_yaml_error_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "zhin.yaml").write_text("provider: openai\nwindow: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"zhin.yaml:\d+: invalid YAML"):
        load_config(cwd=tmp_path)


def test_a_plugin_segment_that_raises_is_a_one_line_error() -> None:
    class Broken:
        id, kind, weight, retention = "plugin.broken", "platform", 1, "preferred"

        def inject(self, input):  # type: ignore[no-untyped-def]
            raise KeyError("nope")

    from zhin_cli.pipeline.assemble import Assembler
    from zhin_cli.pipeline.config import Config

    registry = default_registry()
    registry.register(Broken())
    h = History()
    h.user(T0, "10002", "hi")
    h.assistant(T0 + SEC, "r")
    with pytest.raises(ConfigError, match="segment 'plugin.broken' failed: KeyError: 'nope'"):
        list(Assembler(registry, Config()).replay(h.session()))
