"""vLLM and Ollama: OpenAI-shaped, but what they accept is decided by the model's chat template
(reference/providers.md §5). The model id selects its family; the family sets the rules our renderer
follows so that the real template accepts the request, and names the validator (``served:<family>``:
the template after the server's own normalisation of the body) that answers as the server would.

Both default to ``mid_conversation_system: none`` (ADR 0041 §2); a model whose template takes system
messages anywhere (Llama 3.x, Qwen2.5, Qwen3) may opt in per model in ``zhin.yaml``.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from zhin_cli.providers import CacheRules, Capabilities, register_profile

# Model id → template family: first match wins (searched case-insensitively in the whole id, so HF ids such
# as "mistralai/Mistral-7B-Instruct-v0.3" and Ollama tags such as "mistral-nemo:12b" both work). Ids whose
# template differs from every family here map to None (Gemma 2 and 4, Llama 3.0 and 4, Qwen3-Coder/VL,
# Qwen3.6+, Mistral Small 3 / Devstral / Magistral, …) and get the plain OpenAI rules.
FAMILY_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"deepseek-?(r1|v3)", "deepseek"),  # first: R1 distills are named after their Qwen/Llama base
    (r"mixtral", "mixtral"),
    (r"mistral-7b-instruct-v0\.[12]\b", "mixtral"),  # v0.1/v0.2 ship the same template as Mixtral
    (r"mistral-nemo|mistral-7b-instruct-v0\.3|mistral-small(-instruct)?-2409|mistral-small:22b", "mistral"),
    (r"(^|/)mistral(:[\w.-]*)?$", "mistral"),  # Ollama "mistral", "mistral:7b", "mistral:v0.3" (= v0.3)
    (r"gemma-?3n?(?![\d.])", "gemma"),
    (r"llama-?3[.-][123](?!\d)", "llama3"),
    (r"qwen-?3\.5(?!\d)", "qwen3.5"),
    (r"qwen-?3(?![\d.])(?!.*(coder|vl|omni|next))", "qwen3"),
    (r"qwen-?2\.5(?!\d)", "qwen2.5"),
)

_STRICT: dict[str, Any] = {
    "alternation": "merge",  # two user turns in a row raise: merge them, each part keeping its header
    "system_only_at_start": True,
    "hold_during_tool_loop": True,  # no user turn between a tool result and the reply
}

# What each family's template needs from the renderer.
FAMILY_RULES: dict[str, dict[str, Any]] = {
    "mistral": {**_STRICT, "tool_call_id": "alnum9"},
    "mixtral": {**_STRICT, "null_content": "empty"},
    "gemma": {**_STRICT, "null_content": "empty"},
    "llama3": {"single_tool_call": True},
    "qwen3.5": {"system_only_at_start": True},
    "qwen3": {"null_content": "empty"},
    "qwen2.5": {},
    "deepseek": {"system_only_at_start": True},  # the template moves every system message to the top
}


def template_family(model: str) -> str | None:
    """The chat-template family (validator ``template:<family>``) of an HF id or an Ollama tag."""
    for pattern, family in FAMILY_PATTERNS:
        if re.search(pattern, model, flags=re.IGNORECASE):
            return family
    return None


def _rules() -> tuple[tuple[str, dict[str, Any]], ...]:
    return tuple(
        (f"(?i){pattern}", {**FAMILY_RULES[family], "validator": f"served:{family}"}) for pattern, family in FAMILY_PATTERNS
    )


_SERVERS: tuple[tuple[str, str, Literal["null", "empty"]], ...] = (
    ("vllm", "vLLM serving a Hugging Face model: the model's chat template decides what is legal", "null"),
    ("ollama", "Ollama: the model's chat template decides what is legal", "null"),
    # llama-cpp-python's server (0.3.36) validates messages with pydantic and answers an assistant tool-call
    # message with "content": null with HTTP 500 "validation errors" (found by the live tier, docs/live.md).
    ("llama-cpp", "llama-cpp-python's server: the GGUF's chat template decides; tool-call messages carry \"\" content",
     "empty"),
)
for _name, _description, _null_content in _SERVERS:
    register_profile(
        Capabilities(
            name=_name,
            wire="openai-chat",
            validator="openai-chat",
            mid_conversation_system="none",
            null_content=_null_content,
            cache=CacheRules(mechanism="automatic", min_tokens=0, step_tokens=1),
            model_rules=_rules(),
            description=_description,
        )
    )
