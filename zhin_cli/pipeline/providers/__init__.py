"""Stage 7 — provider capabilities and wire renderers (ADR 0041 §2, reference/providers.md).

A provider *profile* says what the API accepts (where the system prompt goes, how mid-conversation state
changes may be sent, cache rules); a *renderer* turns a ``Layout`` into one wire format. Both are
registries: adding a provider is registering one ``Capabilities`` object, never another branch.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from zhin_cli.core.errors import ConfigError
from zhin_cli.core.registry import Registry
from zhin_cli.pipeline.preset import Layout
from zhin_cli.pipeline.segments import RuntimeView
from zhin_cli.wire import WireFormat, wire_for

MidConversationSystem = Literal["system", "developer", "none"]


@dataclass(frozen=True)
class CacheRules:
    mechanism: Literal["automatic", "explicit", "none"] = "automatic"
    min_tokens: int = 1024
    step_tokens: int = 128
    max_breakpoints: int = 0
    # How long an unused cached prefix survives (seconds): consecutive requests of one session closer than
    # this form one "cache group" (`zhin stats cache`, `zhin report economy`). providers.md §6 table:
    # OpenAI in-memory 5–10 min idle, Anthropic 5 min refreshed on hit, DeepSeek best-effort hours.
    lifetime_seconds: int = 300
    # The provider routes a request to a cache machine by its ``prompt_cache_key`` as well as its prefix (OpenAI):
    # requests under different keys share no cached prefix (``zhin_cli.cache``). Others ignore the field.
    routes_by_key: bool = False


@dataclass(frozen=True)
class Capabilities:
    name: str
    wire: str  # which renderer: openai-chat | anthropic-messages | gemini-generate
    mid_conversation_system: MidConversationSystem
    validator: str = "openai-chat"  # which validator speaks for this API (validate.VALIDATORS)
    system_prompt_role: str = "system"  # openai-chat: system | developer | user
    # same-role runs: "free" (allowed), "merge" (we merge adjacent user turns: strict templates, Gemini)
    alternation: Literal["free", "merge"] = "free"
    system_only_at_start: bool = False  # the template rejects (or relocates) system after index 0
    tool_call_id: Literal["any", "alnum9"] = "any"  # Mistral templates: exactly 9 alphanumerics
    single_tool_call: bool = False  # Llama 3.x templates: one call per assistant message
    hold_during_tool_loop: bool = False  # no user turn between a tool result and the reply (Gemini, Mistral)
    null_content: Literal["null", "empty"] = "null"  # Qwen3 templates crash on null content
    mid_system_models: tuple[str, ...] = ()  # Anthropic: models that accept role "system" mid-conversation
    # Preset example turns (ST ``example_user`` / ``example_assistant``): True = the wire has OpenAI's ``name``
    # field and SillyTavern sends it for this source; False = the turn says who speaks in its text ("Name: "),
    # as ST's converters and post-processing do (docs/design-notes.md "name on example dialogue (A7)").
    example_names: bool = False
    prefill: bool = True  # a trailing assistant message is accepted (R1-era deepseek-reasoner: no)
    cache: CacheRules = field(default_factory=CacheRules)
    # (model regex, overrides): first match wins, e.g. o-series take `developer`.
    model_rules: tuple[tuple[str, dict[str, Any]], ...] = ()
    description: str = ""
    # OpenAI's ``prompt_cache_key`` as a template (``{provider}``, ``{model}``, ``{session_id}``, ``{session_key}``;
    # openai.py renders it): None sends none. Only from zhin.yaml, on Chat Completions profiles.
    prompt_cache_key: str | None = None

    @property
    def wire_model(self) -> WireFormat:
        """Everything about this profile's API format (``zhin_cli.wire``): cache regions and blocks in hashing
        order, messages, tool calls and results, the usage shape. Tools ask it instead of branching on ``wire``."""
        return wire_for(self.wire)

    @property
    def strict_turns(self) -> bool:
        """The template wants ST's ``strict`` shape: one leading system message, then user and assistant turns
        alternating, the first one a user turn (Mistral, Mixtral, Gemma; R1-era deepseek-reasoner)."""
        return self.alternation == "merge" and self.system_only_at_start

    def for_model(self, model: str) -> Capabilities:
        for pattern, overrides in self.model_rules:
            if re.search(pattern, model):
                return replace(self, **overrides)
        return self


PROFILES: Registry[Capabilities] = Registry("provider profile")


def register_profile(profile: Capabilities, *, replace: bool = False) -> Capabilities:
    return PROFILES.add(profile.name, profile, replace=replace)


@dataclass(frozen=True)
class RenderedPart:
    """A piece of text the renderer put on the wire, and the segment it came from (``tail``: runtime
    tail, reported under its scene segments; ``system``: the system prompt)."""

    segment_id: str
    text: str
    message_index: int  # index in the wire's message list (-1: outside it, e.g. Anthropic's top-level system)


@dataclass
class RenderedRequest:
    body: dict[str, Any]
    state_rendering: str  # system | developer | user | none-needed
    cache_breakpoints: list[dict[str, Any]]
    parts: list[RenderedPart]
    warnings: list[str] = field(default_factory=list)


Renderer = Callable[[Layout, Capabilities, RuntimeView], RenderedRequest]
RENDERERS: Registry[Renderer] = Registry("renderer for wire")


def register_renderer(wire: str, *, replace: bool = False) -> Callable[[Renderer], Renderer]:
    return RENDERERS.adding(wire, replace=replace)


# Yes/no overrides: a gateway that rejects ``name`` (example_names: false), a model served with R1-era rules
# (system_only_at_start: true, prefill: false; issue 15 A6).
BOOLEAN_OVERRIDES = frozenset({"example_names", "prefill", "system_only_at_start"})
OVERRIDABLE = {"mid_conversation_system", "system_prompt_role", "alternation", "validator", "null_content",
               "prompt_cache_key", *BOOLEAN_OVERRIDES}
OVERRIDE_VALUES: dict[str, tuple[str, ...]] = {
    "mid_conversation_system": ("system", "developer", "none"),
    "system_prompt_role": ("system", "developer", "user"),
    "alternation": ("free", "merge"),
    "null_content": ("null", "empty"),
}


def resolve_profile(name: str, model: str, overrides: dict[str, Any] | None = None) -> Capabilities:
    """The profile for ``name``, specialised for ``model``, with ``zhin.yaml`` overrides applied.

    ``overrides`` may hold the keys in ``OVERRIDABLE`` and ``models: {<regex>: {…}}`` for per-model ones.
    """
    if name not in PROFILES:
        raise ConfigError(f"unknown provider {name!r} (known: {', '.join(sorted(PROFILES))})")
    profile = PROFILES[name].for_model(model)
    overrides = dict(overrides or {})
    per_model = overrides.pop("models", None) or {}
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
            overrides.update(extra)
    if overrides:
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
            from zhin_cli.pipeline.providers.openai import check_prompt_cache_key

            check_prompt_cache_key(overrides["prompt_cache_key"], profile)
        profile = replace(profile, **overrides)
    if profile.system_only_at_start and profile.mid_conversation_system != "none":
        # the template would reject (or silently move) a system message after index 0
        profile = replace(profile, mid_conversation_system="none")
    return profile


def render(layout: Layout, profile: Capabilities, runtime: RuntimeView) -> RenderedRequest:
    """Fit the preset's items to what the profile takes (``shaping.fit_layout``), then render the wire."""
    return RENDERERS[profile.wire](fit_layout(layout, profile), profile, runtime)


# Built-in renderers and profiles register themselves on import.
from zhin_cli.pipeline.providers import anthropic as _anthropic  # noqa: E402,F401
from zhin_cli.pipeline.providers import gemini as _gemini  # noqa: E402,F401
from zhin_cli.pipeline.providers import local as _local  # noqa: E402,F401
from zhin_cli.pipeline.providers import openai as _openai  # noqa: E402,F401
from zhin_cli.pipeline.providers.shaping import fit_layout  # noqa: E402
