"""A provider: what its API accepts (the *capabilities*: where the system prompt goes, how mid-conversation state
changes may be sent, cache rules) and the rest of what zhin knows about it (display name, price rows, default model,
economy case, renderer by name). One object per provider, ``ProviderSpec`` (= ``Capabilities``), registered in
``spec.PROVIDERS`` (issue 32).

This module is light on purpose (no renderer, no wire module, no preset): the provider table is read by shell
completion and ``--help``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from zhin_cli.wire import WireFormat

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
    """A provider's spec: ``ProviderSpec`` is this class (one object per provider, issue 32), so an argument error
    names ``ProviderSpec`` (``ProviderSpec.__init__() missing …``)."""

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

    # --- the rest of the provider (issue 32: one object per provider; every list of providers reads these) ---
    display: str = ""  # how reports name it ("OpenAI"); "" = the name
    # "module:function" of its renderer, imported on first render (``rendered.render``); None = its wire's renderer
    renderer: str | None = None
    price_key: str | None = None  # whose price rows bill it (openai-reasoning → openai); None = its own name
    # A plugin provider's own rows, as one provider entry of prices.json ({default: MODEL, models: {…}}), billed
    # under ``prices_under``; the shipped table's rows live in prices.json. zhin.yaml and --prices still win.
    prices: Mapping[str, Any] | None = None
    # The model a request names when only the provider is given, and the prefixes its model names start with
    # (``pipeline.models``); None = it serves any vendor's model (a gateway, a local server).
    default_model: str | None = None
    model_prefixes: tuple[str, ...] = ()
    economy: bool = False  # one of ``report economy``'s default providers (its model: ``default_model``)
    economy_min_tokens: int | None = None  # the economy case's minimum cacheable prefix, where the model sets it
    wire_default: bool = False  # the provider a bare body of its wire is simulated as (captured bodies, serve)

    @property
    def title(self) -> str:
        """The name reports print: ``display``, or the name."""
        return self.display or self.name

    @property
    def prices_under(self) -> str:
        """The provider key of the price rows that bill this provider."""
        return self.price_key or self.name

    def resolution_key(self, model: str) -> tuple[object, ...]:
        """What, besides the model, ``for_model`` depends on (module state such as DeepSeek's R1-era list): part of
        the key under which a resolved profile is cached (``spec.resolved``)."""
        return ()

    @property
    def wire_model(self) -> WireFormat:
        """Everything about this profile's API format (``zhin_cli.wire``): cache regions and blocks in hashing
        order, messages, tool calls and results, the usage shape. Tools ask it instead of branching on ``wire``."""
        from zhin_cli.wire import wire_for  # imported on use: the provider table stays light (completion)

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


# The one object per provider (issue 32): the capabilities grew the provider's other fields, so every reader of the
# profile table (``PROFILES``) reads providers unchanged.
ProviderSpec = Capabilities
# ``ProviderSpec(...)`` is the name plugins call: a missing or doubled argument says "ProviderSpec.__init__() …"
# (Python names the function by its qualified name), not the older class name they never wrote.
Capabilities.__init__.__qualname__ = "ProviderSpec.__init__"
