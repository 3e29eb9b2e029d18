"""Gemini generateContent (docs/spec/providers.md §3)."""

from __future__ import annotations

from zhin_cli.pipeline.providers.capabilities import CacheRules, ProviderSpec

WIRE = "gemini-generate"

SPECS: tuple[ProviderSpec, ...] = (
    ProviderSpec(
        name="gemini",
        wire=WIRE,
        validator="gemini-generate",
        mid_conversation_system="none",
        alternation="merge",
        hold_during_tool_loop=True,
        cache=CacheRules(mechanism="automatic", min_tokens=1024, step_tokens=1),
        model_rules=((r"^gemini-2\.5-pro|^gemini-3", {"cache": CacheRules(mechanism="automatic", min_tokens=4096, step_tokens=1)}),),
        description="Gemini generateContent: systemInstruction, user/model contents, functionResponse pairing",
        display="Gemini",
        default_model="gemini-2.5-flash",
        model_prefixes=("gemini-",),
        wire_default=True,
    ),
)
