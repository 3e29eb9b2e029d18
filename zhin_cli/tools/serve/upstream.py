"""``zhin serve --upstream URL``: forward each request to the real provider, relay its answer, record what it said.

* **Where to.** ``URL`` is the provider's origin (plus any path prefix of a gateway); the request's own path is
  appended: ``--upstream https://api.openai.com`` sends ``POST /v1/chat/completions`` to
  ``https://api.openai.com/v1/chat/completions``. A URL whose path already ends in ``/v1`` or ``/v1beta`` (an SDK's
  base URL) would double that segment, so it is a usage error that says so.
* **What is forwarded.** The body byte for byte; every request header except the hop-by-hop ones (RFC 9110 §7.6.1,
  and any named in ``Connection``), ``Host`` and ``Content-Length`` (set for the upstream), ``Origin``/``Referer``
  (they name this loopback server) and ``Accept-Encoding`` (``identity`` is asked, so the answer can be read for its
  usage). ``Authorization``, ``x-api-key``, ``x-goog-api-key``, ``anthropic-version``, ``anthropic-beta``, the
  request's query (Gemini's ``?key=``) all reach the provider. User information in ``URL`` is sent as Basic
  authentication when the client sent no ``Authorization`` of its own.
* **What is relayed.** The upstream's status, its headers except hop-by-hop ones, ``Content-Length``, ``Server``
  and ``Date`` (this server sends its own), and its body: an event stream (``text/event-stream``) piece by piece as
  it arrives, anything else read whole (at most ``MAX_BODY``) and sent with its length.
* **What is recorded** (``Exchange``): status, whether it streamed, the provider's usage object as it sent it (a
  stream's from its final chunk(s): OpenAI's ``usage`` chunk, Anthropic's ``message_start`` usage updated by
  ``message_delta``'s, Gemini's last ``usageMetadata``), the JSON answer (a stream reassembled into the message it
  delivered) and the time taken. Never a header, never the URL's credentials or secret query values.
* **Failures.** An upstream that cannot be reached within the connect timeout, or resets, answers nothing: 502 in
  the route's error envelope. The forwarded request has a deadline (``Upstream.deadline``, the server's per-request
  deadline unless set): an upstream whose headers — and, for a JSON answer, whole body — have not arrived by then:
  504. A stream is bounded instead by ``read_timeout`` between two of its pieces (a long answer may take minutes; a
  silent one ends there). A client that closes its connection while the upstream has not answered ends the wait at
  once (``ClientGone``), so a worker is never held for a client that left. An upstream 4xx/5xx is relayed as it is.
* **What is recorded besides**: the model asked for (the body's ``model``; for Gemini the path's) and the route
  (the request path without its query, which may hold a key), so a reader can name a Gemini body's model.

Standard library only (``http.client``). Connections to the upstream are kept alive and reused (``UpstreamPool``).
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from zhin_cli.cache.usage import normalize_usage, usage_kind_of
from zhin_cli.core.errors import UsageError
from zhin_cli.core.jsontext import JSON, JSONObject
from zhin_cli.core.redact import mask_url, split_userinfo

CONNECT_TIMEOUT = 5.0  # a stopped or unreachable upstream is a 502 within this
READ_TIMEOUT = 60.0  # longest silence between two pieces of a streamed answer
DEADLINE = 60.0  # an answer's headers (a JSON answer: all of it) by then, else 504 (zhin serve: its request deadline)
RELAY_PIECE = 65536

HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection", "te",
                        "trailer", "trailers", "transfer-encoding", "upgrade"})
NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length", "accept-encoding", "expect", "origin", "referer"}
NOT_RELAYED = HOP_BY_HOP | {"content-length", "server", "date"}
_SDK_BASE = re.compile(r"/v1(beta\d*)?/?$")


class ClientGone(Exception):
    """The client closed its connection before the upstream answered: nobody is waiting for the answer."""


class UpstreamError(Exception):
    """The upstream gave no answer: (status this server answers instead, reason for the log and the error body)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


