"""The provider registry (issue 32: one object per provider, one table).

``PROVIDERS`` (also ``PROFILES``, its old name) maps a provider's name to its ``ProviderSpec``. The built-in specs
are the ``SPECS`` of every module in ``specs/`` — found by listing that package, so a new one is one file there —
registered when this module is imported; a plugin adds its own with ``register_provider``. Every list of providers
(``--provider`` checks and help, completion, prefix-diff's names, economy's cases, serve, ``zhin providers``) reads
this table:

* ``provider(name)`` — the spec, or the one "unknown provider … (known: …)" error;
* ``provider_names()`` — the names, sorted (cheap: nothing but this table is imported);
* ``for_wire(wire)`` — the provider a bare body of that wire format is simulated as;
* ``resolve_profile`` / ``resolved`` — the spec specialised for a model, with ``zhin.yaml``'s overrides applied;
  ``resolved`` caches the answer per (name, model, overrides), so a render does not re-check the overrides.
"""

from __future__ import annotations

import functools
import importlib
import json
import pkgutil
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import zhin_cli.pipeline.providers.specs as _builtin_specs
from zhin_cli.core.errors import ConfigError
from zhin_cli.core.registry import BUILTIN, Registry
from zhin_cli.pipeline.providers.capabilities import CacheRules, Capabilities, ProviderSpec

PROVIDERS: Registry[ProviderSpec] = Registry("provider profile")
PROFILES = PROVIDERS  # the old name: every reader of the profile table reads providers
# The order built-in specs register in (the order of economy's default cases); other modules of specs/ follow,
# sorted by name.
BUILTIN_ORDER = ("openai", "anthropic", "deepseek", "gemini", "local")


class UnknownProvider(ConfigError):
    """A provider name no spec has."""


MID_CONVERSATION_SYSTEM = ("system", "developer", "none")
CACHE_MECHANISMS = ("automatic", "explicit", "none")
CACHE_MINIMUMS = {"min_tokens": 0, "step_tokens": 1, "max_breakpoints": 0, "lifetime_seconds": 0}


def _choices(allowed: tuple[str, ...]) -> str:
    return f"{', '.join(allowed[:-1])} or {allowed[-1]}"


