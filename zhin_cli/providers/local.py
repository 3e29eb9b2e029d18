"""vLLM and Ollama: OpenAI-shaped, but what they accept is decided by the model's chat template
(reference/providers.md §5). The model id selects its family; the family sets the rules our renderer
follows so the real template accepts the request, and names the validator that answers as it would.

Both default to ``mid_conversation_system: none`` (ADR 0041 §2); a model whose template takes system
messages anywhere (Llama 3.x, Qwen2.5, early Qwen3) may opt in per model in ``zhin.yaml``.
"""

from __future__ import annotations

import re
from typing import Any

from zhin_cli.providers import CacheRules, Capabilities, register_profile

_STRICT: dict[str, Any] = {
    "alternation": "merge",  # two user turns in a row raise: merge them, each part keeping its header
    "system_only_at_start": True,
    "hold_during_tool_loop": True,
}

# (family, model-id pattern, capability overrides). First match wins: more specific patterns first.
FAMILIES: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("mixtral", r"mixtral", {**_STRICT}),
    ("mistral", r"mistral|devstral|codestral|ministral", {**_STRICT, "tool_call_id": "alnum9"}),
    ("gemma", r"gemma", {**_STRICT}),
    ("llama3", r"llama[-_ .:]?3", {"single_tool_call": True}),
    ("qwen3.5", r"qwen[-_ .:]?3\.5", {"system_only_at_start": True}),
    ("qwen2.5", r"qwen[-_ .:]?2\.5", {}),
    ("qwen3", r"qwen[-_ .:]?3", {"null_content": "empty"}),
    ("deepseek", r"deepseek", {"system_only_at_start": True}),  # the template moves every system to the top
)


def template_family(model: str) -> str | None:
    """The chat-template family of a Hugging Face id or an Ollama tag (``mistralai/Mistral-7B-Instruct-v0.3``,
    ``qwen3:0.6b`` …); None when we do not know it."""
    name = model.lower().rsplit("/", 1)[-1]
    for family, pattern, _ in FAMILIES:
        if re.search(pattern, name):
            return family
    return None


def _rules() -> tuple[tuple[str, dict[str, Any]], ...]:
    return tuple((rf"(?i)^(?:.*/)?[^/]*(?:{pattern})", {**overrides, "validator": f"template:{family}"})
                 for family, pattern, overrides in FAMILIES)


for _name, _description in (
    ("vllm", "vLLM serving a Hugging Face model: the model's chat template decides what is legal"),
    ("ollama", "Ollama: the model's chat template decides what is legal"),
):
    register_profile(
        Capabilities(
            name=_name,
            wire="openai-chat",
            validator="openai-chat",
            mid_conversation_system="none",
            cache=CacheRules(mechanism="automatic", min_tokens=0, step_tokens=1),
            model_rules=_rules(),
            description=_description,
        )
    )
