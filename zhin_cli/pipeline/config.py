"""``zhin.yaml``: segment texts and additions, provider overrides, budget, window, timezone, tools, plugins.

Found upward from the current directory, or given with ``--config``. Every problem is a ``ConfigError``
naming the file and the line of the offending key (``zhin.yaml:7``). Nothing is silently ignored: the file is
checked against the published JSON Schema (:mod:`zhin_cli.pipeline.config_schema`, ``zhin schema config``) —
unknown keys at any level, unknown provider names, wrong types — and the segment ids that ``segments.texts`` and
``segments.remove`` name are checked once every segment is registered (built-ins, ``segments.add``, plugins),
still naming the key's line. So are the provider names (``provider:``, the keys of ``providers:``) of a file that
loads plugins: one of them may register the provider the file names.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, overload

from zhin_cli.core.errors import ConfigError
from zhin_cli.core.jsontext import JSONObject
from zhin_cli.core.readers import enclosing_key, read_yaml_file
from zhin_cli.core.timezones import valid_timezone
from zhin_cli.core.trust import GIVEN, PluginSource, authorize, inside, plugin_file
from zhin_cli.pipeline.config_schema import validate_config
from zhin_cli.pipeline.plugins import load_plugin as load_plugin  # eval cases load plugins with it
from zhin_cli.pipeline.plugins import run_plugin
from zhin_cli.pipeline.providers import PROVIDERS, provider_names, resolve_profile
from zhin_cli.pipeline.segments import KINDS, Generation, PromptSegmentRegistry, TextSegment
from zhin_cli.pipeline.segments.builtin import default_registry
from zhin_cli.pipeline.window import WindowConfig

if TYPE_CHECKING:
    from zhin_cli.pipeline.preset.model import Preset
    from zhin_cli.pipeline.prices import PriceTable

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
    provider_overrides: dict[str, JSONObject] = field(default_factory=dict)
    tools: list[JSONObject] = field(default_factory=list)
    plugins: list[str] = field(default_factory=list)
    preset_path: Path | None = None  # ``preset:`` (a file, or ``{file: …, user: …, char: …}``)
    preset_options: dict[str, str | int | None] = field(default_factory=dict)
    prices: JSONObject = field(default_factory=dict)  # ``prices:`` rows over the built-in table (pipeline/prices.py)
    # line of each key in the file: "window.max_messages", "segments.add[0].kind", "plugins[1]" …
    lines: dict[str, int] = field(default_factory=dict, repr=False)
    # what lets its plugins run (zhin_cli.core.trust): named on the command line, found upward, a case file, a git ref
    source: PluginSource = field(default=GIVEN, repr=False)

    def where(self, key: str) -> str | None:
        """``file:line`` of ``key`` (or of the nearest enclosing key the file has), for error messages."""
        if self.path is None:
            return None
        found = enclosing_key(self.lines, key)
        return f"{self.path}:{self.lines[found]}" if found is not None else str(self.path)

    def preset(self) -> Preset | None:
        """The message skeleton this config asks for (``None``: the built-in ADR 0041 layout). ``--preset FILE``
        does not change it: it is the ``preset=`` parameter of ``Pipeline.open`` (read with these options)."""
        path = self.preset_path
        if path is None:
            return None
        from zhin_cli.pipeline.preset.importer import load_preset

        return load_preset(path, self.preset_options)

    def price_table(self, prices_file: Path | None = None) -> PriceTable:
        """The prices a cost is computed with: the built-in table, a registered provider's rows (its spec's
        ``prices``), this config's ``prices:``, then ``--prices FILE``."""
        from zhin_cli.pipeline.prices import load_prices

        return load_prices(self.prices, prices_file, config_where=self.where)

    def registry(self) -> tuple[PromptSegmentRegistry, list[Generation]]:
        """Built-ins with this config applied, plus one generation per plugin (release to unload).

        ``segments.remove`` takes a built-in out before ``segments.add`` runs (so an added segment may reuse its
        id) and a plugin's segment out once the plugins registered; ``segments.texts`` replaces the text of a
        text segment (built-in or a plugin's) once every segment is known. An id nothing registered, or a segment
        whose text is computed each request, is refused at its key's line."""
        registry = default_registry()
        later: list[tuple[int, str]] = []  # remove ids that are not built-in: a plugin may register them
        for index, segment_id in enumerate(self.remove_segments):
            if segment_id in registry:
                registry.unregister(segment_id)
            else:
                later.append((index, segment_id))
        config_generation = registry.generation("zhin.yaml")
        for index, segment in enumerate(self.add_segments):
            try:
                config_generation.register(segment)
            except ConfigError as exc:
                raise ConfigError(exc.message, where=exc.where or self.where(f"segments.add[{index}]")) from None
        generations = [config_generation]
        try:
            self._load_plugins(registry, generations)
            if self.plugins:  # the names a plugin may have registered, checked now (and the others again)
                _check_providers(self, plugins_ran=True)
            for index, segment_id in later:
                if segment_id not in registry:
                    raise ConfigError(f"segments.remove names unknown segment {segment_id!r} (known: {', '.join(_ids(registry))})",
                                      where=self.where(f"segments.remove[{index}]"))
                registry.unregister(segment_id)
            for segment_id, text in self.texts.items():
                self._replace_text(registry, segment_id, text)
        except BaseException:
            for generation in generations:
                generation.release()
            raise
        return registry, generations

    def _load_plugins(self, registry: PromptSegmentRegistry, generations: list[Generation]) -> None:
        base = self.path.parent if self.path is not None else Path.cwd()
        for index, spec in enumerate(self.plugins):  # a ref's or a case's plugin file leaving its tree: refused first
            file = plugin_file(spec, base)
            if file is not None:
                inside(file, self.source, spec, self.where(f"plugins[{index}]"))
        authorize(self.source, self.plugins, self.where("plugins"))  # fail closed: no plugin code ran yet
        for index, spec in enumerate(self.plugins):
            generation = registry.generation(spec)
            generations.append(generation)  # released with the others if a later step fails
            run_plugin(generation, spec, self.path, self.where(f"plugins[{index}]"), source=self.source)

    def _replace_text(self, registry: PromptSegmentRegistry, segment_id: str, text: str) -> None:
        """``segments.texts.<id>``: the segment keeps its place, kind, weight, retention and owner; only its text
        changes. Only a fixed-text segment has a text to replace."""
        where = self.where(f"segments.texts.{segment_id}")
        segments = registry._segments  # the registry's own table: a replacement keeps the id's registration order
        segment = segments.get(segment_id)
        if segment is None:
            texts = [i for i in _ids(registry) if isinstance(segments[i], TextSegment)]
            raise ConfigError(f"segments.texts names unknown segment {segment_id!r} (text segments: {', '.join(texts)})", where=where)
        owner = registry.owner(segment_id)
        if not isinstance(segment, TextSegment):
            made = COMPUTED.get(segment_id, "computed by its plugin" if owner != "builtin" else "computed each request")
            raise ConfigError(f"segments.texts: {segment_id} has no fixed text to replace ({made}); leave it out with "
                              f"segments.remove and add a text segment of kind {segment.kind} with segments.add", where=where)
        if owner == "zhin.yaml":
            raise ConfigError(f"segments.texts: {segment_id} is added by segments.add in this file: set its text there", where=where)
        segments.add(segment_id, dataclasses.replace(segment, text=text), replace=True, owner=owner)


