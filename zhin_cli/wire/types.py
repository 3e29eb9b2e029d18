"""The three wire bodies zhin renders, their usage objects, and the provider overrides, as ``TypedDict``s (issue 32).

These describe what zhin *writes* (a renderer's body, ``zhin serve``'s usage object): checked by mypy where they are
built. A body read from a capture or a client is any JSON until a validator has judged it, so the readers
(``WireFormat.messages``, the validators) keep taking a plain mapping.

Field lists follow the APIs' request references (docs/spec/providers.md §1–§3) as far as zhin sends or reads them;
``total=False`` with ``Required`` marks what every body has.
"""

# No ``from __future__ import annotations``: ``Required`` must be seen at class creation (``__required_keys__``).
from typing import Literal, Required, TypedDict, cast

from zhin_cli.core.jsontext import JSON, JSONObject  # noqa: F401  (JSON: resolves JSONObject in get_type_hints)

# --- shared ---------------------------------------------------------------------------------------------------------


class CacheControl(TypedDict, total=False):
    """Anthropic's breakpoint marker: ``{"type": "ephemeral"}``, optionally with ``ttl`` ("5m" | "1h")."""

    type: Required[Literal["ephemeral"]]
    ttl: str


# --- OpenAI Chat Completions ----------------------------------------------------------------------------------------


class OpenAITextPart(TypedDict):
    type: Literal["text"]
    text: str


class OpenAIFunctionCall(TypedDict):
    name: str
    arguments: str  # a JSON text, as the model wrote it


class OpenAIToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: OpenAIFunctionCall


class OpenAIMessage(TypedDict, total=False):
    role: Required[str]  # system | developer | user | assistant | tool
    content: Required[str | list[OpenAITextPart] | None]
    name: str
    tool_calls: list[OpenAIToolCall]
    tool_call_id: str


class OpenAIFunction(TypedDict, total=False):
    name: Required[str]
    description: str
    parameters: JSONObject  # a JSON Schema: any JSON
    strict: bool


class OpenAITool(TypedDict):
    type: Literal["function"]
    function: OpenAIFunction


class OpenAIChatBody(TypedDict, total=False):
    model: Required[str]
    messages: Required[list[OpenAIMessage]]
    tools: list[OpenAITool]
    tool_choice: str | dict[str, JSON]
    prompt_cache_key: str
    stream: bool
    stream_options: dict[str, bool]
    max_tokens: int


class OpenAIPromptTokensDetails(TypedDict, total=False):
    cached_tokens: int
    audio_tokens: int


class OpenAICompletionTokensDetails(TypedDict, total=False):
    reasoning_tokens: int
    audio_tokens: int
    accepted_prediction_tokens: int
    rejected_prediction_tokens: int


class OpenAIUsage(TypedDict, total=False):
    prompt_tokens: Required[int]
    completion_tokens: Required[int]
    total_tokens: Required[int]
    prompt_tokens_details: OpenAIPromptTokensDetails
    completion_tokens_details: OpenAICompletionTokensDetails


class DeepSeekUsage(OpenAIUsage, total=False):
    """DeepSeek's OpenAI-shaped usage, with its cache counters (providers.md §4)."""

    prompt_cache_hit_tokens: int
    prompt_cache_miss_tokens: int


# --- Anthropic Messages ---------------------------------------------------------------------------------------------


class AnthropicTextBlock(TypedDict, total=False):
    type: Required[Literal["text"]]
    text: Required[str]
    cache_control: CacheControl


class AnthropicToolUseBlock(TypedDict, total=False):
    type: Required[Literal["tool_use"]]
    id: Required[str]
    name: Required[str]
    input: Required[JSONObject]  # the call's arguments: any JSON object
    cache_control: CacheControl


class AnthropicToolResultBlock(TypedDict, total=False):
    type: Required[Literal["tool_result"]]
    tool_use_id: Required[str]
    content: Required[str | list[AnthropicTextBlock]]
    is_error: bool
    cache_control: CacheControl


AnthropicBlock = AnthropicTextBlock | AnthropicToolUseBlock | AnthropicToolResultBlock


