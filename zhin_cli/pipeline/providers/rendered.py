"""What a renderer returns, the renderers by wire format, and ``render``.

Built-in renderers are named by ``"module:function"`` and imported on the first render (the provider table stays
light); a plugin may register a callable, and a provider may name its own renderer (``ProviderSpec.renderer``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from zhin_cli.core.jsontext import JSONObject
from zhin_cli.core.registry import Registry
from zhin_cli.pipeline.providers.capabilities import Capabilities

if TYPE_CHECKING:
    from zhin_cli.pipeline.preset import Layout
    from zhin_cli.pipeline.segments import RuntimeView


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
    cache_breakpoints: list[JSONObject]  # {after | before, message_index, explicit}: Breakpoint.of reads them
    parts: list[RenderedPart]
    warnings: list[str] = field(default_factory=list)


Renderer = Callable[["Layout", Capabilities, "RuntimeView"], RenderedRequest]
# wire format → its renderer: a callable, or "module:function" imported on first use
RENDERERS: Registry[Renderer | str] = Registry("renderer for wire")
RENDERERS.update({
    # the OpenAI renderer wrapped for local chat templates: exactly render_openai for every other profile
    "openai-chat": "zhin_cli.pipeline.providers.local:render_local_chat",
    "anthropic-messages": "zhin_cli.pipeline.providers.anthropic:render_anthropic",
    "gemini-generate": "zhin_cli.pipeline.providers.gemini:render_gemini",
})


def register_renderer(wire: str, *, replace: bool = False) -> Callable[[Renderer], Renderer]:
    def add(renderer: Renderer) -> Renderer:
        RENDERERS.add(wire, renderer, replace=replace)
        return renderer

    return add


def imported(target: str) -> Any:
    """The object a ``"module:attribute"`` string names, imported now."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def renderer_for(profile: Capabilities) -> Renderer:
    """The provider's own renderer, or its wire's."""
    found: Renderer | str = profile.renderer or RENDERERS[profile.wire]
    return imported(found) if isinstance(found, str) else found


def render(layout: Layout, profile: Capabilities, runtime: RuntimeView) -> RenderedRequest:
    """Fit the preset's items to what the profile takes (``shaping.fit_layout``), then render the wire."""
    from zhin_cli.pipeline.providers.shaping import fit_layout  # the preset machinery: loaded on the first render

    return renderer_for(profile)(fit_layout(layout, profile), profile, runtime)
