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

from zhin_cli.errors import ConfigError
from zhin_cli.preset import Layout
from zhin_cli.segments import RuntimeView

MidConversationSystem = Literal["system", "developer", "none"]


@dataclass(frozen=True)
class CacheRules:
    mechanism: Literal["automatic", "explicit", "none"] = "automatic"
    min_tokens: int = 1024
    step_tokens: int = 128
    max_breakpoints: int = 0


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
    null_content: Literal["null", "empty"] = "null"  # Qwen3 templates crash on null content
    mid_system_models: tuple[str, ...] = ()  # Anthropic: models that accept role "system" mid-conversation
    cache: CacheRules = field(default_factory=CacheRules)
    # (model regex, overrides): first match wins, e.g. o-series take `developer`.
    model_rules: tuple[tuple[str, dict[str, Any]], ...] = ()
    description: str = ""

    def for_model(self, model: str) -> Capabilities:
        for pattern, overrides in self.model_rules:
            if re.match(pattern, model):
                return replace(self, **overrides)
        return self


PROFILES: dict[str, Capabilities] = {}


def register_profile(profile: Capabilities) -> Capabilities:
    if profile.name in PROFILES:
        raise ConfigError(f"duplicate provider profile {profile.name!r}")
    PROFILES[profile.name] = profile
    return profile


@dataclass
class RenderedRequest:
    body: dict[str, Any]
    state_rendering: str  # system | developer | user | none-needed
    cache_breakpoints: list[dict[str, Any]]
    # per wire message: which segment produced it ("system" for the system prompt)
    origins: list[str]


Renderer = Callable[[Layout, Capabilities, RuntimeView], RenderedRequest]
RENDERERS: dict[str, Renderer] = {}


def register_renderer(wire: str) -> Callable[[Renderer], Renderer]:
    def add(renderer: Renderer) -> Renderer:
        RENDERERS[wire] = renderer
        return renderer

    return add


def resolve_profile(name: str, model: str, overrides: dict[str, Any] | None = None) -> Capabilities:
    """The profile for ``name`` (built-in or from ``zhin.yaml``), specialised for ``model``."""
    if name not in PROFILES:
        raise ConfigError(f"unknown provider {name!r} (known: {', '.join(sorted(PROFILES))})")
    profile = PROFILES[name].for_model(model)
    if overrides:
        allowed = {"mid_conversation_system", "system_prompt_role", "alternation", "validator"}
        bad = set(overrides) - allowed
        if bad:
            raise ConfigError(f"provider override keys {sorted(bad)} not supported (allowed: {sorted(allowed)})")
        if overrides.get("mid_conversation_system", "system") not in ("system", "developer", "none"):
            raise ConfigError("mid_conversation_system must be system, developer or none")
        profile = replace(profile, **overrides)
    return profile


def render(layout: Layout, profile: Capabilities, runtime: RuntimeView) -> RenderedRequest:
    return RENDERERS[profile.wire](layout, profile, runtime)


from zhin_cli.providers import openai as _openai  # noqa: E402,F401  (registers the OpenAI-shaped profiles)