class AnthropicMessage(TypedDict):
    role: Literal["user", "assistant", "system"]  # system: only where allow-listed models take it mid-conversation
    content: list[AnthropicBlock]  # the API also takes a string; zhin always writes blocks (breakpoints go on them)


class AnthropicTool(TypedDict, total=False):
    name: Required[str]
    description: str
    input_schema: Required[JSONObject]  # a JSON Schema: any JSON
    cache_control: CacheControl


class AnthropicHead(TypedDict, total=False):
    """What a Messages body holds before ``messages``, in the order zhin writes it."""

    model: Required[str]
    max_tokens: Required[int]
    tools: list[AnthropicTool]
    system: str | list[AnthropicTextBlock]


class AnthropicBody(AnthropicHead, total=False):
    """A Messages body as zhin renders it (the API's ``stream``, top-level ``cache_control`` … zhin does not send)."""

    messages: Required[list[AnthropicMessage]]


class AnthropicCacheCreation(TypedDict):
    ephemeral_5m_input_tokens: int
    ephemeral_1h_input_tokens: int


class AnthropicUsage(TypedDict, total=False):
    input_tokens: Required[int]
    output_tokens: Required[int]
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    cache_creation: AnthropicCacheCreation
    service_tier: str


# --- Gemini generateContent -----------------------------------------------------------------------------------------


class GeminiFunctionCall(TypedDict):
    name: str
    args: JSONObject  # any JSON object


class GeminiFunctionResponse(TypedDict):
    name: str
    response: JSONObject  # any JSON object


class GeminiPart(TypedDict, total=False):
    text: str
    functionCall: GeminiFunctionCall
    functionResponse: GeminiFunctionResponse


class GeminiContent(TypedDict):
    role: Literal["user", "model"]
    parts: list[GeminiPart]


class GeminiSystemInstruction(TypedDict):
    parts: list[GeminiPart]


class GeminiFunctionDeclaration(TypedDict, total=False):
    name: Required[str]
    description: str
    parameters: JSONObject  # a JSON Schema (OpenAPI subset): any JSON


class GeminiTools(TypedDict):
    functionDeclarations: list[GeminiFunctionDeclaration]


class GeminiHead(TypedDict, total=False):
    """What a generateContent body holds before ``contents``, in the order zhin writes it."""

    systemInstruction: GeminiSystemInstruction
    tools: list[GeminiTools]


class GeminiBody(GeminiHead, total=False):
    """A generateContent body as zhin renders it (the API's ``generationConfig`` … zhin does not send)."""

    contents: Required[list[GeminiContent]]


class GeminiUsageMetadata(TypedDict, total=False):
    promptTokenCount: Required[int]
    candidatesTokenCount: Required[int]
    totalTokenCount: Required[int]
    cachedContentTokenCount: int


class GeminiUsage(TypedDict):
    """What ``WireFormat.usage`` gives for Gemini: the response's ``usageMetadata`` member."""

    usageMetadata: GeminiUsageMetadata


# --- unions and overrides -------------------------------------------------------------------------------------------

WireBody = OpenAIChatBody | AnthropicBody | GeminiBody
WireUsage = OpenAIUsage | AnthropicUsage | GeminiUsage


class ProviderOverrides(TypedDict, total=False):
    """A provider's overrides in ``zhin.yaml`` (``providers: {NAME: …}``): ``spec.OVERRIDABLE``, plus ``models``
    (model regex → overrides for the models it matches). ``tests/test_wire_types.py`` keeps the two in step."""

    mid_conversation_system: Literal["system", "developer", "none"]
    system_prompt_role: Literal["system", "developer", "user"]
    alternation: Literal["free", "merge"]
    validator: str
    null_content: Literal["null", "empty"]
    prompt_cache_key: str | None
    example_names: bool
    prefill: bool
    system_only_at_start: bool
    models: dict[str, "ProviderOverrides"]


def as_json(value: WireBody | WireUsage) -> JSONObject:
    """A typed body or usage object handed to code that reads it as plain JSON (``RenderedRequest.body``, a
    response): the same dict, unchanged. mypy does not let a TypedDict pass as a ``dict`` (whose reader may
    add any key), so this is the one place where the typed view that built it meets the JSON view that reads it."""
    return cast("JSONObject", value)
