"""The parsed-ranks cache of ``tokens._load_encoding``: a process that finds an intact copy counts exactly as
tiktoken's own load does, without parsing the rank file; a corrupt or truncated copy is never read (it is
rebuilt from the verified rank file)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tiktoken
from tiktoken_ext import openai_public

from zhin_cli.core import tokens

TEXTS = ["hello world", "早上好呀☀️ [10:02] <@10007> 糖糖: 胡桃打12-3", "  \n\n\tindent\r\n", "<|endoftext|> as text", ""]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ZHIN_TIKTOKEN_CACHE", str(tmp_path / "ranks"))
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")  # restored after the test (the loader points it at the cache)
    return tokens.parsed_cache_path("cl100k_base", tiktoken.__version__)


def _constructor_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Count tiktoken's constructor (the rank file's parse); it still runs."""
    calls: list[str] = []
    real = openai_public.ENCODING_CONSTRUCTORS["cl100k_base"]

    def counted() -> dict[str, Any]:
        calls.append("cl100k_base")
        return real()

    monkeypatch.setitem(openai_public.ENCODING_CONSTRUCTORS, "cl100k_base", counted)
    return calls


def _same_as_tiktoken(encoding: Any) -> None:
    reference = tiktoken.Encoding(**openai_public.ENCODING_CONSTRUCTORS["cl100k_base"]())
    for text in TEXTS:
        assert encoding.encode(text, disallowed_special=()) == reference.encode(text, disallowed_special=())
    assert encoding.n_vocab == reference.n_vocab and encoding.special_tokens_set == reference.special_tokens_set


def test_a_second_load_reads_the_parsed_copy_and_counts_the_same(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _constructor_calls(monkeypatch)
    first = tokens._load_encoding("cl100k_base")
    assert calls == ["cl100k_base"] and cache.is_file()  # parsed once, cached
    second = tokens._load_encoding("cl100k_base")
    assert calls == ["cl100k_base"]  # the copy was read: no second parse
    _same_as_tiktoken(first)
    _same_as_tiktoken(second)


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "garbage"])
def test_a_damaged_copy_is_never_read_and_is_rebuilt(cache: Path, monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    tokens._load_encoding("cl100k_base")
    intact = cache.read_bytes()
    data = bytearray(intact)
    if damage == "flip":  # one byte of the split pattern changed: marshal reads it fine, the digest refuses it
        at = data.index(b"'ve")
        data[at + 2] = ord("f")
    elif damage == "truncate":
        del data[len(data) - 100 :]
    elif damage == "empty":
        data = bytearray()
    else:
        data = bytearray(b"\x00" * 40)
    cache.write_bytes(bytes(data))
    calls = _constructor_calls(monkeypatch)
    encoding = tokens._load_encoding("cl100k_base")
    assert calls == ["cl100k_base"]  # parsed again from the verified rank file
    assert cache.read_bytes() == intact  # and the copy rewritten whole
    _same_as_tiktoken(encoding)


def test_the_copy_names_the_versions_that_wrote_it() -> None:
    here = tokens.parsed_cache_path("cl100k_base", tiktoken.__version__)
    assert here != tokens.parsed_cache_path("cl100k_base", tiktoken.__version__ + ".post1")
    assert here != tokens.parsed_cache_path("o200k_base", tiktoken.__version__)
    assert here.parent != tokens.cache_dir()  # the rank files' folder holds only the rank files


def test_an_unwritable_cache_folder_is_no_error(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache.parent.parent.mkdir(parents=True, exist_ok=True)
    cache.parent.write_text("a file where the folder should be")  # mkdir fails
    _same_as_tiktoken(tokens._load_encoding("cl100k_base"))
