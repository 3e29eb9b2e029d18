"""``zhin serve`` — a loopback conformance server that answers like the real chat APIs, offline.

Point a bot (or the real ``openai`` client) at it and every request is checked the way the provider checks it:

* ``POST /v1/chat/completions`` speaks OpenAI Chat Completions with the ``--provider`` profile;
  ``POST /v1/messages`` speaks Anthropic Messages with the ``anthropic`` profile;
  ``POST /v1beta/models/<model>:generateContent`` speaks Gemini with the ``gemini`` profile. The path → (dialect, profile)
  mapping is data (``ENDPOINTS``); a profile that is not registered answers 404 in the dialect's error envelope.
* The profile's validator (``zhin_cli.pipeline.validate``) runs on the body; a rejection is answered with the validator's
  status and exact error body, as the real API would.
* Otherwise the answer is a deterministic completion (``ok <hash of the request>``) whose ``usage`` is each API's
  real shape (the wire model's ``usage``, ``zhin_cli.wire``), with cache counts from the server's prompt cache:
  the one simulator (``zhin_cli.cache.PrefixCache``) under the profile's ``CacheRules`` — automatic (OpenAI,
  DeepSeek: longest common token prefix with the last 64 requests of the same profile and model, above the
  minimum, in steps), explicit (Anthropic: entries at ``cache_control`` breakpoints, 20-block look-back), none.
  ``prompt_tokens`` is the one definition (docs/tokens.md) that trace, prefix-diff and ``zhin report economy``
  report too: tiktoken (o200k for models it does not know, Claude included) over the text the model reads, plus
  the framing estimate — consistent between requests and tools, not the provider's exact bill.
* Malformed JSON, a missing model and unknown paths are answered in the dialect's error envelope. Requests with
  ``"stream": true`` get a server-sent-event stream in the API's event format.

With ``capture`` (``--capture DIR``) every POST body is written to ``DIR/NNNNN-<route>.json`` exactly as received
(bytes, before any check), so any client — a SillyTavern install, the upstream bot, a script — can be compared
with what this assembler sends (``zhin request-diff``). Headers are never written: they carry the API key. Beside
each body, ``NNNNN-<route>.exchange.json`` records what the request got (the model and route asked, status, stream,
the usage object answered with, the answer, elapsed ms; ``serve_upstream.Exchange``).

With ``upstream`` (``--upstream URL``) the server answers nothing itself: each POST to a known route is forwarded to
the real provider and its answer relayed and recorded the same way (``zhin_cli.tools.serve.upstream``;
docs/record.md).

The server binds to loopback only. ``running_server()`` runs one in a thread for tests; ``serve()`` runs one in
the foreground for the CLI.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import http.client
import io
import json
import os
import queue
import re
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, TypedDict, Unpack
from urllib.parse import urlsplit

from zhin_cli.cache import CacheOutcome, PrefixCache, plan
from zhin_cli.core.errors import UsageError, ZhinError
from zhin_cli.core.jsontext import JSON, JSONObject
from zhin_cli.core.loopback import loopback_authority, loopback_host
from zhin_cli.core.redact import mask_url
from zhin_cli.core.registry import Registry
from zhin_cli.core.terminaltext import terminal_safe
from zhin_cli.core.tokens import counter as shared_counter
from zhin_cli.core.tokens import encoding_for_model
from zhin_cli.pipeline.providers import PROVIDERS, provider_names, resolve_profile, unknown_provider
from zhin_cli.pipeline.validate import VALIDATORS, validate
from zhin_cli.tools.serve.upstream import (
    CONNECT_TIMEOUT,
    READ_TIMEOUT,
    RELAY_PIECE,
    ClientGone,
    Exchange,
    Opened,
    Upstream,
    UpstreamError,
    UpstreamPool,
    forwarded_headers,
    parse_upstream,
    read_whole,
    relayed_headers,
    usage_note,
)
from zhin_cli.wire import wire_for

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

MAX_BODY = 64 * 1024 * 1024

Log = Callable[[str], None]


def _canonical(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


# --- dialects: how each API shapes its prefix, errors and answers ----------------------------------------------


@dataclass(frozen=True)
class Dialect:
    name: str  # the wire format (zhin_cli.wire) whose cache view and usage shape it answers with
    error: Callable[[int, str], JSONObject]  # (status, message) → the API's error body
    completion: Callable[[JSONObject, str, str, CacheOutcome, int], JSONObject]
    stream: Callable[[JSONObject, str, str, CacheOutcome, int], Iterator[bytes]]
    missing_model: str


DIALECTS: Registry[Dialect] = Registry("serve dialect")


def register_dialect(dialect: Dialect, *, replace: bool = False) -> Dialect:
    return DIALECTS.add(dialect.name, dialect, replace=replace)


def _sse(data: JSONObject, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


_TRANSPORT_FIELDS = ("stream", "stream_options")  # how the answer is delivered, not what is asked


def _digest(body: Mapping[str, object]) -> str:
    """Hash of what the request asks (the same conversation streamed or not gets the same reply)."""
    asked = {k: v for k, v in body.items() if k not in _TRANSPORT_FIELDS}
    return hashlib.sha256(_canonical(asked).encode("utf-8")).hexdigest()


# OpenAI Chat Completions

_OPENAI_ERROR_TYPES = {400: "invalid_request_error", 404: "invalid_request_error", 413: "invalid_request_error"}


def _openai_error(status: int, message: str) -> JSONObject:
    return {"error": {"message": message, "type": _OPENAI_ERROR_TYPES.get(status, "server_error"), "param": None, "code": None}}


def _openai_usage(cache: CacheOutcome, output_tokens: int) -> JSONObject:
    return wire_for("openai-chat").usage(cache, output_tokens)


def _openai_head(body: JSONObject, model: str, kind: str) -> JSONObject:
    return {"id": f"chatcmpl-{_digest(body)[:24]}", "object": kind, "created": int(time.time()), "model": model,
            "service_tier": "default", "system_fingerprint": "fp_zhin_serve"}


def _openai_completion(body: JSONObject, model: str, text: str, cache: CacheOutcome, output_tokens: int) -> JSONObject:
    message: JSONObject = {"role": "assistant", "content": text, "refusal": None, "annotations": []}
    return {**_openai_head(body, model, "chat.completion"),
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}],
            "usage": _openai_usage(cache, output_tokens)}


def _openai_stream(body: JSONObject, model: str, text: str, cache: CacheOutcome, output_tokens: int) -> Iterator[bytes]:
    head = _openai_head(body, model, "chat.completion.chunk")
    options = body.get("stream_options")
    with_usage = isinstance(options, dict) and options.get("include_usage") is True
    extra: JSONObject = {"usage": None} if with_usage else {}
    deltas: tuple[tuple[JSONObject, str | None], ...] = (
        ({"role": "assistant", "content": "", "refusal": None}, None), ({"content": text}, None), ({}, "stop"))
    for delta, finish in deltas:
        yield _sse({**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], **extra})
    if with_usage:
        yield _sse({**head, "choices": [], "usage": _openai_usage(cache, output_tokens)})
    yield b"data: [DONE]\n\n"


register_dialect(Dialect("openai-chat", _openai_error, _openai_completion, _openai_stream,
                         missing_model="you must provide a model parameter"))


# Anthropic Messages

_ANTHROPIC_ERROR_TYPES = {400: "invalid_request_error", 404: "not_found_error", 413: "request_too_large"}


def _anthropic_error(status: int, message: str) -> JSONObject:
    return {"type": "error", "error": {"type": _ANTHROPIC_ERROR_TYPES.get(status, "api_error"), "message": message}}


def _anthropic_usage(cache: CacheOutcome, output_tokens: int) -> JSONObject:
    return wire_for("anthropic-messages").usage(cache, output_tokens)


def _anthropic_message(body: JSONObject, model: str, content: list[JSON], stop: str | None,
                       usage: JSONObject) -> JSONObject:
    return {"id": f"msg_{_digest(body)[:24]}", "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop, "stop_sequence": None, "usage": usage}


def _anthropic_completion(body: JSONObject, model: str, text: str, cache: CacheOutcome, output_tokens: int) -> JSONObject:
    return _anthropic_message(body, model, [{"type": "text", "text": text}], "end_turn", _anthropic_usage(cache, output_tokens))


def _anthropic_stream(body: JSONObject, model: str, text: str, cache: CacheOutcome, output_tokens: int) -> Iterator[bytes]:
    start = _anthropic_message(body, model, [], None, _anthropic_usage(cache, 1))
    yield _sse({"type": "message_start", "message": start}, "message_start")
    yield _sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}, "content_block_start")
    yield _sse({"type": "ping"}, "ping")
    yield _sse({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}, "content_block_delta")
    yield _sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
    yield _sse({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": output_tokens}}, "message_delta")
    yield _sse({"type": "message_stop"}, "message_stop")


register_dialect(Dialect("anthropic-messages", _anthropic_error, _anthropic_completion, _anthropic_stream,
                         missing_model="model: Field required"))


# Gemini generateContent (the model is in the path: POST /v1beta/models/<model>:generateContent)

_GEMINI_STATUS = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 413: "INVALID_ARGUMENT", 501: "UNIMPLEMENTED"}


def _gemini_error(status: int, message: str) -> JSONObject:
    return {"error": {"code": status, "message": message, "status": _GEMINI_STATUS.get(status, "INTERNAL")}}


def _gemini_completion(body: JSONObject, model: str, text: str, cache: CacheOutcome, output_tokens: int) -> JSONObject:
    return {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}],
            **wire_for("gemini-generate").usage(cache, output_tokens), "modelVersion": model,
            "responseId": _digest(body)[:24]}


def _gemini_stream(body: JSONObject, model: str, text: str, cache: CacheOutcome, output_tokens: int) -> Iterator[bytes]:
    yield _sse(_gemini_completion(body, model, text, cache, output_tokens))


register_dialect(Dialect("gemini-generate", _gemini_error, _gemini_completion, _gemini_stream,
                         missing_model="model: the path names no model"))


# --- endpoints -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    dialect: str  # a DIALECTS key; also the wire a profile must speak to serve it
    own_provider: bool = False  # answered as its wire's provider (ProviderSpec.wire_default), whatever --provider is

    def provider_for(self, server_provider: str) -> str | None:
        """The provider this route answers as: the server's --provider, or its wire's own (None: none is registered)."""
        if not self.own_provider:
            return server_provider
        return next((spec.name for spec in PROVIDERS.values() if spec.wire == self.dialect and spec.wire_default),
                    next((spec.name for spec in PROVIDERS.values() if spec.wire == self.dialect), None))


ENDPOINTS: dict[str, Endpoint] = {
    "/v1/chat/completions": Endpoint("openai-chat"),
    "/v1/messages": Endpoint("anthropic-messages", own_provider=True),
    "/v1beta/models/{model}:generateContent": Endpoint("gemini-generate", own_provider=True),
}


def endpoint_at(route: str) -> tuple[Endpoint | None, str | None]:
    """The endpoint a path names, and the model the path carries (``{model}`` in the route), if any."""
    found = ENDPOINTS.get(route)
    if found is not None:
        return found, None
    for pattern, endpoint in ENDPOINTS.items():
        if "{model}" in pattern:
            head, _, tail = pattern.partition("{model}")
            if route.startswith(head) and route.endswith(tail) and len(route) > len(head) + len(tail):
                model = route[len(head) : len(route) - len(tail)]
                if "/" not in model:
                    return endpoint, model
    return None, None


@dataclass(frozen=True)
class Reply:
    status: int
    body: JSONObject | None = None
    events: Iterator[bytes] | None = None  # a server-sent-event stream instead of a JSON body
    note: str = ""  # for the request log


def answer(path: str, raw: bytes | bytearray, *, provider: str, cache: PrefixCache, method: str = "POST") -> Reply:
    """Everything the server does for one request, as data (the HTTP handler only writes it out)."""
    route = path.split("?", 1)[0]
    endpoint, path_model = endpoint_at(route)
    if endpoint is None or method != "POST":
        return Reply(404, _openai_error(404, f"Invalid URL ({method} {route})"), note="unknown path")
    dialect = DIALECTS[endpoint.dialect]
    if len(raw) > MAX_BODY:
        return Reply(413, dialect.error(413, f"zhin serve: request body over {MAX_BODY} bytes"))
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:  # also a 5000-digit integer (Python's int-digit limit)
        return Reply(400, dialect.error(400, f"zhin serve: the request body is not valid JSON ({error})"), note="bad JSON")
    except RecursionError:
        body = _TOO_DEEP
    if body is _TOO_DEEP or nesting_over(body, MAX_DEPTH):  # not `None`: a body of JSON `null` is a wrong type, not deep
        return Reply(400, dialect.error(400, f"zhin serve: the request body nests deeper than {MAX_DEPTH} levels"),
                     note="nested too deep")
    if not isinstance(body, dict):
        return Reply(400, dialect.error(400, f"zhin serve: the request body must be a JSON object, got {type(body).__name__}"),
                     note="bad JSON")
    model = path_model if path_model is not None else body.get("model")
    if not isinstance(model, str) or not model:
        return Reply(400, dialect.error(400, dialect.missing_model), note="no model")
    name = endpoint.provider_for(provider)
    if name is None or name not in PROVIDERS:
        missing = repr(name) if name is not None else f"for {endpoint.dialect}"
        return Reply(404, dialect.error(404, f"zhin serve: no provider profile {missing} is registered, so POST {route} cannot be "
                                             f"checked (known: {', '.join(provider_names())})"), note=f"no profile {missing}")
    profile = resolve_profile(name, model)
    if profile.validator not in VALIDATORS:
        return Reply(501, dialect.error(501, f"zhin serve: provider {name!r} names validator {profile.validator!r}, which is "
                                             f"not registered (known: {', '.join(sorted(VALIDATORS))})"),
                     note=f"no validator {profile.validator}")
    try:
        verdict = validate(profile.validator, body, model)
    except Exception as error:  # a validator that cannot read the body is a bug there: say so, do not crash
        return Reply(500, dialect.error(500, f"zhin serve: validator {profile.validator!r} failed on this body: "
                                             f"{type(error).__name__}: {error}"), note="validator crashed")
    if not verdict.ok:
        return Reply(verdict.status, verdict.error_body(), note=verdict.message)
    counter = shared_counter(encoding_for_model(model))
    outcome = cache.account((profile.name, model), plan(body, dialect.name, counter), counter, profile.cache)
    text = f"ok {_digest(body)[:8]}"
    output_tokens = counter.count(text)
    note = f"{profile.name} {model} prompt={outcome.prompt_tokens} read={outcome.read} written={outcome.written}"
    if body.get("stream") is True:
        return Reply(200, events=dialect.stream(body, model, text, outcome, output_tokens), note=note)
    return Reply(200, dialect.completion(body, model, text, outcome, output_tokens), note=note)


# --- HTTP ------------------------------------------------------------------------------------------------------
#
# Limits (docs/safety.md "zhin serve"): a fixed pool of WORKERS threads serves connections (one request each,
# HTTP/1.0); connections beyond the pool wait in a short queue and then in the kernel's listen backlog (BACKLOG),
# so a burst of clients waits instead of being reset. Each connection must send its whole request within
# REQUEST_DEADLINE and never stay silent longer than IDLE_TIMEOUT. Request bodies held in memory across all
# requests at once are bounded by MAX_BUFFERED (a body waits up to BUFFER_WAIT for room, then gets a 503; a chunked
# body that already holds room gets the 503 at once rather than wait on others that grow too).
# With --upstream, at most WORKERS - 1 requests wait on the upstream at once (a request waits RELAY_WAIT for a slot,
# then gets a 503), so one worker is always left for everything else: a silent provider cannot stop the server.


WORKERS = 16
BACKLOG = 1024
IDLE_TIMEOUT = 10.0
REQUEST_DEADLINE = 60.0
MAX_BUFFERED = 2 * MAX_BODY
BUFFER_WAIT = 5.0
MAX_DEPTH = 200  # JSON nesting a body may have (real requests: < 20)
MAX_CHUNK_LINE = 1024
READ_PIECE = 1 << 20
DRAIN_BYTES = 2 * MAX_BODY  # after an early answer, read (and drop) at most this much so the client sees it, not a reset
DRAIN_SECONDS = 2.0
MAX_UPSTREAM_DEADLINE = 3600.0
RELAY_WAIT = 0.5  # --upstream: how long a request waits for a relay slot before its 503
CLIENT_LEFT = 499  # --upstream: the status recorded when the client closed before the upstream answered (nginx's)

class ClientError(Exception):
    """A request this server refuses before it reaches ``answer()``: (status, message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ByteBudget:
    """Bytes of request body held in memory across all requests; ``take`` waits a while for room."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._room = threading.Condition()

    def take(self, size: int, wait: float) -> bool:
        deadline = time.monotonic() + wait
        with self._room:
            while self.used + size > self.limit:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._room.wait(remaining)
            self.used += size
            return True

    def give(self, size: int) -> None:
        with self._room:
            self.used -= size
            self._room.notify_all()


class _DeadlineReader(io.RawIOBase):
    """The socket's input, each read bounded by the idle timeout and by the request's overall deadline."""

    def __init__(self, sock: socket.socket, idle: float, deadline: float) -> None:
        super().__init__()
        self._sock, self._idle, self._deadline = sock, idle, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the request was not received in time")
        self._sock.settimeout(min(self._idle, remaining))
        return self._sock.recv_into(buffer)


def _origin_is_loopback(origin: str) -> bool:
    try:
        parts = urlsplit(origin)
        host = parts.hostname
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and host is not None and loopback_authority(f"[{host}]" if ":" in host else host)


# link(2) errors that mean "this file system has no hard links" (not "this file is gone")
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK, errno.ENOSYS})
_TOO_DEEP = object()  # json.loads gave up on the body's nesting


def nesting_over(value: object, limit: int) -> bool:
    """Whether JSON ``value`` nests deeper than ``limit`` (without recursion)."""
    stack: list[tuple[JSONObject | list[JSON], int]] = [(value, 1)] if isinstance(value, (dict, list)) else []  # a scalar nests nothing
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


class _Handler(BaseHTTPRequestHandler):
    server: ConformanceServer
    server_version = "zhin-serve"
    protocol_version = "HTTP/1.0"  # one request per connection: an idle keep-alive cannot hold a pool worker

    def setup(self) -> None:
        super().setup()
        self.rfile.close()
        deadline = time.monotonic() + self.server.request_deadline
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, self.server.idle_timeout, deadline), 65536)
        self._unread = False  # body bytes left on the socket (answered early): drained before closing

    def handle(self) -> None:
        try:
            self.handle_one_request()
        except (OSError, ValueError) as error:  # the client went away, stalled or sent garbage: close quietly
            self.close_connection = True
            self._log(f"{getattr(self, 'command', None) or '-'} {getattr(self, 'path', None) or '-'}: connection closed "
                      f"({type(error).__name__}: {error})")

    def finish(self) -> None:
        try:
            super().finish()
            if self._unread:
                self._drain()
        except OSError:
            pass

    def _drain(self) -> None:
        """Read and drop what the client still sends (bounded), so it reads our answer instead of a reset."""
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_WR)
        deadline, left = time.monotonic() + DRAIN_SECONDS, DRAIN_BYTES
        scratch = bytearray(65536)
        while left > 0 and (remaining := deadline - time.monotonic()) > 0:
            self.connection.settimeout(remaining)
            count = self.connection.recv_into(scratch)
            if not count:
                break
            left -= count

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        held = 0
        try:
            self._check_origin()
            raw, held = self._read_body()
        except ClientError as refusal:
            self._unread = True
            self._send(Reply(refusal.status, self._error_body(refusal.status, str(refusal)), note=str(refusal)))
            return
        try:
            captured = self.server.capture.write(self.path, raw, self._log) if self.server.capture is not None else None
            if self.server.upstream_pool is not None and endpoint_at(self.path.split("?", 1)[0])[0] is not None:
                self._relay(raw, captured)
            else:
                self._respond("POST", raw, captured)
        finally:
            self.server.budget.give(held)

    def do_GET(self) -> None:  # noqa: N802
        self._respond("GET", b"", None)

    def _error_body(self, status: int, message: str) -> JSONObject:
        endpoint, _ = endpoint_at(self.path.split("?", 1)[0])
        return DIALECTS[endpoint.dialect if endpoint else "openai-chat"].error(status, f"zhin serve: {message}")

    def _check_origin(self) -> None:
        """DNS-rebinding and cross-site guard: a browser page can reach 127.0.0.1, but it cannot make its
        request carry a loopback ``Host`` (rebinding) or a JSON body without a CORS preflight (which is refused)."""
        hosts = self.headers.get_all("Host") or []
        if len(hosts) > 1:
            raise ClientError(400, "more than one Host header")
        if hosts and not loopback_authority(hosts[0]):
            raise ClientError(403, f"Host {hosts[0]!r} is not a loopback name or address; zhin serve answers only "
                                   "requests addressed to localhost, 127.0.0.1 or [::1]")
        origin = self.headers.get("Origin")
        if origin is not None and not _origin_is_loopback(origin):
            raise ClientError(403, f"Origin {origin!r} is not on this machine; zhin serve refuses cross-site requests")
        kind = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        if kind != "application/json":
            raise ClientError(415, f"Content-Type must be application/json, got {kind or 'none'!r}")

    def _read_body(self) -> tuple[bytearray, int]:
        """The request body and the bytes it holds in the shared budget; refusals raise ClientError."""
        encodings = [part.strip().lower() for part in ",".join(self.headers.get_all("Transfer-Encoding") or []).split(",")
                     if part.strip()]
        if encodings:
            if encodings != ["chunked"]:
                raise ClientError(501, f"Transfer-Encoding {', '.join(encodings)!r} is not supported (only chunked)")
            return self._read_chunked()
        lengths = set(self.headers.get_all("Content-Length") or [])
        if len(lengths) > 1:
            raise ClientError(400, "conflicting Content-Length headers")
        text = next(iter(lengths), "0").strip() or "0"
        if not re.fullmatch(r"\d{1,20}", text):
            raise ClientError(400, f"Content-Length {text[:40]!r} is not a byte count")
        length = int(text)
        if length > MAX_BODY:
            raise ClientError(413, f"request body of {length} bytes is over the {MAX_BODY}-byte limit")
        if not self.server.budget.take(length, BUFFER_WAIT):
            raise ClientError(503, "too many large request bodies at once; retry shortly")
        try:
            data = bytearray(length)
            view, filled = memoryview(data), 0
            while filled < length:
                count = self.rfile.readinto(view[filled:filled + READ_PIECE])
                if not count:
                    raise ConnectionAbortedError(f"the client sent {filled} of {length} body bytes, then closed")
                filled += count
            view.release()
        except BaseException:
            self.server.budget.give(length)
            raise
        return data, length

    def _read_chunked(self) -> tuple[bytearray, int]:
        data, held = bytearray(), 0
        try:
            while True:
                line = self.rfile.readline(MAX_CHUNK_LINE + 1)
                if not line:
                    raise ConnectionAbortedError("the client closed the connection inside a chunked body")
                if len(line) > MAX_CHUNK_LINE or not line.endswith(b"\n"):
                    raise ClientError(400, "chunk size line too long")
                size_text = line.split(b";", 1)[0].strip()
                if not re.fullmatch(rb"[0-9A-Fa-f]{1,16}", size_text):
                    raise ClientError(400, f"invalid chunk size {size_text[:40].decode('latin-1')!r}")
                size = int(size_text, 16)
                if size == 0:
                    for _ in range(100):  # trailer fields, then the empty line
                        trailer = self.rfile.readline(MAX_CHUNK_LINE + 1)
                        if trailer in (b"\r\n", b"\n", b""):
                            break
                    else:
                        raise ClientError(400, "too many chunked trailer fields")
                    return data, held
                if len(data) + size > MAX_BODY:
                    raise ClientError(413, f"chunked request body is over the {MAX_BODY}-byte limit")
                # a body that already holds room does not wait for more (two growing bodies would wait on each other)
                if not self.server.budget.take(size, 0.0 if held else BUFFER_WAIT):
                    raise ClientError(503, "too many large request bodies at once; retry shortly")
                held += size
                left = size
                while left:
                    piece = self.rfile.read(min(left, READ_PIECE))
                    if not piece:
                        raise ConnectionAbortedError("the client closed the connection inside a chunk")
                    data += piece
                    left -= len(piece)
                if self.rfile.readline(3) not in (b"\r\n", b"\n"):
                    raise ClientError(400, "chunk data is not followed by CRLF")
        except BaseException:
            self.server.budget.give(held)
            raise

    def _respond(self, method: str, raw: bytes | bytearray, captured: Path | None) -> None:
        exchange = Exchange(self._dialect(), None, MAX_BODY, self._recorder(captured), model=self._model(raw),
                            path=self._route())
        try:
            reply = answer(self.path, raw, provider=self.server.provider, cache=self.server.cache, method=method)
        except Exception as error:  # a bug here must not be a traceback or a dropped connection
            reply = Reply(500, self._error_body(500, f"internal error: {type(error).__name__}: {error}"), note="internal error")
        try:
            self._send(reply, exchange)
        finally:
            exchange.finish()

    def _send(self, reply: Reply, exchange: Exchange | None = None) -> None:
        self.connection.settimeout(self.server.idle_timeout)
        self.send_response(reply.status)
        self.send_header("Connection", "close")
        if reply.status == 503:
            self.send_header("Retry-After", "1")
        if exchange is not None:
            exchange.answered(reply.status, stream=reply.events is not None)
        if reply.events is not None:
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            chunks = iter(reply.events)
            chunk = next(chunks, None)
            while chunk is not None:
                following = next(chunks, None)
                if exchange is not None:
                    exchange.streamed(chunk)
                    if following is None:  # the record is there before the stream's last event reaches the client
                        exchange.finish()
                self.wfile.write(chunk)
                self.wfile.flush()
                chunk = following
        else:
            if exchange is not None:
                exchange.whole(reply.body)
                exchange.finish()
            data = json.dumps(reply.body, ensure_ascii=False).encode("utf-8")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        self._log(f"{self.command} {mask_url(self.path)} {reply.status} {reply.note}".rstrip())

    def _dialect(self) -> str:
        endpoint, _ = endpoint_at(self.path.split("?", 1)[0])
        return endpoint.dialect if endpoint is not None else "openai-chat"

    def _recorder(self, captured: Path | None) -> Callable[[JSONObject], None] | None:
        """What writes the ``.exchange.json`` beside the captured body (both modes write the same shape)."""
        capture = self.server.capture
        if captured is None or capture is None:
            return None

        def write(record: JSONObject) -> None:
            capture.write_exchange(captured, record, self._log)

        return write

    # --- --upstream: forward to the real provider and relay its answer (zhin_cli.tools.serve.upstream) ---

    def _relay(self, raw: bytes | bytearray, captured: Path | None) -> None:
        pool = self.server.upstream_pool
        assert pool is not None
        upstream, dialect, model = pool.upstream, self._dialect(), self._model(raw)
        exchange = Exchange(dialect, upstream.shown, MAX_BODY, self._recorder(captured), model=model, path=self._route())
        if not self.server.relay_slots.acquire(timeout=RELAY_WAIT):
            message = (f"{self.server.relay_limit} requests are already waiting on upstream {upstream.shown}; "
                       "retry shortly")
            try:
                self._send(Reply(503, self._error_body(503, message), note=message), exchange)
            finally:
                exchange.finish()
            return
        try:
            self._forward(pool, raw, exchange, model)
        finally:
            self.server.relay_slots.release()
            exchange.finish()

    def _forward(self, pool: UpstreamPool, raw: bytes | bytearray, exchange: Exchange, model: str | None) -> None:
        upstream = pool.upstream
        until = time.monotonic() + upstream.deadline
        try:
            opened = pool.open(self.path, forwarded_headers(self.headers.items(), upstream), raw, until=until,
                               client=self.connection)
        except UpstreamError as failure:
            message = f"upstream {upstream.shown} gave no answer: {failure}"
            self._send(Reply(failure.status, self._error_body(failure.status, message), note=message), exchange)
            return
        except ClientGone:
            exchange.answered(CLIENT_LEFT, stream=False)
            self._log(f"POST {mask_url(self.path)} {CLIENT_LEFT} upstream {model or '-'}: the client went away before "
                      "the upstream answered")
            return

        def log(note: str) -> None:
            self._log(f"POST {mask_url(self.path)} {exchange.status} upstream {model or '-'} "
                      f"{usage_note(exchange.dialect, exchange.usage)}{note}")

        try:
            self._relay_answer(opened, exchange, log, until)
        finally:
            pool.release(opened)

    def _relay_answer(self, opened: Opened, exchange: Exchange, log: Callable[[str], None], until: float) -> None:
        """Relay status, headers and body; an event stream piece by piece as it arrives. A JSON answer's record and
        log line are written before it is sent (a client holding the answer finds both); a stream's after its end.
        A JSON answer must be whole by ``until``; a stream's pieces each within the upstream's read timeout."""
        response = opened.response
        stream = response.getheader("Content-Type", "").split(";", 1)[0].strip().lower() == "text/event-stream"
        body = b""
        if not stream:
            try:
                body = read_whole(opened, MAX_BODY, until)
            except TimeoutError:
                message = f"the upstream's answer was not whole within {self.server.upstream_deadline:g} s"
                self._send(Reply(504, self._error_body(504, message), note=message), exchange)
                return
            except (OSError, http.client.HTTPException) as error:
                message = f"the upstream's answer broke off ({type(error).__name__})"
                self._send(Reply(502, self._error_body(502, message), note=message), exchange)
                return
            if len(body) > MAX_BODY:
                message = f"the upstream's answer is over the {MAX_BODY}-byte limit"
                self._send(Reply(502, self._error_body(502, message), note=message), exchange)
                return
            pool = self.server.upstream_pool
            assert pool is not None
            pool.release(opened)  # read to its end: the client's next request may use the connection
        self.connection.settimeout(self.server.idle_timeout)
        exchange.answered(response.status, stream=stream)
        self.send_response_only(response.status, response.reason)
        self.send_header("Server", self.version_string())
        self.send_header("Date", self.date_time_string())
        for name, value in relayed_headers(response.getheaders()):
            self.send_header(name, value)
        self.send_header("Connection", "close")
        if not stream:
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            exchange.whole(body)
            exchange.finish()
            log("")
            self.wfile.write(body)
            return
        self.end_headers()
        self.wfile.flush()
        opened.sock.settimeout(self.server.upstream_idle)
        note = self._relay_stream(response, exchange)
        exchange.finish()
        log(note)

    def _relay_stream(self, response: http.client.HTTPResponse, exchange: Exchange) -> str:
        while True:
            try:
                piece = response.read1(RELAY_PIECE)
            except TimeoutError:
                return f" (the upstream's stream was silent for {self.server.upstream_idle:g} s: ended there)"
            except (OSError, http.client.HTTPException) as error:
                return f" (the upstream's stream broke off: {type(error).__name__})"
            if not piece:
                return ""
            exchange.streamed(piece)
            try:
                self.wfile.write(piece)
                self.wfile.flush()
            except OSError as error:
                return f" (the client went away: {type(error).__name__})"

    def _route(self) -> str:
        """The request path without its query (which may carry a key)."""
        return self.path.split("?", 1)[0]

    def _model(self, raw: bytes | bytearray) -> str | None:
        """The model asked for: the path's (Gemini), else the body's ``model`` if it is a non-empty string."""
        _, path_model = endpoint_at(self._route())
        if path_model is not None:
            return path_model
        try:
            model = json.loads(raw).get("model")
        except (UnicodeDecodeError, ValueError, RecursionError, AttributeError):
            return None
        return model if isinstance(model, str) and model else None

    def _log(self, line: str) -> None:
        if self.server.log:
            self.server.log(terminal_safe(line))  # a request path cannot rewrite the terminal or forge a log line

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 — we log one line per answer instead
        pass


_CAPTURE_NAME = re.compile(r"(\d{5,})-[^/]*\.json")


class Capture:
    """Writes request bodies as received, numbered in arrival order, after any already in the folder.

    Safe beside another server capturing into the same folder: each body is written to a temporary file in the
    folder, then published under the next free number with an exclusive, atomic step (a hard link, which fails
    if the name exists; where links are not supported, ``open(name, "xb")`` claims the name and ``os.replace``
    puts the body there). A taken number moves on to the next. A reader never sees a partial body under a
    capture name, and numbering past 99999 continues at 100000.
    """

    def __init__(self, folder: Path) -> None:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ZhinError(f"cannot create the capture folder: {error.strerror or error}", where=str(folder)) from None
        if not folder.is_dir():
            raise ZhinError("the capture folder is not a folder", where=str(folder))
        self.folder = folder
        self.lock = threading.Lock()
        self.next = self._highest() + 1
        self._pending: set[str] = set()  # temporary files being written (removed by close())

    def _highest(self) -> int:
        try:
            names = os.listdir(self.folder)
        except OSError:
            return 0
        return max((int(m.group(1)) for name in names if (m := _CAPTURE_NAME.fullmatch(name))), default=0)

    def write(self, path: str, raw: bytes | bytearray, log: Log | None = None) -> Path | None:
        route = re.sub(r"[^A-Za-z0-9]+", "-", path.split("?", 1)[0].removeprefix("/v1/")).strip("-")[:80] or "root"
        return self._write_then(raw, lambda temporary: self._publish(temporary, route), log)

    def _write_then(self, data: bytes | bytearray, place: Callable[[str], Path], log: Log | None) -> Path | None:
        """``data`` into a temporary file of the folder, then ``place`` moves it where it belongs: a reader sees a
        whole file or none, and a stopped server leaves no temporary file (``close``)."""
        temporary = ""
        try:
            handle, temporary = tempfile.mkstemp(dir=self.folder, prefix=".capture-", suffix=".tmp")
            with self.lock:
                self._pending.add(temporary)
            with os.fdopen(handle, "wb") as stream:
                stream.write(data)
            return place(temporary)
        except OSError as error:  # a full disk must not take the server down: say so per request
            if log:
                log(f"capture failed: {self.folder}: {error.strerror or error}")
            return None
        finally:
            if temporary:
                with self.lock:
                    self._pending.discard(temporary)
                with contextlib.suppress(OSError):
                    os.unlink(temporary)

    def _publish(self, temporary: str, route: str) -> Path:
        for _ in range(100_000):
            with self.lock:
                number = self.next
                self.next += 1
            target = self.folder / f"{number:05d}-{route}.json"
            try:
                try:
                    os.link(temporary, target)
                except FileExistsError:
                    raise
                except OSError as error:
                    if error.errno not in _NO_HARD_LINKS:  # e.g. the temporary file is gone (shut down meanwhile)
                        raise
                    # no hard links here: claim the name, then move the body onto it
                    open(target, "xb").close()
                    os.replace(temporary, target)
                return target
            except FileExistsError:  # another writer has this number: start after the highest one there
                with self.lock:
                    self.next = max(self.next, self._highest() + 1)
        raise OSError(f"no free capture number after {self.next}")

    def write_exchange(self, request_file: Path, record: JSONObject, log: Log | None = None) -> Path | None:
        """``NNNNN-<route>.exchange.json`` beside the request body: written to a temporary file, then moved into
        place, so a reader sees the whole record or none (the number is already ours: the body holds it)."""
        target = request_file.with_name(request_file.name.removesuffix(".json") + ".exchange.json")

        def place(temporary: str) -> Path:
            os.replace(temporary, target)
            return target

        return self._write_then(json.dumps(record, ensure_ascii=False, indent=1).encode("utf-8"), place, log)

    def close(self) -> None:
        """Remove temporary files of bodies that were still being written (a stopped server leaves none)."""
        with self.lock:
            pending, self._pending = self._pending, set()
        for temporary in pending:
            with contextlib.suppress(OSError):
                os.unlink(temporary)


_Request = socket.socket | tuple[bytes, socket.socket]  # what socketserver hands a server per connection


class ConformanceServer(HTTPServer):
    """An HTTP server on a fixed pool of worker threads (see the limits above)."""

    request_queue_size = BACKLOG

    def __init__(self, address: tuple[str, int], provider: str, log: Log | None = None, capture: Path | None = None, *,
                 workers: int = WORKERS, idle_timeout: float = IDLE_TIMEOUT, request_deadline: float = REQUEST_DEADLINE,
                 max_buffered: int = MAX_BUFFERED, upstream: Upstream | None = None) -> None:
        self.provider = provider
        self.upstream = upstream
        self.upstream_pool = UpstreamPool(upstream, workers) if upstream is not None else None
        self.upstream_deadline = upstream.deadline if upstream is not None else 0.0
        self.upstream_idle = upstream.read_timeout if upstream is not None else 0.0
        self.relay_limit = max(1, workers - 1)  # one worker is left for requests that are not relayed
        self.relay_slots = threading.BoundedSemaphore(self.relay_limit)
        self.cache = PrefixCache()
        self.log = log
        self.capture = Capture(capture) if capture is not None else None
        self.idle_timeout = idle_timeout
        self.request_deadline = request_deadline
        self.budget = ByteBudget(max(max_buffered, MAX_BODY))
        self._closing = threading.Event()
        self._queue: queue.Queue[tuple[_Request, object] | None] = queue.Queue(maxsize=workers)
        self._workers: list[threading.Thread] = []  # (server_close runs if binding fails)
        super().__init__(address, _Handler)
        self._workers = [threading.Thread(target=self._work, name=f"zhin-serve-{i}", daemon=True) for i in range(workers)]
        for worker in self._workers:
            worker.start()

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        host = str(host)
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/v1"

    def process_request(self, request: _Request, client_address: object) -> None:
        """Hand the connection to the pool; while every worker is busy, stop accepting (the backlog holds the rest)."""
        while not self._closing.is_set():
            try:
                self._queue.put((request, client_address), timeout=0.1)
                return
            except queue.Full:
                continue
        self.shutdown_request(request)

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            request, client_address = item
            try:
                self.finish_request(request, client_address)
            except Exception as error:  # never a traceback on stderr: one log line
                if self.log:
                    host = client_address[0] if isinstance(client_address, tuple) else client_address
                    self.log(terminal_safe(f"connection from {host} ended: {type(error).__name__}: {error}"))
            finally:
                self.shutdown_request(request)

    def handle_error(self, request: _Request, client_address: object) -> None:
        pass  # errors are handled (and logged) in _work and the handler

    def shutdown(self) -> None:
        self._closing.set()
        super().shutdown()

    def server_close(self, wait: float = 2.0) -> None:
        self._closing.set()
        super().server_close()
        while True:  # connections accepted but not started: close them
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                self.shutdown_request(item[0])
        for _ in self._workers:
            with contextlib.suppress(queue.Full):
                self._queue.put_nowait(None)
        deadline = time.monotonic() + wait
        for worker in self._workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        if self.capture is not None:
            self.capture.close()
        if self.upstream_pool is not None:
            self.upstream_pool.close()


class ServerLimits(TypedDict, total=False):
    """ConformanceServer's keyword options, as make_server and running_server pass them on."""

    workers: int
    idle_timeout: float
    request_deadline: float
    max_buffered: int


class RunningOptions(ServerLimits, total=False):
    """running_server's keyword options: the server's limits and make_server's upstream options."""

    upstream: str | None
    upstream_connect_timeout: float
    upstream_read_timeout: float
    upstream_deadline: float | None


class _ConformanceServer6(ConformanceServer):
    address_family = socket.AF_INET6


def make_server(provider: str = "openai", host: str = "127.0.0.1", port: int = 0, log: Log | None = None,
                capture: Path | None = None, *, upstream: str | None = None, upstream_connect_timeout: float = CONNECT_TIMEOUT,
                upstream_read_timeout: float = READ_TIMEOUT, upstream_deadline: float | None = None,
                **limits: Unpack[ServerLimits]) -> ConformanceServer:
    """A bound (not yet serving) server; checks the host and that ``provider`` can serve the endpoints that use it.
    With ``upstream`` it forwards to that URL instead of answering, and must record (``capture``); the forwarded
    request's deadline is ``upstream_deadline``, by default the server's ``request_deadline``."""
    address = loopback_host(host, "zhin serve")
    relayed_to: Upstream | None = None
    if upstream is not None:
        if capture is None:
            raise UsageError("--upstream records what the provider is sent and answers: name the folder with --capture DIR")
        if upstream_deadline is None:
            upstream_deadline = limits.get("request_deadline", REQUEST_DEADLINE)
        if not 0 < upstream_deadline <= MAX_UPSTREAM_DEADLINE:  # also NaN
            raise UsageError(f"--upstream-deadline {upstream_deadline:g} is out of range "
                             f"(seconds, more than 0, at most {MAX_UPSTREAM_DEADLINE:g})")
        relayed_to = parse_upstream(upstream, connect_timeout=upstream_connect_timeout,
                                            read_timeout=upstream_read_timeout, deadline=upstream_deadline)
    if provider not in PROVIDERS:
        raise UsageError(unknown_provider(provider))
    for route, endpoint in ENDPOINTS.items():
        if not endpoint.own_provider and PROVIDERS[provider].wire != endpoint.dialect:
            raise UsageError(f"provider {provider!r} speaks {PROVIDERS[provider].wire}, but POST {route} needs an "
                             f"{endpoint.dialect} profile")
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port} is out of range (0-65535; 0 picks a free port)")
    server_class = _ConformanceServer6 if ":" in address else ConformanceServer
    try:
        return server_class((address, port), provider, log, capture, upstream=relayed_to, **limits)
    except OSError as error:
        raise ZhinError(f"cannot listen on {address}:{port}: {error.strerror or error}") from None


