"""``zhin.yaml``: segment texts and additions, provider overrides, budget, window, timezone, tools, plugins.

Found upward from the current directory, or given with ``--config``. Every problem is a ``ConfigError``
naming the file (and line, where YAML knows it).
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from zhin_cli.errors import ConfigError
from zhin_cli.segments import KINDS, Generation, PromptSegmentRegistry, TextSegment
from zhin_cli.segments.builtin import default_registry
from zhin_cli.window import WindowConfig

CONFIG_NAME = "zhin.yaml"


@dataclass
class Config:
    path: Path | None = None
    provider: str | None = None
    model: str | None = None
    timezone: str | None = None
    max_chars: int | None = 100_000
    window: WindowConfig = field(default_factory=WindowConfig)
    texts: dict[str, str] = field(default_factory=dict)
    add_segments: list[TextSegment] = field(default_factory=list)
    remove_segments: list[str] = field(default_factory=list)
    provider_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    tools: list[dict[str, Any]] = field(default_factory=list)
    plugins: list[str] = field(default_factory=list)

    def registry(self) -> tuple[PromptSegmentRegistry, list[Generation]]:
        """Built-ins with this config applied, plus one generation per plugin (release to unload)."""
        registry = default_registry(self.texts)
        for segment_id in self.remove_segments:
            if segment_id not in registry:
                raise ConfigError(f"segments.remove names unknown segment {segment_id!r}", where=str(self.path))
            registry.unregister(segment_id)
        config_generation = registry.generation("zhin.yaml")
        for segment in self.add_segments:
            config_generation.register(segment)
        generations = [config_generation]
        for spec in self.plugins:
            generation = registry.generation(spec)
            _load_plugin(spec, self.path)(generation)
            generations.append(generation)
        return registry, generations


def find_config(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        candidate = folder / CONFIG_NAME
        if candidate.is_file():
            return candidate
    return None


def load_config(path: Path | None = None, *, cwd: Path | None = None, search: bool = True) -> Config:
    if path is None and search:
        path = find_config(cwd or Path.cwd())
    if path is None:
        return Config()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"no such config file: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config: {exc}", where=str(path)) from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"invalid YAML: {problem}", where=where) from None
    return parse_config(data, path)


def _expect(value: Any, kind: type | tuple[type, ...], what: str, path: Path | None) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        name = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ConfigError(f"{what} must be a {name}, got {value!r}"[:200], where=str(path) if path else None)
    return value


def parse_config(data: Any, path: Path | None = None) -> Config:
    where = str(path) if path else None
    if not isinstance(data, dict):
        raise ConfigError("the config must be a mapping", where=where)
    known = {"provider", "model", "timezone", "budget", "window", "segments", "providers", "tools", "plugins"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"unknown config keys {unknown} (known: {sorted(known)})", where=where)
    config = Config(path=path)
    for key in ("provider", "model", "timezone"):
        if data.get(key) is not None:
            setattr(config, key, _expect(data[key], str, key, path))
    budget = _expect(data.get("budget") or {}, dict, "budget", path)
    if "max_chars" in budget:
        config.max_chars = None if budget["max_chars"] is None else _expect(budget["max_chars"], int, "budget.max_chars", path)
    window = _expect(data.get("window") or {}, dict, "window", path)
    max_messages = window.get("max_messages", 80)
    config.window = WindowConfig(
        max_messages=None if max_messages is None else _expect(max_messages, int, "window.max_messages", path),
        keep_membership_events=_expect(window.get("keep_membership_events", 20), int, "window.keep_membership_events", path),
    )
    segments = _expect(data.get("segments") or {}, dict, "segments", path)
    config.texts = {str(k): _expect(v, str, f"segments.texts.{k}", path) for k, v in (_expect(segments.get("texts") or {}, dict, "segments.texts", path)).items()}
    config.remove_segments = [str(s) for s in _expect(segments.get("remove") or [], list, "segments.remove", path)]
    for index, item in enumerate(_expect(segments.get("add") or [], list, "segments.add", path)):
        item = _expect(item, dict, f"segments.add[{index}]", path)
        kind = item.get("kind")
        if kind not in KINDS[:5]:
            raise ConfigError(f"segments.add[{index}].kind must be a text kind ({', '.join(KINDS[:5])}), got {kind!r}", where=where)
        config.add_segments.append(
            TextSegment(
                id=_expect(item.get("id"), str, f"segments.add[{index}].id", path),
                kind=kind,
                text=_expect(item.get("text", ""), str, f"segments.add[{index}].text", path),
                weight=_expect(item.get("weight", 0), (int, float), f"segments.add[{index}].weight", path),
                retention=item.get("retention", "preferred"),
            )
        )
    config.provider_overrides = {
        str(k): _expect(v, dict, f"providers.{k}", path) for k, v in _expect(data.get("providers") or {}, dict, "providers", path).items()
    }
    config.tools = [_expect(t, dict, "tools[]", path) for t in _expect(data.get("tools") or [], list, "tools", path)]
    config.plugins = [_expect(p, str, "plugins[]", path) for p in _expect(data.get("plugins") or [], list, "plugins", path)]
    return config


def _load_plugin(spec: str, config_path: Path | None) -> Any:
    """``module:function`` or ``path/to/file.py:function``; the function receives a ``Generation``."""
    target, _, attr = spec.partition(":")
    attr = attr or "register"
    try:
        if target.endswith(".py"):
            file = Path(target)
            if not file.is_absolute() and config_path is not None:
                file = config_path.parent / file
            module_spec = importlib.util.spec_from_file_location(f"zhin_plugin_{file.stem}", file)
            if module_spec is None or module_spec.loader is None:
                raise ConfigError(f"cannot load plugin file {file}")
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
    except ConfigError:
        raise
    except Exception as exc:  # a plugin's own import error must not become a traceback
        raise ConfigError(f"plugin {spec!r} failed to load: {type(exc).__name__}: {exc}") from None
    function = getattr(module, attr, None)
    if not callable(function):
        raise ConfigError(f"plugin {spec!r}: no callable {attr!r}")
    return function
