"""Local chat-template validators (docs/spec/providers.md §5): what a server running the model's Hugging Face
chat template answers for an OpenAI-shaped body.

Each family re-implements the checks of its published Jinja template — ``raise_exception(msg)`` calls
("raise") and the Jinja/Python errors the template hits on unexpected input ("crash") — in the order the
template evaluates them. Errors come back the way vLLM serves them: HTTP 400,
``{"error": {"message": <msg>, "type": "BadRequestError", "param": null, "code": 400}}`` (vLLM before
~2026 repeated the text: "<msg> <msg>"; llama.cpp answers 500 ``server_error`` with a Jinja trace).

Input model: the messages as sent, except that ``tool_calls: null`` / ``tool_calls: []`` count as absent
(vLLM drops both before rendering). Content and ``arguments`` values are taken as sent, which is what
``apply_chat_template`` and llama.cpp-style engines see. Current vLLM additionally rewrites ``content: null``
to ``""``/``[]`` and parses ``arguments`` JSON strings into objects before rendering, so on a current vLLM the
null-content crashes (qwen3, mixtral, gemma) and the qwen3.5 arguments crash do not occur, and the deepseek
template's string concatenation would instead crash on every replayed tool call.

Two registered names per family: ``template:<family>`` answers for the raw template (the body as sent,
what ``apply_chat_template`` and llama.cpp-style engines see); ``served:<family>`` first applies the
server's normalisation (``served()``) and is what the ``vllm`` and ``ollama`` profiles use.
``template_family(model)`` maps HF ids and Ollama tags to the family.

A template that renders without error but silently loses part of the request (the tool calls of an assistant
message it has no branch for, the text next to a tool call, a system prompt it places only in a last user turn
that is not there) is accepted with a warning in ``Verdict.warnings`` ("the template drops the tool call of
message 3", 0-based indices into ``messages``): no server would answer 400, so neither do we, but nobody
should believe the model saw it.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from zhin_cli.core.jsontext import JSON, JSONObject
from zhin_cli.pipeline.validate.verdict import ACCEPTED, Validator, Verdict

# raise_exception texts, verbatim from the templates (§5)
MISTRAL_ALTERNATION = "After the optional system message, conversation roles must alternate user/assistant/user/assistant/..."
MISTRAL_ROLES = "Only user and assistant roles are supported, with the exception of an initial optional system message!"
MISTRAL_TOOL_ID = "Tool call IDs should be alphanumeric strings with length 9!"
GEMMA_ALTERNATION = "Conversation roles must alternate user/assistant/user/assistant/..."
GEMMA_CONTENT = "Invalid content type"
GEMMA2_SYSTEM = "System role not supported"
LLAMA_SINGLE_CALL = "This model only supports single tool-calls at once!"
LLAMA_NO_FIRST_USER = "Cannot put tools in the first user message when there's no first user message!"
QWEN35_NO_MESSAGES = "No messages provided."
QWEN35_NO_QUERY = "No user query found in messages."
QWEN35_SYSTEM = "System message must be at the beginning."
QWEN35_ROLE = "Unexpected message role."
QWEN35_ITEM = "Unexpected item type in content."
QWEN35_CONTENT = "Unexpected content type."

# crash texts: str() of the Python exception the template expression raises under Jinja2 (CPython 3.10–3.13)
CRASH_NONE_CONCAT = 'can only concatenate str (not "NoneType") to str'  # ' ' + message['content'] with null
CRASH_NONE_IN = "argument of type 'NoneType' is not iterable"  # '</think>' in content with null (Qwen3)
CRASH_ITEMS = "Can only get item pairs from a mapping."  # tool_call.arguments|items on a JSON string (Qwen3.5)

TemplateCheck = Callable[[list[JSONObject], JSONObject], str | None]
DropCheck = Callable[[list[JSONObject], JSONObject], list[str]]


def _error(message: str) -> Verdict:
    return Verdict(
        ok=False,
        status=400,
        message=message,
        type="BadRequestError",
        code=400,
        envelope={"error": {"message": message, "type": "BadRequestError", "param": None, "code": 400}},
    )


class _TemplateCrash(Exception):
    """The template hits a Python error on the body (its ``str()`` is what the server answers with)."""


def _has_tool_calls(message: JSONObject) -> bool:
    return bool(message.get("tool_calls"))  # vLLM drops null and [] before rendering


def _tool_calls(message: JSONObject) -> list[JSON]:
    """What ``for tool_call in message.tool_calls`` visits: a list's items, a string's characters, an object's keys
    (Python's iteration, which Jinja uses); nothing for an absent or empty value. A number or ``true`` is not
    iterable: the template crashes (``_TemplateCrash``), as it would on the server."""
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        return calls
    if isinstance(calls, str | dict):
        return list(calls)
    if calls:
        raise _TemplateCrash(f"'{type(calls).__name__}' object is not iterable")
    return []


def _after_leading_system(messages: list[JSONObject]) -> list[JSONObject]:
    return messages[1:] if messages and messages[0].get("role") == "system" else messages


def _mistral(messages: list[JSONObject], body: JSONObject) -> str | None:
    """mistral-7b-instruct-v0.3 (current revision) and mistral-nemo-instruct-2407."""
    loop = _after_leading_system(messages)
    # first pass: alternation over everything except tool results and assistant tool-call messages
    slot = 0
    for message in loop:
        if message.get("role") in ("tool", "tool_results") or _has_tool_calls(message):
            continue
        if (message.get("role") == "user") != (slot % 2 == 0):
            return MISTRAL_ALTERNATION
        slot += 1
    # second pass: rendering; ids are checked for length only (`|length != 9`), despite the wording
    for message in loop:
        role = message.get("role")
        if role == "user":
            continue
        if _has_tool_calls(message):
            for call in _tool_calls(message):
                call_id = call.get("id") if isinstance(call, dict) else None
                if not isinstance(call_id, str) or len(call_id) != 9:
                    return MISTRAL_TOOL_ID
        elif role == "assistant":
            continue
        elif role in ("tool", "tool_results"):
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or len(call_id) != 9:
                return MISTRAL_TOOL_ID
        else:
            return MISTRAL_ROLES
    return None


def _mixtral(messages: list[JSONObject], body: JSONObject) -> str | None:
    """mixtral-8x7b-instruct-v0.1 current revision (same template as mistral-7b-instruct v0.1/v0.2)."""
    for position, message in enumerate(_after_leading_system(messages)):
        role = message.get("role")
        if (role == "user") != (position % 2 == 0):
            return MISTRAL_ALTERNATION
        if role == "user":
            continue
        if role != "assistant":  # system after index 0, tool, developer … in an assistant slot
            return MISTRAL_ROLES
        if message.get("content") is None:
            return CRASH_NONE_CONCAT  # crash: ' ' + message['content']
    return None


def _gemma(messages: list[JSONObject], body: JSONObject) -> str | None:
    """gemma-3 (later revision, as gemma-3-270m-it): a leading system message (string or parts) is merged into
    the first user turn. The only role check is ``(role == 'user') != (index is even)``, so a non-user role
    (system, tool) raises in a user slot and is rendered as its own ``<start_of_turn>`` in a model slot."""
    for position, message in enumerate(_after_leading_system(messages)):
        if (message.get("role") == "user") != (position % 2 == 0):
            return GEMMA_ALTERNATION
        if not isinstance(message.get("content"), str | list | dict):
            return GEMMA_CONTENT  # raise: neither string nor iterable (null content)
    return None


def _gemma2(messages: list[JSONObject], body: JSONObject) -> str | None:
    """gemma-2 (as gemma-2-2b-it): no system role at all, not even at index 0; then the same parity check as
    Gemma 3 over every message (a system message in a model slot is rendered, unchecked). Content goes through
    ``|trim``, which takes anything (null renders as the text "None")."""
    if messages and messages[0].get("role") == "system":
        return GEMMA2_SYSTEM
    for position, message in enumerate(messages):
        if (message.get("role") == "user") != (position % 2 == 0):
            return GEMMA_ALTERNATION
    return None


def _llama3(messages: list[JSONObject], body: JSONObject) -> str | None:
    """llama-3.1 / 3.2 / 3.3-instruct. System messages anywhere are rendered; with ``tools`` (and the default
    ``tools_in_user_message``) the first non-system message is consumed as the "first user message"."""
    loop = _after_leading_system(messages)
    if body.get("tools"):
        if not loop:
            return LLAMA_NO_FIRST_USER
        loop = loop[1:]
    for message in loop:
        if message.get("role") in ("ipython", "tool"):
            continue
        if _has_tool_calls(message) and len(_tool_calls(message)) != 1:
            return LLAMA_SINGLE_CALL
    return None


def _qwen25(messages: list[JSONObject], body: JSONObject) -> str | None:
    """qwen2.5-instruct: no raise in the template; system messages anywhere are rendered in place. Content is
    concatenated (``… + message.content + …``) everywhere except in a tool-call turn, so null content crashes there."""
    for message in messages:
        if message.get("content", "") is None and not (message.get("role") == "assistant" and _has_tool_calls(message)):
            return CRASH_NONE_CONCAT
    return None


def _qwen3(messages: list[JSONObject], body: JSONObject) -> str | None:
    """qwen3 (early revision, as Qwen3-0.6B): renders system anywhere; an assistant message with
    ``content: null`` crashes on ``'</think>' in message.content`` — send ``""`` instead."""
    for message in messages:
        if message.get("role") == "assistant" and message.get("content") is None:
            return CRASH_NONE_IN  # crash, not a raise_exception
    return None


def _qwen35_content(content: JSON) -> str | None:
    """The template's ``render_content`` macro: the error it raises, if any."""
    if content is None or isinstance(content, str):
        return None
    if isinstance(content, list):
        for item in content:
            if not isinstance(item, dict):
                return QWEN35_ITEM
            if "image" in item or "image_url" in item or "video" in item or item.get("type") in ("image", "video"):
                continue
            if "text" not in item:
                return QWEN35_ITEM
        return None
    return QWEN35_CONTENT


def _qwen35_text(content: JSON) -> str:
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        return "".join(str(item.get("text", "")) for item in content if isinstance(item, dict) and "text" in item).strip()
    return ""


def _qwen35(messages: list[JSONObject], body: JSONObject) -> str | None:
    """qwen3.5 (as Qwen3.5-4B)."""
    if not messages:
        return QWEN35_NO_MESSAGES
    # reverse scan for the last real user query (a user turn that is not only a <tool_response> wrapper)
    found = False
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        problem = _qwen35_content(message.get("content"))
        if problem:
            return problem
        text = _qwen35_text(message.get("content"))
        if not (text.startswith("<tool_response>") and text.endswith("</tool_response>")):
            found = True
            break
    if not found:
        return QWEN35_NO_QUERY
    for position, message in enumerate(messages):
        problem = _qwen35_content(message.get("content"))
        if problem:
            return problem
        role = message.get("role")
        if role == "system":
            if position != 0:
                return QWEN35_SYSTEM
        elif role == "assistant":
            calls = message.get("tool_calls")
            if calls and isinstance(calls, list):
                for call in calls:
                    function = call.get("function", call) if isinstance(call, dict) else {}
                    if isinstance(function, dict) and "arguments" in function and not isinstance(function["arguments"], dict):
                        return CRASH_ITEMS  # crash: tool_call.arguments|items on the OpenAI JSON string
        elif role not in ("user", "tool"):
            return QWEN35_ROLE
    return None


def _concatenated_arguments(message: JSONObject) -> str | None:
    """The crash of ``… + tool['function']['arguments'] + …`` on arguments that are not a string."""
    for call in _tool_calls(message):
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and "arguments" in function and not isinstance(function["arguments"], str):
            return f'can only concatenate str (not "{type(function["arguments"]).__name__}") to str'  # crash
    return None


def _deepseek_family(messages: list[JSONObject], calls_need_null: bool) -> str | None:
    """The DeepSeek templates: first every system text is concatenated into the block at the start, then each
    message is rendered — user and tool content concatenated, a plain assistant reply searched for ``</think>``,
    a tool-call turn's arguments concatenated. ``calls_need_null`` (V3): only an assistant message with null
    content is a tool-call turn (any other has its calls skipped, and a null plain reply renders as an empty
    call turn)."""
    if any(m.get("role") == "system" and m.get("content", "") is None for m in messages):
        return CRASH_NONE_CONCAT
    for message in messages:
        role, content = message.get("role"), message.get("content", "")
        if role in ("user", "tool") and content is None:
            return CRASH_NONE_CONCAT
        if role != "assistant":
            continue
        call_turn = content is None if calls_need_null else _has_tool_calls(message)
        if call_turn and _has_tool_calls(message):
            problem = _concatenated_arguments(message)
            if problem:
                return problem
        elif not call_turn and content is None:
            return CRASH_NONE_IN  # crash: '</think>' in content
    return None


def _deepseek(messages: list[JSONObject], body: JSONObject) -> str | None:
    """deepseek-r1 (and its distills) and deepseek-v3.1: every system message is accepted (the template moves
    them all to the very start — a relocation, not an error). Arguments are concatenated as strings, so object
    arguments — what vLLM and Ollama hand the template — crash on every replayed tool call."""
    return _deepseek_family(messages, calls_need_null=False)


def _deepseek_v3(messages: list[JSONObject], body: JSONObject) -> str | None:
    """deepseek-v3: as R1, but an assistant message is a tool-call turn only when its ``content`` is null;
    with any other content (vLLM's ``""``) its calls are silently dropped (a warning, ``_drops_deepseek_v3``),
    so only a null-content tool-call turn can crash on object arguments."""
    return _deepseek_family(messages, calls_need_null=True)


FAMILIES: dict[str, TemplateCheck] = {
    "mistral": _mistral,
    "mixtral": _mixtral,
    "gemma": _gemma,
    "gemma2": _gemma2,
    "llama3": _llama3,
    "qwen2.5": _qwen25,
    "qwen3": _qwen3,
    "qwen3.5": _qwen35,
    "deepseek": _deepseek,
    "deepseek-v3": _deepseek_v3,
    "deepseek-v3.1": _deepseek,
}


# --- what an accepting template silently loses -------------------------------------------------------------

def _calls_dropped(position: int, message: JSONObject) -> str:
    calls = "tool call" if len(_tool_calls(message)) == 1 else "tool calls"
    return f"the template drops the {calls} of message {position}"


def _text(message: JSONObject) -> bool:
    content = message.get("content")
    return bool(content.strip()) if isinstance(content, str) else bool(content)


def _drops_tool_calls(messages: list[JSONObject], body: JSONObject) -> list[str]:
    """Templates without a tool branch (Mixtral, Gemma 2 and 3) render an assistant message's content only."""
    return [_calls_dropped(i, m) for i, m in enumerate(messages) if m.get("role") == "assistant" and _has_tool_calls(m)]


def _drops_call_text(messages: list[JSONObject], body: JSONObject) -> list[str]:
    """Templates whose tool-call branch renders the calls only (Mistral v0.3/Nemo, Llama 3.x)."""
    return [f"the template drops the text of message {i} (it renders only the tool calls of an assistant message)"
            for i, m in enumerate(messages) if m.get("role") == "assistant" and _has_tool_calls(m) and _text(m)]


def _drops_mistral(messages: list[JSONObject], body: JSONObject) -> list[str]:
    """Mistral v0.3/Nemo put the leading system message into the *last* message, and only if that is a user
    turn: a request that ends on a tool result (or an assistant turn) loses the whole system prompt — and so does
    one that is only the system message (nothing after it to render it in)."""
    out = _drops_call_text(messages, body)
    if messages and messages[0].get("role") == "system" and messages[-1].get("role") != "user":
        out.insert(0, "the template drops the system message (it renders it only inside a last user message, "
                      f"and the last message is {messages[-1].get('role')!r})")
    return out


def _drops_deepseek_v3(messages: list[JSONObject], body: JSONObject) -> list[str]:
    return [_calls_dropped(i, m) for i, m in enumerate(messages)
            if m.get("role") == "assistant" and m.get("content") is not None and _has_tool_calls(m)]


DROPS: dict[str, DropCheck] = {
    "mistral": _drops_mistral,
    "mixtral": _drops_tool_calls,
    "gemma": _drops_tool_calls,
    "gemma2": _drops_tool_calls,
    "llama3": _drops_call_text,
    "deepseek-v3": _drops_deepseek_v3,
}


def served(messages: list[JSONObject]) -> list[JSONObject]:
    """The messages as an OpenAI-compatible server hands them to the template (vLLM; Ollama's OpenAI
    endpoint does the same conversions): ``content: null`` becomes ``""`` and JSON-string ``arguments``
    become objects. The originals are not modified."""
    out: list[JSONObject] = []
    for message in messages:
        message = dict(message)
        if message.get("content", "") is None:
            message["content"] = ""
        if _has_tool_calls(message):
            message["tool_calls"] = [_served_call(call) for call in _tool_calls(message)]
        out.append(message)
    return out


def _served_call(call: JSON) -> JSON:
    """A tool call with its JSON-string ``arguments`` parsed into an object (when they hold one)."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(call, dict) or not isinstance(function, dict):
        return call
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        return call
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError:
        return call
    return {**call, "function": {**function, "arguments": parsed}} if isinstance(parsed, dict) else call


def _messages(body: JSONObject, normalize: bool) -> list[JSONObject]:
    raw = body.get("messages")
    messages = [message for message in raw if isinstance(message, dict)] if isinstance(raw, list) else []
    return served(messages) if normalize else messages


def _judge(family: str, body: JSONObject, normalize: bool) -> Verdict:
    try:
        messages = _messages(body, normalize)
        problem = FAMILIES[family](messages, body)
        if problem:
            return _error(problem)
        drops = DROPS.get(family)
        warnings = drops(messages, body) if drops else []
    except _TemplateCrash as crash:
        return _error(str(crash))
    return Verdict(ok=True, warnings=tuple(warnings)) if warnings else ACCEPTED


def _validators(family: str) -> dict[str, Validator]:
    """The family's two validators: ``template:<family>`` (the body as sent) and ``served:<family>`` (normalised)."""

    def validate_template(body: JSONObject, model: str) -> Verdict:
        """The raw template (``apply_chat_template``, llama.cpp-style engines): the body as sent."""
        return _judge(family, body, False)

    def validate_served(body: JSONObject, model: str) -> Verdict:
        """The template behind an OpenAI-compatible server that normalises the body first (vLLM, Ollama)."""
        return _judge(family, body, True)

    validate_template.__name__ = f"validate_template_{family.replace('.', '_')}"
    validate_served.__name__ = f"validate_served_{family.replace('.', '_')}"
    return {f"template:{family}": validate_template, f"served:{family}": validate_served}


def family_validators() -> dict[str, Validator]:
    """Every template family's validators, by name (registered by ``zhin_cli.pipeline.validate``)."""
    return {name: check for family in FAMILIES for name, check in _validators(family).items()}
