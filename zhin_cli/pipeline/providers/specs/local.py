"""vLLM, Ollama and llama-cpp-python's server: OpenAI-shaped, but what they accept is decided by the model's chat
template (docs/spec/providers.md §5). The model id selects its template family (``FAMILY_PATTERNS``); the family sets
the rules the renderer follows (``FAMILY_RULES``) and names the validator (``served:<family>``). The renderer
(providers/local.py) reads the same tables.
"""

from __future__ import annotations

from typing import Any, Literal

from zhin_cli.pipeline.providers.capabilities import CacheRules, ProviderSpec

# Model id → template family: first match wins (searched case-insensitively in the whole id, so HF ids such
# as "mistralai/Mistral-7B-Instruct-v0.3" and Ollama tags such as "mistral-nemo:12b" both work). Ids whose
# template differs from every family here map to None (Gemma 4, Llama 3.0 and 4, Qwen3-Coder/VL,
# Qwen3.6+, Mistral Small 3 / Devstral / Magistral, DeepSeek V3.2 and V4, …) and get the plain OpenAI rules.
FAMILY_PATTERNS: tuple[tuple[str, str], ...] = (
    # first: R1 distills are named after their Qwen/Llama base. V3 and V3.1 ship different templates.
    (r"deepseek-?v3\.1(?!\d)", "deepseek-v3.1"),
    # V3.2-Exp ships V3.1's template (llama.cpp recognises both by the same template text, ggml-org/llama.cpp#19474;
    # not in §5, but deepseek and deepseek-v3.1 have the same rules, which it already got from the R1 catch-all).
    # V3.2 itself (and V3.2-Speciale) ships no Jinja template at all: vLLM and SGLang render it with DeepSeek's own
    # Python encoder, which §5 does not describe, so it is excluded from the R1 catch-all below and gets None.
    (r"deepseek-?v3\.2-?exp", "deepseek-v3.1"),
    (r"deepseek-?v3(?![.\d])", "deepseek-v3"),
    (r"deepseek-?(r1|v3(?!\.[2-9]))", "deepseek"),
    (r"mixtral", "mixtral"),
    (r"mistral-7b-instruct-v0\.[12]\b", "mixtral"),  # v0.1/v0.2 ship the same template as Mixtral
    (r"mistral-nemo|mistral-7b-instruct-v0\.3|mistral-small(-instruct)?-2409|mistral-small:22b", "mistral"),
    (r"(^|/)mistral(:[\w.-]*)?$", "mistral"),  # Ollama "mistral", "mistral:7b", "mistral:v0.3" (= v0.3)
    (r"gemma-?3n?(?![\d.])", "gemma"),
    # Gemma 1 (gemma-2b-it, gemma-7b-it, gemma-1.1-*-it; Ollama "gemma", "gemma:7b"; §5 lists only Gemma 2 and 3)
    # publishes the template Gemma 2 kept: "System role not supported" on a system message, then strict user/model
    # parity. So it is the gemma2 family — rightly also where the next pattern catches "gemma-2b-it" by its size.
    # "(^|/)": not the relatives with templates of their own (codegemma, recurrentgemma, …).
    (r"(^|/)gemma-(1\.1-)?[27]b|(^|/)gemma(:[\w.-]*)?$", "gemma2"),
    (r"gemma-?2(?![\d.])", "gemma2"),
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
    # prefill: the template puts the system text only into a *last* user turn (and closes every assistant turn
    # with </s>, so a trailing assistant entry is no prefill there anyway): a preset's prefill goes as user text
    "mistral": {**_STRICT, "tool_call_id": "alnum9", "prefill": False},
    "mixtral": {**_STRICT, "null_content": "empty"},
    "gemma": {**_STRICT, "null_content": "empty"},
    "gemma2": {**_STRICT, "null_content": "empty"},  # null content would render as the text "None"
    "llama3": {"single_tool_call": True},
    "qwen3.5": {"system_only_at_start": True},
    "qwen3": {"null_content": "empty"},
    "qwen2.5": {},
    "deepseek": {"system_only_at_start": True},  # the template moves every system message to the top
    "deepseek-v3": {"system_only_at_start": True},
    "deepseek-v3.1": {"system_only_at_start": True},
}


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
SPECS: tuple[ProviderSpec, ...] = tuple(
    ProviderSpec(
        name=name,
        wire="openai-chat",
        validator="openai-chat",
        mid_conversation_system="none",
        null_content=null_content,
        cache=CacheRules(mechanism="automatic", min_tokens=0, step_tokens=1),
        model_rules=_rules(),
        description=description,
    )
    for name, description, null_content in _SERVERS
)