@dataclass(frozen=True)
class Upstream:
    scheme: str
    host: str
    port: int
    prefix: str  # path prefix, no trailing slash
    query: str  # the URL's own query, put before the request's
    shown: str  # the URL as it may be printed or stored (no credentials, no secret query values)
    basic: str | None = field(default=None, repr=False)  # ``Authorization`` value from the URL's user information
    connect_timeout: float = CONNECT_TIMEOUT
    read_timeout: float = READ_TIMEOUT
    deadline: float = DEADLINE

    def target(self, path: str) -> str:
        route, question, query = path.partition("?")
        queries = "&".join(q for q in (self.query, query) if q)
        return self.prefix + route + (f"?{queries}" if queries else "")


def parse_upstream(url: str, *, connect_timeout: float = CONNECT_TIMEOUT, read_timeout: float = READ_TIMEOUT,
                   deadline: float = DEADLINE) -> Upstream:
    """``--upstream URL`` checked: http(s), a host, no fragment, not an SDK base URL ending in /v1."""
    shown = mask_url(url)
    try:
        parts = urlsplit(url)
        port = parts.port
        host = parts.hostname
    except ValueError as error:
        raise UsageError(f"--upstream {shown!r} is not a URL ({error})") from None
    if parts.scheme not in ("http", "https") or not host:
        raise UsageError(f"--upstream {shown!r} must be an http:// or https:// URL with a host")
    if parts.fragment:
        raise UsageError(f"--upstream {shown!r} has a #fragment; give the provider's origin, e.g. https://api.openai.com")
    if _SDK_BASE.search(parts.path):
        raise UsageError(f"--upstream {shown!r} ends in the API version: the request path (/v1/chat/completions …) is "
                         f"appended to it, so give the origin without it ({shown[: shown.rfind('/v1')]})")
    userinfo, _ = split_userinfo(url.split("://", 1)[1])
    basic = None
    if userinfo is not None:
        user, _, password = userinfo.partition(":")
        basic = "Basic " + base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode("ascii")
    return Upstream(parts.scheme, host, port or (443 if parts.scheme == "https" else 80), parts.path.rstrip("/"),
                    parts.query, shown, basic, connect_timeout, read_timeout, deadline)


def forwarded_headers(headers: Iterable[tuple[str, str]], upstream: Upstream) -> list[tuple[str, str]]:
    """The client's request headers that go on to the provider (see the module docstring)."""
    pairs = list(headers)
    named = {token.strip().lower() for name, value in pairs if name.lower() == "connection" for token in value.split(",")}
    kept = [(name, value) for name, value in pairs if name.lower() not in NOT_FORWARDED and name.lower() not in named]
    if upstream.basic and not any(name.lower() == "authorization" for name, _ in kept):
        kept.append(("Authorization", upstream.basic))
    return kept


def relayed_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    pairs = list(headers)
    named = {token.strip().lower() for name, value in pairs if name.lower() == "connection" for token in value.split(",")}
    return [(name, value) for name, value in pairs if name.lower() not in NOT_RELAYED and name.lower() not in named]