def check_spec(spec: ProviderSpec, *, wire: bool = True) -> None:
    """The fields every tool relies on, checked once when the spec is registered (a plugin's wrong ``wire=`` would
    otherwise be a ``KeyError`` in the first command that renders or lists it). A bad field is a ``ConfigError``
    naming the provider and the field; a plugin's is reported at its config line. ``wire=False`` skips the wire
    format (the built-ins, registered while the table is imported: the wire registry is not, and a test checks
    theirs)."""
    if not isinstance(spec, Capabilities):
        raise ConfigError(f"register_provider takes a ProviderSpec, got {type(spec).__name__}")
    name = spec.name
    if not isinstance(name, str) or not name:
        raise ConfigError(f"provider {name!r}: name must be a non-empty string")

    def bad(field_name: str, problem: str) -> ConfigError:
        return ConfigError(f"provider {name!r}: {field_name} {problem}")

    if wire:
        from zhin_cli.wire import WIRES  # imported on use: the built-in table stays light (completion)

        if not isinstance(spec.wire, str) or spec.wire not in WIRES:
            raise bad("wire", f"{spec.wire!r} is not a registered wire format (known: {', '.join(sorted(WIRES))}; "
                              "a plugin's own format is registered first, with register_wire)")
    if spec.mid_conversation_system not in MID_CONVERSATION_SYSTEM:
        raise bad("mid_conversation_system", f"must be {_choices(MID_CONVERSATION_SYSTEM)}, "
                                             f"got {spec.mid_conversation_system!r}")
    cache = spec.cache
    if not isinstance(cache, CacheRules):
        raise bad("cache", f"must be CacheRules(...), got {type(cache).__name__}")
    if cache.mechanism not in CACHE_MECHANISMS:
        raise bad("cache.mechanism", f"must be {_choices(CACHE_MECHANISMS)}, got {cache.mechanism!r}")
    for key, least in CACHE_MINIMUMS.items():
        value = getattr(cache, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise bad(f"cache.{key}", f"must be an integer ≥ {least}, got {value!r}")
    model = spec.default_model
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise bad("default_model", f"must be a non-empty string (or None: any model), got {model!r}")


def register_provider(spec: ProviderSpec, *, replace: bool = False, owner: str = BUILTIN) -> ProviderSpec:
    """Add ``spec`` under its name, once ``check_spec`` passed; a name already taken is ``DuplicateName`` unless
    ``replace``."""
    check_spec(spec)
    return _add(spec, replace=replace, owner=owner)


def _add(spec: ProviderSpec, *, replace: bool = False, owner: str = BUILTIN) -> ProviderSpec:
    return PROVIDERS.add(spec.name, spec, replace=replace, owner=owner)


def register_profile(profile: Capabilities, *, replace: bool = False) -> Capabilities:
    """The old name of ``register_provider``."""
    return register_provider(profile, replace=replace)


def unregister_provider(name: str) -> ProviderSpec | None:
    """Remove a provider (a released plugin's); absent names are ignored."""
    return PROVIDERS.remove(name)


def provider_names(extra: Iterable[str] = ()) -> list[str]:
    """Every provider's name, sorted (``extra``: names a caller knows besides, e.g. a config's plugin providers)."""
    return sorted({*PROVIDERS, *extra})


def unknown_provider(name: str) -> str:
    """The one message for a provider name no spec has."""
    return f"unknown provider {name!r} (known: {', '.join(provider_names())})"


def provider(name: str) -> ProviderSpec:
    """The spec registered as ``name``; an unknown name is ``UnknownProvider`` (a ``ConfigError``)."""
    spec = PROVIDERS.get(name)
    if spec is None:
        raise UnknownProvider(unknown_provider(name))
    return spec


def for_wire(wire: str) -> ProviderSpec:
    """The provider a body of ``wire`` with no provider named is simulated as (the one marked ``wire_default``; else
    the first registered for the wire)."""
    speaking = [spec for spec in PROVIDERS.values() if spec.wire == wire]
    if not speaking:
        raise UnknownProvider(f"no provider speaks wire format {wire!r}")
    return next((spec for spec in speaking if spec.wire_default), speaking[0])


# Yes/no overrides: a gateway that rejects ``name`` (example_names: false), a model served with R1-era rules
# (system_only_at_start: true, prefill: false; issue 15 A6).
BOOLEAN_OVERRIDES = frozenset({"example_names", "prefill", "system_only_at_start"})
OVERRIDABLE = {"mid_conversation_system", "system_prompt_role", "alternation", "validator", "null_content",
               "prompt_cache_key", *BOOLEAN_OVERRIDES}
OVERRIDE_VALUES: dict[str, tuple[str, ...]] = {
    "mid_conversation_system": MID_CONVERSATION_SYSTEM,
    "system_prompt_role": ("system", "developer", "user"),
    "alternation": ("free", "merge"),
    "null_content": ("null", "empty"),
}


def _model_overrides(name: str, model: str, overrides: Mapping[str, object] | None) -> dict[str, Any]:
    """The overrides that apply to ``model``: the top-level keys, then every matching ``models: {regex: {…}}``.
    (``Any``: they become ``Capabilities`` fields by keyword, once ``_check_overrides`` has checked each value.)"""
    merged: dict[str, Any] = dict(overrides or {})
    per_model = merged.pop("models", None) or {}
    if not isinstance(per_model, dict):
        raise ConfigError(f"providers.{name}.models must map a model regex to overrides")
    for pattern, extra in per_model.items():
        try:
            matched = re.search(str(pattern), model)
        except re.error as exc:
            raise ConfigError(f"providers.{name}.models: bad regex {pattern!r}: {exc}") from None
        if matched:
            if not isinstance(extra, dict):
                raise ConfigError(f"providers.{name}.models.{pattern} must be a mapping")
            merged.update(extra)
    return merged


def _check_overrides(overrides: Mapping[str, object], profile: Capabilities) -> None:
    bad = set(overrides) - OVERRIDABLE
    if bad:
        raise ConfigError(f"provider override keys {sorted(bad)} not supported (allowed: {sorted(OVERRIDABLE)}, models)")
    for key, allowed in OVERRIDE_VALUES.items():
        if key in overrides and overrides[key] not in allowed:
            raise ConfigError(f"{key} must be {', '.join(allowed[:-1])} or {allowed[-1]}, got {overrides[key]!r}")
    for key in BOOLEAN_OVERRIDES & overrides.keys():
        if not isinstance(overrides[key], bool):
            raise ConfigError(f"{key} must be true or false, got {overrides[key]!r}")
    if "prompt_cache_key" in overrides:
        from zhin_cli.pipeline.providers.openai import check_prompt_cache_key  # the renderer's field list

        check_prompt_cache_key(overrides["prompt_cache_key"], profile)


def resolve_profile(name: str, model: str, overrides: Mapping[str, object] | None = None) -> Capabilities:
    """The profile for ``name``, specialised for ``model``, with ``zhin.yaml`` overrides applied.

    ``overrides`` may hold the keys in ``OVERRIDABLE`` and ``models: {<regex>: {…}}`` for per-model ones.
    """
    profile = provider(name).for_model(model)
    merged = _model_overrides(name, model, overrides)
    if merged:
        _check_overrides(merged, profile)
        profile = replace(profile, **merged)
    if profile.system_only_at_start and profile.mid_conversation_system != "none":
        # the template would reject (or silently move) a system message after index 0
        profile = replace(profile, mid_conversation_system="none")
    return profile


@dataclass(frozen=True)
class _Resolution:
    """What a resolved profile depends on, hashable: the overrides by their JSON text, the spec by identity (a
    replaced or re-registered spec is another key; the cache holding the spec keeps its id from being reused)."""

    name: str
    model: str
    overrides_text: str
    spec_id: int
    spec_state: tuple[object, ...]  # ``spec.resolution_key(model)``: module state ``for_model`` reads
    spec: ProviderSpec = field(compare=False, hash=False)
    overrides: Mapping[str, object] | None = field(compare=False, hash=False)


@functools.lru_cache(maxsize=1024)  # a run names a handful of (provider, model, overrides)
def _resolve_once(key: _Resolution) -> Capabilities:
    return resolve_profile(key.name, key.model, key.overrides)


def resolved(name: str, model: str, overrides: Mapping[str, object] | None = None) -> Capabilities:
    """``resolve_profile``, computed once per (name, model, overrides) while the registered spec stays the same."""
    spec = provider(name)
    text = json.dumps(overrides or {}, sort_keys=True, default=repr)
    return _resolve_once(_Resolution(name, model, text, id(spec), spec.resolution_key(model), spec, overrides))


def _builtin_modules() -> list[str]:
    found = {info.name for info in pkgutil.iter_modules(_builtin_specs.__path__) if not info.name.startswith("_")}
    return [name for name in BUILTIN_ORDER if name in found] + sorted(found - set(BUILTIN_ORDER))


def _register_builtins() -> None:
    for name in _builtin_modules():
        module = importlib.import_module(f"{_builtin_specs.__name__}.{name}")
        for spec in module.SPECS:
            check_spec(spec, wire=False)  # the wire registry is not imported here; test_spec_checks.py checks theirs
            _add(spec)


_register_builtins()