@contextmanager
def running_server(provider: str = "openai", port: int = 0, host: str = "127.0.0.1",
                   log: Log | None = None, capture: Path | None = None, **limits: Unpack[RunningOptions]) -> Iterator[tuple[str, ConformanceServer]]:
    """Run a server in a background thread; yields ``(base_url, server)`` and shuts it down on exit.
    ``limits``: ConformanceServer's keyword options (workers, idle_timeout, request_deadline, max_buffered) and
    make_server's upstream options (upstream, upstream_connect_timeout, upstream_read_timeout, upstream_deadline)."""
    server = make_server(provider, host, port, log, capture, **limits)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="zhin-serve", daemon=True)
    thread.start()
    try:
        yield server.base_url, server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def serve(provider: str = "openai", host: str = "127.0.0.1", port: int = 0, *,
          on_ready: Callable[[str], None] | None = None, log: Log | None = None, capture: Path | None = None,
          upstream: str | None = None, upstream_deadline: float | None = None) -> None:
    """Serve in the foreground until Ctrl-C or SIGTERM: both are the normal way to stop a server and return
    normally (exit 0) once in-flight captures are finished or removed; a second signal ends at once. An ignored
    signal (nohup, a background job) stays ignored."""
    server = make_server(provider, host, port, log, capture, upstream=upstream, upstream_deadline=upstream_deadline)
    previous: dict[int, signal.Handlers | int | Callable[[int, FrameType | None], object] | None] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(signum) != signal.SIG_IGN:
                previous[signum] = signal.signal(signum, _stop)
    try:
        if on_ready:
            on_ready(server.base_url)
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        for number, handler in previous.items():
            signal.signal(number, handler)


def _stop(signum: int, frame: FrameType | None) -> None:
    for other in (signal.SIGINT, signal.SIGTERM):  # a second signal while stopping: end at once
        if signal.getsignal(other) == _stop:
            signal.signal(other, signal.SIG_DFL)
    raise KeyboardInterrupt
