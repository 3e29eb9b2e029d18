"""The live model: send an assembled Chat Completions body to a real OpenAI-compatible server.

``LiveModel.complete(body)`` posts the exact body zhin assembled (``model`` overridden when the model was given,
``seed`` added when asked, never streamed) with the real ``openai`` client, and returns the reply text and the
server's ``usage``.

* Connection: ``base_url`` / ``api_key`` default to ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``. A loopback server
  (127.0.0.0/8, ::1, localhost) needs no key: a placeholder is sent. A server elsewhere without a key is a
  one-line error. The ``openai`` package is imported only when a request is made.
* Failures: the ``openai`` client's own retries (exponential backoff from 0.5 s, at most 8 s, with jitter;
  ``Retry-After`` honoured) on 408/409/429/5xx, timeouts and refused connections, ``max_retries`` times. What
  still fails becomes one ``LiveModelError`` line naming the URL and the HTTP status.
* Credentials are never shown or stored: the key is not part of any message, cache file or cache key; the base
  URL is shown (and keys the cache) only masked (``zhin_cli.core.redact.mask_url``: user information and
  password-like query values become ``***``); any text a server sends back (an error body that echoes the
  ``Authorization`` header) has the key and the URL's secrets replaced with ``***``. A base URL that does not
  parse is a one-line usage error (``BadBaseURL``, exit 2).
* Response cache: one JSON file per request under ``cache_dir`` (default ``$ZHIN_EVAL_CACHE_DIR``, else the
  user cache directory, ``$XDG_CACHE_HOME/zhin/eval-cache`` or ``~/.cache/zhin/eval-cache`` — never the
  checkout, whose files anyone who sends a pull request can write), named by the sha256 of the canonical JSON
  of the whole request: masked base URL, model, seed and body. A second identical request is answered from the
  file (``cached=True``; ``answers`` / ``from_cache`` count them for the report); ``use_cache=False`` neither
  reads nor writes it. An unreadable or foreign file is a miss.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, cast
from urllib.parse import parse_qsl, unquote, urlsplit

from zhin_cli.core.errors import EXIT_USAGE, ZhinError
from zhin_cli.core.loopback import is_loopback_name
from zhin_cli.core.redact import MASK, is_secret_parameter, mask_url, redact_text, split_userinfo

if TYPE_CHECKING:
    import openai

    from zhin_cli.core.jsontext import JSONObject

DEFAULT_BASE_URL = "https://api.openai.com/v1"
LOCAL_PLACEHOLDER_KEY = "zhin-local-server-needs-no-key"  # what a loopback server gets when no key is set
CACHE_DIR_ENV = "ZHIN_EVAL_CACHE_DIR"
CACHE_VERSION = 1
MAX_DETAIL = 300  # characters of a server's error message kept in the one-line error
_TRANSPORT_FIELDS = ("stream", "stream_options")  # complete() always asks for one non-streamed answer


class LiveModelError(ZhinError):
    """The live model could not answer (unreachable, refused the request, no key): eval exit 3, could not run."""


class BadBaseURL(LiveModelError):
    """The base URL is not an http(s) URL that parses (``http://[::1:1/v1``, a port that is not a number): usage."""

    exit_code = EXIT_USAGE


class CachedReply(TypedDict):
    """A reply as the cache stores it (``_read_cache`` checks both keys)."""

    text: str
    usage: JSONObject | None


@dataclass
class LiveReply:
    text: str
    usage: JSONObject | None
    cached: bool
    latency_ms: float  # this call's wall time: the HTTP round trip(s), or the cache read


def default_cache_dir() -> Path:
    """``$ZHIN_EVAL_CACHE_DIR``, else the user cache directory: ``$XDG_CACHE_HOME/zhin/eval-cache`` (an absolute
    ``XDG_CACHE_HOME`` only, as the XDG spec says) or ``~/.cache/zhin/eval-cache``."""
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured:
        return Path(configured)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "zhin" / "eval-cache"


def url_secrets(url: str) -> list[str]:
    """What of ``url`` is secret: the user information (raw and decoded, whole and the password alone) and the
    values of password-like query parameters."""
    found: list[str] = []
    _scheme, sep, rest = url.partition("://")
    if sep:
        userinfo, rest = split_userinfo(rest)
        if userinfo:
            password = userinfo.partition(":")[2]
            found += [userinfo, unquote(userinfo), password, unquote(password)]
    query = rest.partition("?")[2].partition("#")[0]
    found += [value for name, value in parse_qsl(query, keep_blank_values=False) if is_secret_parameter(name)]
    return sorted({s for s in found if s}, key=len, reverse=True)


def _host(url: str) -> str | None:
    """The host of ``url`` (the user information ends at the last ``@``); ValueError when it does not parse."""
    parts = urlsplit(mask_url(url))
    parts.port  # noqa: B018 — raises ValueError for a port that is not a number 0–65535
    return parts.hostname


def is_loopback_url(url: str) -> bool:
    try:
        host = _host(url)
    except ValueError:
        return False
    return host is not None and host != "" and is_loopback_name(host)


def _canonical(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def cache_key(base_url: str, request: Mapping[str, object]) -> str:
    """sha256 of everything that decides the answer: where it is asked (the masked URL: credentials never enter
    the key, not even hashed), and the full request body."""
    identity = {
        "version": CACHE_VERSION,
        "base_url": mask_url(base_url.rstrip("/")),
        "model": request.get("model"),
        "seed": request.get("seed"),
        "body": dict(request),
    }
    return hashlib.sha256(_canonical(identity).encode("utf-8")).hexdigest()


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MAX_DETAIL else line[: MAX_DETAIL - 1] + "…"


class LiveModel:
    """A real OpenAI-compatible chat model behind ``base_url``, with a response cache on disk."""

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        cache_dir: Path | None = None,
        use_cache: bool = True,
    ) -> None:
        given = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        self._base_url = given  # private: may hold credentials; only the openai client gets it
        self.base_url = mask_url(given)  # what messages, cache keys and cache files show
        try:
            host = _host(given)
        except ValueError as error:
            raise BadBaseURL(f"live model base URL {self.base_url!r} is not a URL ({redact_text(str(error))})") from None
        if urlsplit(self.base_url).scheme not in ("http", "https") or not host:
            raise BadBaseURL(f"live model base URL {self.base_url!r} is not an http(s) URL")
        key = api_key or os.environ.get("OPENAI_API_KEY") or None
        if key is None:
            if not is_loopback_url(given):
                raise LiveModelError(f"no API key for the live model at {self.base_url}: set OPENAI_API_KEY")
            key = LOCAL_PLACEHOLDER_KEY
        self._api_key = key  # private: never formatted into anything this class shows
        self._secrets = [s for s in [key, *url_secrets(given)] if s]
        self.model = model
        self.timeout = timeout
        self.max_retries = max_retries
        self.cache_dir = cache_dir if cache_dir is not None else default_cache_dir()
        self.use_cache = use_cache
        self._client: openai.OpenAI | None = None
        self._lock = threading.Lock()
        self.answers = 0  # replies returned by complete()
        self.from_cache = 0  # of which read from the cache

    def __repr__(self) -> str:
        return f"LiveModel(base_url={self.base_url!r}, model={self.model!r}, use_cache={self.use_cache})"

    # --- the request --------------------------------------------------------------------------------------------

    def request_body(self, body: Mapping[str, object], *, seed: int | None = None) -> dict[str, object]:
        """The body that is sent (and that keys the cache)."""
        request = {k: v for k, v in body.items() if k not in _TRANSPORT_FIELDS}
        if self.model:
            request["model"] = self.model
        if not request.get("model"):
            raise LiveModelError(f"the request for the live model at {self.base_url} names no model")
        if seed is not None:
            request["seed"] = seed
        return request

    def complete(self, body: Mapping[str, object], *, seed: int | None = None) -> LiveReply:
        started = time.perf_counter()
        request = self.request_body(body, seed=seed)
        key = cache_key(self.base_url, request)
        if self.use_cache:
            stored = self._read_cache(key)
            if stored is not None:
                self._count(cached=True)
                return LiveReply(stored["text"], stored["usage"], cached=True,
                                 latency_ms=(time.perf_counter() - started) * 1000)
        text, usage = self._post(request)
        latency_ms = (time.perf_counter() - started) * 1000
        if self.use_cache:
            self._write_cache(key, request, text, usage, latency_ms)
        self._count(cached=False)
        return LiveReply(text, usage, cached=False, latency_ms=latency_ms)

    def _count(self, *, cached: bool) -> None:
        with self._lock:
            self.answers += 1
            self.from_cache += cached

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def __enter__(self) -> LiveModel:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- HTTP ---------------------------------------------------------------------------------------------------

    def _openai(self) -> openai.OpenAI:
        with self._lock:
            if self._client is None:
                import openai  # lazy: offline commands never import the client

                # A loopback server is reached directly: a proxy from the environment must not intercept it.
                http_client = (openai.DefaultHttpxClient(trust_env=False, timeout=self.timeout)
                               if is_loopback_url(self._base_url) else None)
                self._client = openai.OpenAI(base_url=self._base_url, api_key=self._api_key, timeout=self.timeout,
                                             max_retries=self.max_retries, http_client=http_client)
            return self._client

    def _hide_secrets(self, text: str) -> str:
        """``text`` without the key or the base URL's credentials."""
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        return text

    def _hide_key(self, text: str) -> str:
        """A message: no key, no credentials of the base URL or of any URL a server quotes (``redact_text``)."""
        return redact_text(self._hide_secrets(text))

    def _fail(self, what: str) -> LiveModelError:
        return LiveModelError(self._hide_key(_one_line(f"live model at {self.base_url}: {what}")))

    def _post(self, request: Mapping[str, object]) -> tuple[str, JSONObject | None]:
        import openai
        from openai.types.chat import ChatCompletion

        client = self._openai()
        try:
            completion = client.post("/chat/completions", cast_to=ChatCompletion, body=request)
        except openai.APITimeoutError:
            raise self._fail(f"no answer within {self.timeout:g} s (after {self.max_retries} retries)") from None
        except openai.APIConnectionError as error:
            cause = f" ({error.__cause__})" if error.__cause__ else ""
            raise self._fail(f"cannot connect{cause} (after {self.max_retries} retries)") from None
        except openai.AuthenticationError as error:
            raise self._fail(f"HTTP {error.status_code}: the API key was rejected") from None
        except openai.APIStatusError as error:
            raise self._fail(f"HTTP {error.status_code}: {_error_detail(error)}") from None
        except openai.APIError as error:  # e.g. a body that is not JSON
            raise self._fail(f"unreadable answer: {error.message}") from None
        if not isinstance(completion, ChatCompletion) or not completion.choices:
            raise self._fail("the answer has no choices")
        message = completion.choices[0].message
        usage: JSONObject | None = completion.usage.model_dump(exclude_none=True) if completion.usage is not None else None
        return message.content or "", usage

    # --- cache --------------------------------------------------------------------------------------------------

    def _cache_file(self, key: str) -> Path:
        return self.cache_dir / key[:2] / f"{key}.json"

    def _read_cache(self, key: str) -> CachedReply | None:
        try:
            stored = json.loads(self._cache_file(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(stored, dict) or stored.get("version") != CACHE_VERSION or stored.get("key") != key:
            return None
        reply = stored.get("reply")
        if not isinstance(reply, dict):
            return None
        if not isinstance(reply.get("text"), str) or not isinstance(reply.get("usage"), dict | None):
            return None
        return cast(CachedReply, reply)  # both keys checked just above

    def _write_cache(self, key: str, request: Mapping[str, object], text: str, usage: JSONObject | None,
                     latency_ms: float) -> None:
        target = self._cache_file(key)
        entry = {
            "version": CACHE_VERSION,
            "key": key,
            "base_url": self.base_url,
            "request": dict(request),
            "reply": {"text": text, "usage": usage, "latency_ms": round(latency_ms, 1)},
        }
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            # Write then rename: parallel eval workers never read half a file.
            with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=target.parent, suffix=".tmp",
                                             delete=False) as handle:
                handle.write(self._hide_secrets(json.dumps(entry, ensure_ascii=False, indent=1)))
            os.replace(handle.name, target)
        except OSError as error:
            raise LiveModelError(f"cannot write the live-model cache {target}: {error.strerror or error}") from None


def _error_detail(error: object) -> str:
    """The server's own error message (OpenAI envelope, llama.cpp's, or the raw text)."""
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
        if isinstance(body.get("detail"), str | list):
            return json.dumps(body["detail"], ensure_ascii=False) if isinstance(body["detail"], list) else body["detail"]
    return str(getattr(error, "message", "") or error)