# Why a built-in segment has no text that segments.texts could replace (the message says what to do instead).
COMPUTED = {
    "core.persona": "it is written each request from the bot's name, user_id and group nickname",
    "core.environment": "it is written each request from the model, provider and time zone",
    "core.scene": "it is written each request from the scene's facts",
    "history.summary": "it is the compaction summary of the session",
    "history.user": "it is the conversation's messages",
    "history.assistant": "it is the conversation's messages",
    "history.tool": "it is the conversation's tool calls and results",
    "history.state": "it is the conversation's state changes",
}


def _ids(registry: PromptSegmentRegistry) -> list[str]:
    return [segment.id for segment in registry.ordered()]


def find_config(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        candidate = folder / CONFIG_NAME
        if candidate.is_file():
            return candidate
    return None


def load_config(path: Path | None = None, *, cwd: Path | None = None, search: bool = True) -> Config:
    """``path`` (named by the user: its plugins may run), else the ``zhin.yaml`` found upward from ``cwd``
    (its plugins run only if trusted: ``zhin trust``, ``--allow-plugins``), else the built-in defaults."""
    source = GIVEN
    if path is None and search:
        path = find_config(cwd or Path.cwd())
        source = PluginSource("found", path) if path is not None else GIVEN
    if path is None:
        return Config()
    data, lines = read_yaml_file(path)
    config = parse_config(data, path, lines)
    config.source = source
    return config


def _cut_to(window: Mapping[str, object], key: str, limit_key: str, limit: int | None, config: Config) -> int | None:
    """``window.cut_to`` / ``cut_blocks_to``: where a window over its limit is cut, 0 … limit − 1."""
    value = window.get(key)
    if value is None:
        return None
    cut: int = _expect(value, int, f"window.{key}", config)
    if limit is None or not 0 <= cut < limit:
        raise ConfigError(f"window.{key} must be from 0 to window.{limit_key} - 1, got {cut}", where=config.where(f"window.{key}"))
    return cut


_T = TypeVar("_T")
_U = TypeVar("_U")


@overload
def _expect(value: object, kind: type[_T], what: str, config: Config) -> _T: ...


@overload
def _expect(value: object, kind: tuple[type[_T], type[_U]], what: str, config: Config) -> _T | _U: ...


def _expect(value: object, kind: type[object] | tuple[type[object], ...], what: str, config: Config) -> object:
    """``value`` if it is a ``kind`` (a bool is no number), else the ConfigError naming ``what``'s line."""
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        name = _TYPE_NAMES.get(kind, str(kind)) if isinstance(kind, type) else " or ".join(_TYPE_NAMES.get(k, str(k)) for k in kind)
        raise ConfigError(f"{what} must be {name}, got {value!r}"[:200], where=config.where(what))
    return value


_TYPE_NAMES: dict[type[object], str] = {str: "a string", int: "an integer", float: "a number", dict: "a mapping", list: "a list"}


def parse_config(data: object, path: Path | None = None, lines: dict[str, int] | None = None) -> Config:
    config = Config(path=path, lines=lines or {})
    if not isinstance(data, dict):
        raise ConfigError("the config must be a mapping", where=config.where(""))
    if isinstance(data.get("prices"), dict):  # YAML reads an unquoted read_on as a date; a price row keeps the text
        from zhin_cli.pipeline.prices import dates_as_text

        data = {**data, "prices": dates_as_text(data["prices"])}
    if data.get("provider") is not None:  # a number or a list is no name: its type, before the name check says "unknown"
        _expect(data["provider"], str, "provider", config)
    # the published schema (`zhin schema config`): keys, types, and the provider names unless a plugin may add one
    validate_config(data, config.where, provider_names=not _loads_plugins(data))
    for key in ("provider", "model", "timezone"):
        if data.get(key) is not None:
            setattr(config, key, _expect(data[key], str, key, config))
    if config.timezone and not valid_timezone(config.timezone):
        raise ConfigError(f"unknown time zone {config.timezone!r} (expected an IANA name such as Asia/Shanghai)", where=config.where("timezone"))
    config.prices = _expect(data.get("prices") or {}, dict, "prices", config)
    budget = _expect(data.get("budget") or {}, dict, "budget", config)
    if "max_chars" in budget:
        config.max_chars = None if budget["max_chars"] is None else _expect(budget["max_chars"], int, "budget.max_chars", config)
    window = _expect(data.get("window") or {}, dict, "window", config)
    max_messages = window.get("max_messages", 80)
    if max_messages is not None:
        max_messages = _expect(max_messages, int, "window.max_messages", config)
        if max_messages < 1:
            raise ConfigError(f"window.max_messages must be at least 1 (or null for no limit), got {max_messages}",
                              where=config.where("window.max_messages"))
    keep_events = _expect(window.get("keep_membership_events", 20), int, "window.keep_membership_events", config)
    if keep_events < 0:
        raise ConfigError(f"window.keep_membership_events must be 0 or more, got {keep_events}",
                          where=config.where("window.keep_membership_events"))
    cut_to = _cut_to(window, "cut_to", "max_messages", max_messages, config)
    max_blocks = window.get("max_blocks")
    if max_blocks is not None:
        max_blocks = _expect(max_blocks, int, "window.max_blocks", config)
        if max_blocks < 1:
            raise ConfigError(f"window.max_blocks must be at least 1 (or null for no limit), got {max_blocks}",
                              where=config.where("window.max_blocks"))
    cut_blocks_to = _cut_to(window, "cut_blocks_to", "max_blocks", max_blocks, config)
    config.window = WindowConfig(max_messages=max_messages, keep_membership_events=keep_events, cut_to=cut_to,
                                 max_blocks=max_blocks, cut_blocks_to=cut_blocks_to)
    segments = _expect(data.get("segments") or {}, dict, "segments", config)
    config.texts = {str(k): _expect(v, str, f"segments.texts.{k}", config) for k, v in (_expect(segments.get("texts") or {}, dict, "segments.texts", config)).items()}
    config.remove_segments = [str(s) for s in _expect(segments.get("remove") or [], list, "segments.remove", config)]
    for index, item in enumerate(_expect(segments.get("add") or [], list, "segments.add", config)):
        item = _expect(item, dict, f"segments.add[{index}]", config)
        kind = item.get("kind")
        if kind not in KINDS[:5]:
            raise ConfigError(f"segments.add[{index}].kind must be a text kind ({', '.join(KINDS[:5])}), got {kind!r}",
                              where=config.where(f"segments.add[{index}].kind"))
        retention = item.get("retention", "preferred")
        if retention not in ("required", "preferred"):
            raise ConfigError(f"segments.add[{index}].retention must be required or preferred, got {retention!r}",
                              where=config.where(f"segments.add[{index}].retention"))
        config.add_segments.append(
            TextSegment(
                id=_expect(item.get("id"), str, f"segments.add[{index}].id", config),
                kind=kind,
                text=_expect(item.get("text", ""), str, f"segments.add[{index}].text", config),
                weight=_expect(item.get("weight", 0), (int, float), f"segments.add[{index}].weight", config),
                retention=retention,
            )
        )
    config.provider_overrides = {
        str(k): _expect(v, dict, f"providers.{k}", config) for k, v in _expect(data.get("providers") or {}, dict, "providers", config).items()
    }
    config.tools = [_expect(t, dict, f"tools[{i}]", config) for i, t in enumerate(_expect(data.get("tools") or [], list, "tools", config))]
    config.plugins = [_expect(p, str, f"plugins[{i}]", config) for i, p in enumerate(_expect(data.get("plugins") or [], list, "plugins", config))]
    _check_providers(config, plugins_ran=not config.plugins)
    _parse_preset(data.get("preset"), config)
    return config


def _parse_preset(raw: object, config: Config) -> None:
    """``preset: presets/x.json`` or ``preset: {file: presets/x.json, user: …, char: …, seed: 3}``."""
    if raw is None:
        return
    from zhin_cli.pipeline.preset.importer import card_options

    raw = _expect(raw, (str, dict), "preset", config)
    options = {"file": raw} if isinstance(raw, str) else raw
    file = options.get("file")
    if file is not None:
        file = _expect(file, str, "preset.file", config)
        path = Path(file).expanduser()
        if not path.is_absolute() and config.path is not None:
            path = config.path.parent / path
        config.preset_path = path
    config.preset_options = card_options(options, config.where("preset") or "zhin.yaml")


def _loads_plugins(data: Mapping[str, object]) -> bool:
    plugins = data.get("plugins")
    return isinstance(plugins, list) and bool(plugins)


def _check_providers(config: Config, *, plugins_ran: bool) -> None:
    """The providers the file names (``provider:``, the keys of ``providers:``) exist, and each one's overrides
    apply, at their lines. Until the file's plugins ran a name no provider has may be one of theirs: it is checked
    (with every other) by ``Config.registry`` once they ran."""
    named = [("provider", config.provider)] if config.provider else []
    named += [(f"providers.{name}", name) for name in config.provider_overrides]
    for key, name in named:
        if name not in PROVIDERS:
            if not plugins_ran:
                continue
            under = " under providers" if key != "provider" else ""
            raise ConfigError(f"unknown provider {name!r}{under} (known: {', '.join(provider_names())})", where=config.where(key))
        if key != "provider":
            _check_provider_overrides(name, config.provider_overrides[name], config)


def _check_provider_overrides(name: str, overrides: Mapping[str, object], config: Config) -> None:
    """What ``resolve_profile`` would reject for some model, rejected now, naming the line."""
    key = f"providers.{name}"
    try:
        resolve_profile(name, "", {k: v for k, v in overrides.items() if k != "models"})
    except ConfigError as exc:
        raise ConfigError(f"{key}: {exc.message}", where=config.where(key)) from None
    models = overrides.get("models")
    if models is None:
        return
    if not isinstance(models, dict):
        raise ConfigError(f"{key}.models must map a model regex to overrides", where=config.where(f"{key}.models"))
    for pattern, extra in models.items():
        where = config.where(f"{key}.models.{pattern}")
        try:
            re.compile(str(pattern))
        except re.error as exc:
            raise ConfigError(f"{key}.models: bad regex {pattern!r}: {exc}", where=where) from None
        if not isinstance(extra, dict) or "models" in extra:
            raise ConfigError(f"{key}.models.{pattern} must be a mapping of overrides", where=where)
        try:
            resolve_profile(name, "", extra)
        except ConfigError as exc:
            raise ConfigError(f"{key}.models.{pattern}: {exc.message}", where=where) from None