class UpstreamPool:
    """Kept-alive connections to the upstream that are idle between requests (at most ``limit``), so a request
    does not pay a new TCP and TLS handshake with the provider. A connection goes back only after its answer was
    read to the end and the upstream did not say it closes."""

    def __init__(self, upstream: Upstream, limit: int) -> None:
        self.upstream, self.limit = upstream, limit
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False
        self.opened = 0  # connections made (for tests and the benchmark)

    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
            self.opened += 1
        kind = http.client.HTTPSConnection if self.upstream.scheme == "https" else http.client.HTTPConnection
        return kind(self.upstream.host, self.upstream.port, timeout=self.upstream.connect_timeout), False

    def done(self, connection: http.client.HTTPConnection, response: http.client.HTTPResponse) -> None:
        """The exchange is over: keep the connection if it can carry another request, else close it."""
        with self._lock:
            if response.isclosed() and not response.will_close and connection.sock is not None and not self._closed \
                    and len(self._idle) < self.limit:
                self._idle.append(connection)
                return
        connection.close()

    def release(self, opened: Opened) -> None:
        """``done`` once: a JSON answer's connection goes back as soon as it is read, before the client has it (its
        next request can use it); the handler's ``finally`` releases whatever is still held."""
        if not opened.released:
            opened.released = True
            self.done(opened.connection, opened.response)

    def close(self) -> None:
        with self._lock:
            idle, self._idle, self._closed = self._idle, [], True
        for connection in idle:
            connection.close()

    def open(self, path: str, headers: list[tuple[str, str]], body: bytes | bytearray, *, until: float,
             client: socket.socket | None = None) -> Opened:
        """Send the request; the response with its headers read by ``until`` (a ``time.monotonic()`` value).
        Raises UpstreamError when there is none (504 at ``until``), ClientGone when ``client`` closed meanwhile. A
        kept connection the upstream has meanwhile closed (it fails before any answer) is replaced once by a new one."""
        while True:
            connection, reused = self._take()
            try:
                return self._send(connection, path, headers, body, until, client)
            except (ConnectionError, http.client.BadStatusLine) as error:  # RemoteDisconnected is both
                connection.close()
                if reused:
                    continue
                raise UpstreamError(502, f"no answer ({_reason(error)})") from None
            except (UpstreamError, ClientGone):
                connection.close()
                raise
            except TimeoutError:
                connection.close()
                raise UpstreamError(504, f"no answer within {self.upstream.deadline:g} s") from None
            except (OSError, http.client.HTTPException, ValueError) as error:  # ValueError: a header it cannot send
                connection.close()
                raise UpstreamError(502, f"no answer ({_reason(error)})") from None

    def _send(self, connection: http.client.HTTPConnection, path: str, headers: list[tuple[str, str]],
              body: bytes | bytearray, until: float, client: socket.socket | None) -> Opened:
        if connection.sock is None:
            try:
                connection.connect()
            except (OSError, ssl.SSLError) as error:
                raise UpstreamError(502, f"cannot connect ({_reason(error)})") from None
        sock = connection.sock
        assert sock is not None
        sock.settimeout(time_left(until))  # a body the upstream does not read cannot hold us past the deadline
        connection.putrequest("POST", self.upstream.target(path), skip_accept_encoding=True)
        for name, value in headers:
            connection.putheader(name, value)
        connection.putheader("Accept-Encoding", "identity")
        connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(bytes(body))
        await_answer(sock, client, until)
        sock.settimeout(time_left(until))  # headers that trickle in stop at the deadline too
        return Opened(connection, connection.getresponse(), sock)


@dataclass
class Opened:
    """An upstream answer whose headers are read: its connection (for the pool), the response, and the socket it
    is read from (kept here: http.client drops ``connection.sock`` when the upstream says it will close)."""

    connection: http.client.HTTPConnection
    response: http.client.HTTPResponse
    sock: socket.socket
    released: bool = False  # handed back to the pool (``UpstreamPool.release``)


def time_left(until: float) -> float:
    """Seconds until ``until``; TimeoutError once it has passed (a socket timeout of 0 would mean non-blocking)."""
    left = until - time.monotonic()
    if left <= 0:
        raise TimeoutError("the deadline has passed")
    return left


def await_answer(upstream: socket.socket, client: socket.socket | None, until: float) -> None:
    """Wait until the upstream has something to say. TimeoutError at ``until``; ClientGone as soon as the client
    has closed its connection (it reads as end of file), so that its worker is free again at once."""
    with selectors.DefaultSelector() as selector:
        selector.register(upstream, selectors.EVENT_READ)
        if client is not None:
            selector.register(client, selectors.EVENT_READ)
        while True:
            for key, _ in selector.select(time_left(until)):
                if key.fileobj is upstream:
                    return
                if _closed(client):
                    raise ClientGone
                selector.unregister(key.fileobj)  # the client sent more bytes (not read here): stop watching it


def _closed(client: socket.socket | None) -> bool:
    """Whether a readable client socket is at end of file or reset (peeked, nothing is consumed)."""
    if client is None:
        return False
    try:
        return client.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def read_whole(opened: Opened, limit: int, until: float) -> bytes:
    """A JSON answer's body, at most ``limit + 1`` bytes, all of it by ``until`` (TimeoutError otherwise)."""
    pieces, size = [], 0
    while size <= limit:
        opened.sock.settimeout(time_left(until))
        piece = opened.response.read1(RELAY_PIECE)
        if not piece:
            if not opened.response.isclosed():  # read1 leaves a Content-Length answer read to its end open
                opened.response.read()  # nothing is left: this marks it read, so its connection can be kept
            break
        pieces.append(piece)
        size += len(piece)
    return b"".join(pieces)[: limit + 1]


