"""Stage 7 — providers and wire renderers (ADR 0041 §2, docs/spec/providers.md).

A provider (``ProviderSpec``, the same class as ``Capabilities``) says what the API accepts (where the system prompt
goes, how mid-conversation state changes may be sent, cache rules) and what zhin knows about it besides (display
name, price rows, default model, economy case); a *renderer* turns a ``Layout`` into one wire format. Both are
registries: adding a provider is registering one spec (a module in ``specs/``, or ``register_provider`` from a
plugin), never another branch.

The package is split so that reading the provider table stays light (completion, ``--help``):

* ``capabilities`` — the spec class; ``specs/`` — the built-in providers, as data;
* ``spec`` — the registry: ``provider``, ``provider_names``, ``for_wire``, ``register_provider``, ``resolve_profile``,
  ``resolved``;
* ``rendered`` — ``RenderedRequest``, the renderers by wire (imported on first use) and ``render``;
* ``openai``, ``anthropic``, ``gemini``, ``local``, ``shaping`` — the renderers; nothing here imports them.
"""

from __future__ import annotations

from zhin_cli.pipeline.providers.capabilities import CacheRules, Capabilities, MidConversationSystem, ProviderSpec
from zhin_cli.pipeline.providers.rendered import (
    RENDERERS,
    RenderedPart,
    RenderedRequest,
    Renderer,
    register_renderer,
    render,
    renderer_for,
)
from zhin_cli.pipeline.providers.spec import (
    BOOLEAN_OVERRIDES,
    OVERRIDABLE,
    OVERRIDE_VALUES,
    PROFILES,
    PROVIDERS,
    UnknownProvider,
    for_wire,
    provider,
    provider_names,
    register_profile,
    register_provider,
    resolve_profile,
    resolved,
    unknown_provider,
    unregister_provider,
)

__all__ = [
    "BOOLEAN_OVERRIDES", "OVERRIDABLE", "OVERRIDE_VALUES", "PROFILES", "PROVIDERS", "RENDERERS", "CacheRules",
    "Capabilities", "MidConversationSystem", "ProviderSpec", "RenderedPart", "RenderedRequest", "Renderer",
    "UnknownProvider", "for_wire", "provider", "provider_names", "register_profile", "register_provider",
    "register_renderer", "render", "renderer_for", "resolve_profile", "resolved", "unknown_provider",
    "unregister_provider",
]
