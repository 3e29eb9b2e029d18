"""The real server's Chat Completions shape through the real ``openai`` client: format, usage, streaming.

What a 135M model can honestly show: a well-formed answer, sane token counts, a stream that adds up to the
same text as the non-streamed answer (temperature 0, fixed seed), and a ``finish_reason`` that matches
``max_tokens``. Nothing here depends on the answer being *right*.
"""

from __future__ import annotations

from typing import Any

import openai

from zhin_cli.core.tokens import TokenCounter

GREETING: list[Any] = [
    {"role": "system", "content": "You are Zhin, a helpful assistant. Answer briefly."},
    {"role": "user", "content": "What is the capital of France?"},
]


def ask(api: openai.OpenAI, model: str, messages: list[Any], **kwargs: Any) -> Any:
    return api.chat.completions.create(model=model, messages=messages, temperature=0, seed=42, **kwargs)


def test_a_chat_completion_has_the_openai_shape(api: openai.OpenAI, model_name: str) -> None:
    reply = ask(api, model_name, GREETING, max_tokens=32)
    assert reply.object == "chat.completion"
    assert reply.id and reply.created > 0
    assert len(reply.choices) == 1
    choice = reply.choices[0]
    assert choice.index == 0
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content.strip()
    assert choice.finish_reason in ("stop", "length")


def test_the_model_lists_itself(api: openai.OpenAI, model_name: str) -> None:
    assert model_name in [m.id for m in api.models.list().data]


def test_usage_is_reported_and_adds_up(api: openai.OpenAI, model_name: str) -> None:
    reply = ask(api, model_name, GREETING, max_tokens=32)
    usage = reply.usage
    assert usage is not None
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert 1 <= usage.completion_tokens <= 32
    # same order of magnitude as the text sent: the words plus ChatML's few tokens per message
    sent = TokenCounter("cl100k_base").count(" ".join(m["content"] for m in GREETING))
    assert sent <= usage.prompt_tokens <= 3 * sent + 40, (sent, usage.prompt_tokens)


def test_prompt_tokens_grow_with_the_prompt(api: openai.OpenAI, model_name: str) -> None:
    short = ask(api, model_name, [{"role": "user", "content": "Say hello. " * 10}], max_tokens=4).usage
    long = ask(api, model_name, [{"role": "user", "content": "Say hello. " * 100}], max_tokens=4).usage
    assert short is not None and long is not None
    # 90 more repetitions of a phrase of 2-5 tokens (SmolLM2's BPE: 3) — the count follows the text sent
    assert 180 <= long.prompt_tokens - short.prompt_tokens <= 450, (short.prompt_tokens, long.prompt_tokens)


def test_max_tokens_cuts_the_answer_with_finish_reason_length(api: openai.OpenAI, model_name: str) -> None:
    messages: list[Any] = [{"role": "user", "content": "Write a long story about a dragon who learns to cook."}]
    cut = ask(api, model_name, messages, max_tokens=5)
    assert cut.choices[0].finish_reason == "length"
    assert cut.usage is not None and cut.usage.completion_tokens == 5
    longer = ask(api, model_name, messages, max_tokens=40)  # control: more room, more tokens
    assert longer.usage is not None and longer.usage.completion_tokens > 5


def test_temperature_zero_is_reproducible_once_the_prompt_is_cached(api: openai.OpenAI, model_name: str) -> None:
    # llama-cpp-python reuses the KV cache of the longest common prefix with the previous request. A prompt
    # evaluated fresh (one batch) and one whose prefix came from the cache round differently, and a 135M model's
    # greedy path can flip on that (measured: "L'Alma, …" fresh vs "L'Étoile de la Cité, …" cached). So: warm
    # up, then two identical requests must agree, and a streamed one must add up to the same text.
    ask(api, model_name, GREETING, max_tokens=24)
    first = ask(api, model_name, GREETING, max_tokens=24)
    second = ask(api, model_name, GREETING, max_tokens=24)
    assert first.choices[0].message.content == second.choices[0].message.content
    chunks = list(ask(api, model_name, GREETING, max_tokens=24, stream=True))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == first.choices[0].message.content
    other = ask(api, model_name, [GREETING[0], {"role": "user", "content": "Name three colours."}], max_tokens=24)
    assert other.choices[0].message.content != first.choices[0].message.content  # control: another question


def test_streaming_delivers_chunks_and_one_finish_reason(api: openai.OpenAI, model_name: str) -> None:
    chunks = list(ask(api, model_name, GREETING, max_tokens=24, stream=True))
    deltas = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert sum(1 for d in deltas if d) >= 2  # really streamed, not one blob
    assert "".join(deltas).strip()
    last = [c for c in chunks if c.choices][-1]
    assert finish in (["stop"], ["length"]) and last.choices[0].finish_reason == finish[0]  # once, at the end
    roles = [c.choices[0].delta.role for c in chunks if c.choices and c.choices[0].delta.role]
    assert roles[:1] == ["assistant"]


def test_a_system_message_in_the_middle_is_accepted(api: openai.OpenAI, model_name: str) -> None:
    # SmolLM2's template prints every message in place (docs/spec/local-llm.md §2.4)
    messages: list[Any] = [*GREETING, {"role": "assistant", "content": "Paris."},
                           {"role": "system", "content": "[state change] 10009 join 1048877509 on 10:40 by self"},
                           {"role": "user", "content": "And of Italy?"}]
    reply = ask(api, model_name, messages, max_tokens=16)
    assert reply.choices[0].message.content