def _reason(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return f"{type(error).__name__}: {text}" if text != type(error).__name__ else text


# --- what the answer said: usage and the message, from a JSON body or an event stream ----------------------------


def usage_in(dialect: str, body: JSON) -> JSONObject | None:
    """The provider's usage object in a JSON answer (Gemini: ``usageMetadata``), or None."""
    if not isinstance(body, dict):
        return None
    usage = body.get("usageMetadata" if dialect == "gemini-generate" else "usage")
    return usage if isinstance(usage, dict) else None


def usage_note(dialect: str, usage: JSONObject | None) -> str:
    """``prompt=… read=… written=…`` as the conformance server logs them (``-``: the provider did not say)."""
    if usage is None:
        return "no usage"
    try:
        normal = normalize_usage(usage_kind_of(usage) or dialect, usage)
    except Exception:  # a usage object no API produces: say so, do not guess
        return "usage unreadable"

    def shown(value: int | None) -> str:
        return "-" if value is None else str(value)

    return f"prompt={shown(normal.total_prompt)} read={shown(normal.cache_read)} written={shown(normal.cache_write)}"


class EventStream:
    """Server-sent events fed in pieces as they arrive → (event name, JSON data) per complete event."""

    _END = re.compile(rb"\r\n\r\n|\n\n|\r\r")

    def __init__(self, limit: int) -> None:
        self._buffer = bytearray()
        self._left = limit
        self.overflowed = False

    def feed(self, piece: bytes) -> list[tuple[str | None, JSON]]:
        if self.overflowed:
            return []
        self._left -= len(piece)
        if self._left < 0:  # the recorder stops reading (the client still gets every byte)
            self.overflowed = True
            self._buffer.clear()
            return []
        self._buffer += piece
        events: list[tuple[str | None, JSON]] = []
        start = 0
        while match := self._END.search(self._buffer, start):
            event = self._parse(bytes(self._buffer[start : match.start()]))
            if event is not None:
                events.append(event)
            start = match.end()
        del self._buffer[:start]
        return events

    @staticmethod
    def _parse(block: bytes) -> tuple[str | None, JSON] | None:
        name: str | None = None
        data: list[str] = []
        for line in re.split(r"\r\n|\n|\r", block.decode("utf-8", "replace")):
            key, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if key == "event":
                name = value
            elif key == "data":
                data.append(value)
        text = "\n".join(data)
        if not data or text.strip() == "[DONE]":
            return None
        try:
            return name, json.loads(text)
        except ValueError:
            return None


def _append(holder: JSONObject, key: str, piece: JSON) -> None:
    if isinstance(piece, str):
        so_far = holder.get(key)
        holder[key] = (so_far if isinstance(so_far, str) else "") + piece


def _object_at(holder: JSONObject, key: str) -> JSONObject:
    """``holder[key]``, an object this module built there (a stray value is replaced, not trusted)."""
    value = holder.get(key)
    if not isinstance(value, dict):
        value = holder[key] = {}
    return value


class OpenAIChatStream:
    """``chat.completion.chunk`` events → the ``chat.completion`` they add up to; usage from the chunk that has it."""

    _HEAD = ("id", "created", "model", "system_fingerprint", "service_tier")

    def __init__(self) -> None:
        self.head: JSONObject = {}
        self.choices: dict[int, JSONObject] = {}
        self.usage: JSONObject | None = None

    def event(self, name: str | None, data: JSON) -> None:
        if not isinstance(data, dict):
            return
        self.head.update((key, data[key]) for key in self._HEAD if key in data)
        usage, choices = data.get("usage"), data.get("choices")
        if isinstance(usage, dict):
            self.usage = usage
        for choice in choices if isinstance(choices, list) else ():  # (a JSON object or text here: no choices)
            if isinstance(choice, dict):
                self._choice(choice)

    def _choice(self, choice: JSONObject) -> None:
        given = choice.get("index", 0)
        index = given if isinstance(given, int) else 0
        slot = self.choices.setdefault(index, {"index": index, "message": {"role": "assistant", "content": None},
                                               "finish_reason": None})
        message, delta = _object_at(slot, "message"), choice.get("delta")
        if isinstance(delta, dict):
            role, calls = delta.get("role"), delta.get("tool_calls")
            if isinstance(role, str):
                message["role"] = role
            for key in ("content", "refusal", "reasoning_content"):
                _append(message, key, delta.get(key))
            for call in calls if isinstance(calls, list) else ():
                if isinstance(call, dict):
                    self._tool_call(message, call)
        if choice.get("finish_reason") is not None:
            slot["finish_reason"] = choice["finish_reason"]

    @staticmethod
    def _tool_call(message: JSONObject, call: JSONObject) -> None:
        calls = message.setdefault("tool_calls", [])
        if not isinstance(calls, list):  # (only this method writes it: always a list)
            calls = message["tool_calls"] = []
        given = call.get("index")
        index = given if isinstance(given, int) else len(calls)
        while len(calls) <= index:
            calls.append({"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        slot = calls[index]
        if not isinstance(slot, dict):
            slot = calls[index] = {}
        for key in ("id", "type"):
            value = call.get(key)
            if isinstance(value, str):
                slot[key] = value
        function = call.get("function")
        if isinstance(function, dict):
            _append(_object_at(slot, "function"), "name", function.get("name"))
            _append(_object_at(slot, "function"), "arguments", function.get("arguments"))

    def final(self) -> JSONObject | None:
        if not self.head and not self.choices:
            return None
        choices: list[JSON] = [self.choices[i] for i in sorted(self.choices)]
        return {**self.head, "object": "chat.completion", "choices": choices, "usage": self.usage}


class AnthropicStream:
    """Messages stream events → the ``message`` they add up to; usage: message_start's, updated by message_delta's."""

    def __init__(self) -> None:
        self.message: JSONObject | None = None
        self.blocks: dict[int, JSONObject] = {}
        self.partial: dict[int, str] = {}
        self.usage: JSONObject | None = None

    def event(self, name: str | None, data: JSON) -> None:
        if not isinstance(data, dict):
            return
        kind, index = data.get("type"), data.get("index")
        message, block, delta, usage = data.get("message"), data.get("content_block"), data.get("delta"), data.get("usage")
        if kind == "message_start" and isinstance(message, dict):
            self.message = {k: v for k, v in message.items() if k != "content"}
            started = message.get("usage")
            if isinstance(started, dict):
                self.usage = dict(started)
        elif kind == "content_block_start" and isinstance(index, int) and isinstance(block, dict):
            self.blocks[index] = dict(block)
        elif kind == "content_block_delta" and isinstance(index, int) and isinstance(delta, dict):
            self._delta(index, delta)
        elif kind == "content_block_stop" and isinstance(index, int) and index in self.partial and index in self.blocks:
            try:
                self.blocks[index]["input"] = json.loads(self.partial.pop(index) or "{}")
            except ValueError:
                pass
        elif kind == "message_delta":
            if self.message is not None and isinstance(delta, dict):
                self.message.update(delta)
            if isinstance(usage, dict):
                self.usage = {**(self.usage or {}), **usage}

    def _delta(self, index: int, delta: JSONObject) -> None:
        block = self.blocks.setdefault(index, {"type": "text", "text": ""})
        kind, partial, signature = delta.get("type"), delta.get("partial_json"), delta.get("signature")
        if kind == "text_delta":
            _append(block, "text", delta.get("text"))
        elif kind == "input_json_delta" and isinstance(partial, str):
            self.partial[index] = self.partial.get(index, "") + partial
        elif kind == "thinking_delta":
            _append(block, "thinking", delta.get("thinking"))
        elif kind == "signature_delta" and isinstance(signature, str):
            block["signature"] = signature

    def final(self) -> JSONObject | None:
        if self.message is None:
            return None
        content: list[JSON] = [self.blocks[i] for i in sorted(self.blocks)]
        return {**self.message, "content": content, "usage": self.usage}


class GeminiStream:
    """``GenerateContentResponse`` chunks → one response: the first candidate's text parts joined, the rest from the
    last chunk; usage: the last ``usageMetadata``."""

    def __init__(self) -> None:
        self.last: JSONObject | None = None
        self.parts: list[JSONObject] = []
        self.usage: JSONObject | None = None

    def event(self, name: str | None, data: JSON) -> None:
        if not isinstance(data, dict):
            return
        self.last = data
        usage = data.get("usageMetadata")
        if isinstance(usage, dict):
            self.usage = usage
        content = _first_candidate(data).get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        for part in parts if isinstance(parts, list) else ():
            if not isinstance(part, dict):
                continue
            text, joined = part.get("text"), self.parts[-1].get("text") if self.parts else None
            if isinstance(text, str) and isinstance(joined, str) and set(self.parts[-1]) == {"text"} and set(part) == {"text"}:
                self.parts[-1] = {"text": joined + text}
            else:
                self.parts.append(dict(part))

    def final(self) -> JSONObject | None:
        if self.last is None:
            return None
        first = dict(_first_candidate(self.last))
        content = first.get("content")
        parts: list[JSON] = list(self.parts)
        first["content"] = {**(content if isinstance(content, dict) else {}), "parts": parts}
        answer: JSONObject = {**self.last, "candidates": [first]}
        if self.usage is not None:
            answer["usageMetadata"] = self.usage
        return answer


def _first_candidate(data: JSONObject) -> JSONObject:
    candidates = data.get("candidates")
    first = candidates[0] if isinstance(candidates, list) and candidates else None
    return first if isinstance(first, dict) else {}


STREAMS: dict[str, Callable[[], OpenAIChatStream | AnthropicStream | GeminiStream]] = {
    "openai-chat": OpenAIChatStream, "anthropic-messages": AnthropicStream, "gemini-generate": GeminiStream,
}


def _parsed(data: bytes | bytearray) -> JSON:
    """A JSON answer's value, or None when it is not JSON (recorded as such, never an error)."""
    try:
        value: JSON = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return value


class Exchange:
    """What one request got, recorded as it is delivered: ``record()`` is the ``.exchange.json`` object, handed
    to ``on_end`` once by ``finish()`` — for a JSON answer before it is sent, so that a client holding the answer
    finds its record; for a stream when it has ended."""

    def __init__(self, dialect: str, upstream: str | None, limit: int,
                 on_end: Callable[[JSONObject], None] | None = None, *, model: str | None = None,
                 path: str | None = None) -> None:
        self.dialect, self.upstream, self.limit = dialect, upstream, limit
        self.model, self.path = model, path  # a Gemini body names no model: its path does
        self._on_end = on_end
        self.started = time.monotonic()
        self.status = 0
        self.stream = False
        self._events = EventStream(limit)
        self._reader = STREAMS.get(dialect, OpenAIChatStream)()
        self.body: JSON = None

    def answered(self, status: int, *, stream: bool) -> None:
        self.status, self.stream = status, stream

    def streamed(self, piece: bytes) -> None:
        for name, data in self._events.feed(piece):
            self._reader.event(name, data)

    def whole(self, data: bytes | bytearray | JSONObject | None) -> None:
        self.body = _parsed(data) if isinstance(data, (bytes, bytearray)) else data

    @property
    def usage(self) -> JSONObject | None:
        if self.stream:
            return None if self._events.overflowed else self._reader.usage
        return usage_in(self.dialect, self.body)

    def finish(self) -> None:
        on_end, self._on_end = self._on_end, None
        if on_end is not None:
            on_end(self.record())

    def record(self) -> JSONObject:
        response = (None if self._events.overflowed else self._reader.final()) if self.stream else self.body
        return {"version": 1, "upstream": self.upstream, "model": self.model, "path": self.path, "status": self.status,
                "stream": self.stream, "usage": self.usage, "response": response,
                "elapsed_ms": round((time.monotonic() - self.started) * 1000)}
