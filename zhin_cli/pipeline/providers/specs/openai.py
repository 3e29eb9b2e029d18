"""OpenAI Chat Completions: OpenAI itself, its o-series reasoning models, and OpenAI-compatible gateways."""

from __future__ import annotations

from zhin_cli.pipeline.providers.capabilities import CacheRules, ProviderSpec

WIRE = "openai-chat"
OPENAI_CACHE = CacheRules(mechanism="automatic", min_tokens=1024, step_tokens=128, lifetime_seconds=600,
                          routes_by_key=True)

SPECS = (
    ProviderSpec(
        name="openai",
        wire=WIRE,
        mid_conversation_system="system",
        cache=OPENAI_CACHE,
        example_names=True,  # ST's OpenAI source sends example turns with name example_user / example_assistant
        model_rules=(
            # o1-mini / o1-preview reject both system and developer: downgrade (providers.md §1.2)
            (r"^o1-(mini|preview)", {"mid_conversation_system": "none", "system_prompt_role": "user"}),
            (r"^o\d", {"mid_conversation_system": "developer", "system_prompt_role": "developer"}),
        ),
        description="OpenAI Chat Completions; o-series models switch to developer messages",
        display="OpenAI",
        default_model="gpt-4o",  # 1,024-token minimum, 128-token steps: the economy case's documented rules
        model_prefixes=("gpt-", "chatgpt-", "o1", "o3", "o4"),
        economy=True,
        wire_default=True,
    ),
    ProviderSpec(
        name="openai-reasoning",
        wire=WIRE,
        mid_conversation_system="developer",
        system_prompt_role="developer",
        cache=OPENAI_CACHE,
        example_names=True,
        description="OpenAI o-series reasoning models: developer messages",
        display="OpenAI",
        price_key="openai",  # the same API and price list
        default_model="o3",
        model_prefixes=("o1", "o3", "o4", "gpt-5"),
    ),
    ProviderSpec(
        name="openai-compatible",
        wire=WIRE,
        mid_conversation_system="system",
        cache=CacheRules(mechanism="none", min_tokens=0, step_tokens=1),
        example_names=True,  # the OpenAI schema's name field (ST's OpenRouter and custom sources pass it through)
        description="OpenRouter, Groq and other OpenAI-compatible gateways: system by default",
    ),
)
