"""``zhin serve`` — a loopback conformance server that answers like the real chat APIs, offline.

Point a bot (or the real ``openai`` client) at it and every request is checked the way the provider checks it:

* ``POST /v1/chat/completions`` speaks OpenAI Chat Completions with the ``--provider`` profile;
  ``POST /v1/messages`` speaks Anthropic Messages with the ``anthropic`` profile. The path → (dialect, profile)
  mapping is data (``ENDPOINTS``); a profile that is not registered answers 404 in the dialect's error envelope.
* The profile's validator (``zhin_cli.validate``) runs on the body; a rejection is answered with the validator's
  status and exact error body, as the real API would.
* Otherwise the answer is a deterministic completion (``ok <hash of the request>``) whose ``usage`` is each API's
  real shape, with cache counts from the server's own prefix cache under the profile's ``CacheRules``:

  - ``automatic`` (OpenAI, DeepSeek): the prompt's prefix-relevant serialization (tools, then messages, each a
    canonical JSON block) is tokenized with ``TokenCounter``; the hit is the longest common token prefix with the
    last 64 requests for the same profile and model, 0 below ``min_tokens``, else rounded down to
    ``step_tokens`` (OpenAI: 1024 / 128).
  - ``explicit`` (Anthropic): blocks in cache order tools → system → messages, ``cache_control`` markers removed
    from the text (moving a breakpoint does not change the prefix). Each breakpoint of a request writes an entry
    for the byte-identical prefix up to it (if at least ``min_tokens``); a later request reads the longest stored
    prefix that ends at one of its block boundaries within 20 blocks before one of its breakpoints
    (providers.md §2.5). Nothing after the last breakpoint is cached: ``input_tokens`` is that remainder.
    A partial match that ends mid-block is *not* a hit, as with the real API.
  - ``none``: never a hit.

  Token counts are the server's own (tiktoken over that serialization, o200k for models tiktoken does not know,
  Claude included): consistent between requests, not the provider's exact billing count.
* Malformed JSON, a missing model and unknown paths are answered in the dialect's error envelope. Requests with
  ``"stream": true`` get a server-sent-event stream in the API's event format.

With ``capture`` (``--capture DIR``) every POST body is written to ``DIR/NNNNN-<route>.json`` exactly as received
(bytes, before any check), so any client — a SillyTavern install, the upstream bot, a script — can be compared
with what this assembler sends (``zhin request-diff``). Headers are never written: they carry the API key.

The server binds to loopback only. ``running_server()`` runs one in a thread for tests; ``serve()`` runs one in
the foreground for the CLI.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
import socket
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from zhin_cli.errors import UsageError, ZhinError
from zhin_cli.prefixdiff import common_prefix_length
from zhin_cli.providers import PROFILES, CacheRules, resolve_profile
from zhin_cli.tokens import TokenCounter, encoding_for_model
from zhin_cli.validate import VALIDATORS, validate

STORE_SIZE = 64  # requests remembered per server (automatic caching); explicit entries: 4 per request
LOOKBACK_BLOCKS = 20  # how far back an Anthropic breakpoint looks for an earlier cache entry (providers.md §2.5)
MAX_BODY = 64 * 1024 * 1024

Log = Callable[[str], None]


# --- the prefix the cache sees -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrefixPlan:
    """A request's prefix-relevant serialization: blocks in cache order, and explicit breakpoints."""

    blocks: list[str]
    breakpoints: list[tuple[int, str]] = field(default_factory=list)  # (block index, ttl) of cache_control markers


@dataclass(frozen=True)
class CacheOutcome:
    prompt_tokens: int
    read: int = 0
    written: int = 0
    written_by_ttl: dict[str, int] = field(default_factory=dict)

    @property
    def uncached(self) -> int:
        return self.prompt_tokens - self.read - self.written


def _canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


class PrefixCache:
    """The server's prompt cache: bounded, thread-safe, keyed by (profile, model)."""

    def __init__(self, size: int = STORE_SIZE) -> None:
        self._lock = threading.Lock()
        self._sequences: deque[tuple[Hashable, tuple[int, ...]]] = deque(maxlen=size)
        self._entries: OrderedDict[tuple[Hashable, str], int] = OrderedDict()
        self._max_entries = size * 4

    def account(self, key: Hashable, plan: PrefixPlan, counter: TokenCounter, rules: CacheRules) -> CacheOutcome:
        encoded = [tuple(counter.encode(block)) for block in plan.blocks]
        total = sum(map(len, encoded))
        step = max(rules.step_tokens, 1)
        if rules.mechanism == "automatic":
            return self._automatic(key, tuple(t for block in encoded for t in block), rules.min_tokens, step)
        if rules.mechanism == "explicit":
            return self._explicit(key, plan, [len(block) for block in encoded], rules.min_tokens, step)
        return CacheOutcome(prompt_tokens=total)

    def _automatic(self, key: Hashable, tokens: tuple[int, ...], min_tokens: int, step: int) -> CacheOutcome:
        with self._lock:
            shared = max((common_prefix_length(tokens, earlier) for k, earlier in self._sequences if k == key), default=0)
            self._sequences.append((key, tokens))
        read = 0 if shared < min_tokens else shared // step * step
        return CacheOutcome(prompt_tokens=len(tokens), read=read)

    def _explicit(self, key: Hashable, plan: PrefixPlan, lengths: list[int], min_tokens: int, step: int) -> CacheOutcome:
        ends: list[int] = []  # token offset at the end of each block
        digests: list[str] = []  # hash of the exact text up to the end of each block
        running, position = hashlib.sha256(), 0
        for block, length in zip(plan.blocks, lengths, strict=True):
            running.update(block.encode("utf-8") + b"\x00")
            digests.append(running.hexdigest())
            position += length
            ends.append(position)
        total = position
        breakpoints = sorted({index: ttl for index, ttl in plan.breakpoints}.items())
        if not breakpoints:
            return CacheOutcome(prompt_tokens=total)
        candidates = {j for index, _ in breakpoints for j in range(max(0, index - LOOKBACK_BLOCKS + 1), index + 1)}
        with self._lock:
            hits = [j for j in candidates if (key, digests[j]) in self._entries]
            read_block = max(hits, key=lambda j: ends[j], default=None)
            if read_block is not None:
                self._entries.move_to_end((key, digests[read_block]))
            for index, _ in breakpoints:
                if ends[index] >= min_tokens:
                    self._entries[(key, digests[index])] = ends[index]
                    self._entries.move_to_end((key, digests[index]))
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)
        read = 0 if read_block is None or ends[read_block] < min_tokens else ends[read_block] // step * step
        last_end = ends[breakpoints[-1][0]]
        if last_end < min_tokens or last_end <= read:
            return CacheOutcome(prompt_tokens=total, read=read)
        by_ttl: dict[str, int] = {}
        start = read
        for index, ttl in breakpoints:
            if ends[index] > start:
                by_ttl[ttl] = by_ttl.get(ttl, 0) + ends[index] - start
                start = ends[index]
        return CacheOutcome(prompt_tokens=total, read=read, written=last_end - read, written_by_ttl=by_ttl)


# --- dialects: how each API shapes its prefix, errors and answers ----------------------------------------------


@dataclass(frozen=True)
class Dialect:
    name: str
    plan: Callable[[dict[str, Any]], PrefixPlan]
    error: Callable[[int, str], dict[str, Any]]  # (status, message) → the API's error body
    completion: Callable[[dict[str, Any], str, str, CacheOutcome, int], dict[str, Any]]
    stream: Callable[[dict[str, Any], str, str, CacheOutcome, int], Iterator[bytes]]
    missing_model: str


DIALECTS: dict[str, Dialect] = {}


def register_dialect(dialect: Dialect) -> Dialect:
    DIALECTS[dialect.name] = dialect
    return dialect


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


_TRANSPORT_FIELDS = ("stream", "stream_options")  # how the answer is delivered, not what is asked


def _digest(body: Mapping[str, Any]) -> str:
    """Hash of what the request asks (the same conversation streamed or not gets the same reply)."""
    asked = {k: v for k, v in body.items() if k not in _TRANSPORT_FIELDS}
    return hashlib.sha256(_canonical(asked).encode("utf-8")).hexdigest()


# OpenAI Chat Completions

_OPENAI_ERROR_TYPES = {400: "invalid_request_error", 404: "invalid_request_error", 413: "invalid_request_error"}


def _openai_error(status: int, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": _OPENAI_ERROR_TYPES.get(status, "server_error"), "param": None, "code": None}}


def _list(body: Mapping[str, Any], key: str) -> list[Any]:
    value = body.get(key)
    return value if isinstance(value, list) else []


def _openai_plan(body: dict[str, Any]) -> PrefixPlan:
    return PrefixPlan([f"tool {_canonical(t)}" for t in _list(body, "tools")]
                      + [f"message {_canonical(m)}" for m in _list(body, "messages")])


def _openai_usage(cache: CacheOutcome, output_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": cache.prompt_tokens,
        "completion_tokens": output_tokens,
        "total_tokens": cache.prompt_tokens + output_tokens,
        "prompt_tokens_details": {"cached_tokens": cache.read, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                      "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
    }


def _openai_head(body: dict[str, Any], model: str, kind: str) -> dict[str, Any]:
    return {"id": f"chatcmpl-{_digest(body)[:24]}", "object": kind, "created": int(time.time()), "model": model,
            "service_tier": "default", "system_fingerprint": "fp_zhin_serve"}


def _openai_completion(body: dict[str, Any], model: str, text: str, cache: CacheOutcome, output_tokens: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None, "annotations": []}
    return {**_openai_head(body, model, "chat.completion"),
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}],
            "usage": _openai_usage(cache, output_tokens)}


def _openai_stream(body: dict[str, Any], model: str, text: str, cache: CacheOutcome, output_tokens: int) -> Iterator[bytes]:
    head = _openai_head(body, model, "chat.completion.chunk")
    options = body.get("stream_options")
    with_usage = isinstance(options, dict) and options.get("include_usage") is True
    extra: dict[str, Any] = {"usage": None} if with_usage else {}
    for delta, finish in (({"role": "assistant", "content": "", "refusal": None}, None), ({"content": text}, None), ({}, "stop")):
        yield _sse({**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], **extra})
    if with_usage:
        yield _sse({**head, "choices": [], "usage": _openai_usage(cache, output_tokens)})
    yield b"data: [DONE]\n\n"


register_dialect(Dialect("openai-chat", _openai_plan, _openai_error, _openai_completion, _openai_stream,
                         missing_model="you must provide a model parameter"))


# Anthropic Messages

_ANTHROPIC_ERROR_TYPES = {400: "invalid_request_error", 404: "not_found_error", 413: "request_too_large"}


def _anthropic_error(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": _ANTHROPIC_ERROR_TYPES.get(status, "api_error"), "message": message}}


def _without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_cache_control(v) for v in value]
    return value


def _cache_marker(value: Any) -> dict[str, Any] | None:
    """The first cache_control marker in a block (on it or on a nested block, e.g. inside tool_result content)."""
    if isinstance(value, dict):
        marker = value.get("cache_control")
        if isinstance(marker, dict):
            return marker
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            found = _cache_marker(item)
            if found is not None:
                return found
    return None


def _anthropic_plan(body: dict[str, Any]) -> PrefixPlan:
    blocks: list[str] = []
    breakpoints: list[tuple[int, str]] = []

    def add(prefix: str, block: Any) -> None:
        marker = _cache_marker(block)
        if marker is not None:
            breakpoints.append((len(blocks), str(marker.get("ttl") or "5m")))
        blocks.append(prefix + _canonical(_without_cache_control(block)))

    for tool in _list(body, "tools"):
        add("tool ", tool)
    system = body.get("system")
    for block in system if isinstance(system, list) else ([system] if system is not None else []):
        add("system ", block)
    for message in _list(body, "messages"):
        role = message.get("role") if isinstance(message, dict) else None
        content = message.get("content") if isinstance(message, dict) else message
        for index, block in enumerate(content if isinstance(content, list) else [content]):
            add(f"\n{role} " if index == 0 else "+ ", block)
    automatic = body.get("cache_control")  # top-level: a marker on the last cacheable block
    if isinstance(automatic, dict) and blocks:
        breakpoints.append((len(blocks) - 1, str(automatic.get("ttl") or "5m")))
    return PrefixPlan(blocks, breakpoints)


def _anthropic_usage(cache: CacheOutcome, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": cache.uncached,
        "cache_creation_input_tokens": cache.written,
        "cache_read_input_tokens": cache.read,
        "cache_creation": {"ephemeral_5m_input_tokens": cache.written_by_ttl.get("5m", 0),
                           "ephemeral_1h_input_tokens": cache.written_by_ttl.get("1h", 0)},
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def _anthropic_message(body: dict[str, Any], model: str, content: list[dict[str, Any]], stop: str | None,
                       usage: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"msg_{_digest(body)[:24]}", "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop, "stop_sequence": None, "usage": usage}


def _anthropic_completion(body: dict[str, Any], model: str, text: str, cache: CacheOutcome, output_tokens: int) -> dict[str, Any]:
    return _anthropic_message(body, model, [{"type": "text", "text": text}], "end_turn", _anthropic_usage(cache, output_tokens))


def _anthropic_stream(body: dict[str, Any], model: str, text: str, cache: CacheOutcome, output_tokens: int) -> Iterator[bytes]:
    start = _anthropic_message(body, model, [], None, _anthropic_usage(cache, 1))
    yield _sse({"type": "message_start", "message": start}, "message_start")
    yield _sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}, "content_block_start")
    yield _sse({"type": "ping"}, "ping")
    yield _sse({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}, "content_block_delta")
    yield _sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
    yield _sse({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": output_tokens}}, "message_delta")
    yield _sse({"type": "message_stop"}, "message_stop")


register_dialect(Dialect("anthropic-messages", _anthropic_plan, _anthropic_error, _anthropic_completion, _anthropic_stream,
                         missing_model="model: Field required"))


# --- endpoints -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    dialect: str  # a DIALECTS key; also the wire a profile must speak to serve it
    profile: str | None = None  # None: the server's --provider profile


ENDPOINTS: dict[str, Endpoint] = {
    "/v1/chat/completions": Endpoint("openai-chat"),
    "/v1/messages": Endpoint("anthropic-messages", profile="anthropic"),
}


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict[str, Any] | None = None
    events: Iterator[bytes] | None = None  # a server-sent-event stream instead of a JSON body
    note: str = ""  # for the request log


def answer(path: str, raw: bytes, *, provider: str, cache: PrefixCache, method: str = "POST") -> Reply:
    """Everything the server does for one request, as data (the HTTP handler only writes it out)."""
    route = path.split("?", 1)[0]
    endpoint = ENDPOINTS.get(route)
    if endpoint is None or method != "POST":
        return Reply(404, _openai_error(404, f"Invalid URL ({method} {route})"), note="unknown path")
    dialect = DIALECTS[endpoint.dialect]
    if len(raw) > MAX_BODY:
        return Reply(413, dialect.error(413, f"zhin serve: request body over {MAX_BODY} bytes"))
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        return Reply(400, dialect.error(400, f"zhin serve: the request body is not valid JSON ({error})"), note="bad JSON")
    if not isinstance(body, dict):
        return Reply(400, dialect.error(400, f"zhin serve: the request body must be a JSON object, got {type(body).__name__}"),
                     note="bad JSON")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return Reply(400, dialect.error(400, dialect.missing_model), note="no model")
    name = endpoint.profile or provider
    if name not in PROFILES:
        return Reply(404, dialect.error(404, f"zhin serve: no provider profile {name!r} is registered, so POST {route} cannot be "
                                             f"checked (known: {', '.join(sorted(PROFILES))})"), note=f"no profile {name}")
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
    counter = TokenCounter(encoding_for_model(model))
    outcome = cache.account((profile.name, model), dialect.plan(body), counter, profile.cache)
    text = f"ok {_digest(body)[:8]}"
    output_tokens = counter.count(text)
    note = f"{profile.name} {model} prompt={outcome.prompt_tokens} read={outcome.read} written={outcome.written}"
    if body.get("stream") is True:
        return Reply(200, events=dialect.stream(body, model, text, outcome, output_tokens), note=note)
    return Reply(200, dialect.completion(body, model, text, outcome, output_tokens), note=note)


# --- HTTP ------------------------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    server: ConformanceServer
    server_version = "zhin-serve"
    protocol_version = "HTTP/1.0"  # one request per connection: nothing lingers after shutdown

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        self._respond("POST", self._read_body())

    def do_GET(self) -> None:  # noqa: N802
        self._respond("GET", b"")

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            data = bytearray()
            while len(data) <= MAX_BODY:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                data += self.rfile.read(size)
                self.rfile.readline()
            return bytes(data)
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        return self.rfile.read(min(max(length, 0), MAX_BODY + 1)) if length else b""

    def _respond(self, method: str, raw: bytes) -> None:
        if method == "POST" and self.server.capture is not None:
            self.server.capture.write(self.path, raw, self.server.log)
        try:
            reply = answer(self.path, raw, provider=self.server.provider, cache=self.server.cache, method=method)
        except ValueError as error:  # e.g. a malformed chunk size
            reply = Reply(400, _openai_error(400, f"zhin serve: {error}"))
        self.send_response(reply.status)
        if reply.events is not None:
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            for chunk in reply.events:
                self.wfile.write(chunk)
                self.wfile.flush()
        else:
            data = json.dumps(reply.body, ensure_ascii=False).encode("utf-8")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        if self.server.log:
            self.server.log(f"{method} {self.path} {reply.status} {reply.note}".rstrip())

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 — we log one line per answer instead
        pass


class Capture:
    """Writes request bodies as received, numbered in arrival order, after any already in the folder."""

    def __init__(self, folder: Path) -> None:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ZhinError(f"cannot create the capture folder: {error.strerror or error}", where=str(folder)) from None
        if not folder.is_dir():
            raise ZhinError("the capture folder is not a folder", where=str(folder))
        self.folder = folder
        numbers = [int(p.name[:5]) for p in folder.glob("[0-9][0-9][0-9][0-9][0-9]-*.json")]
        self.next = max(numbers, default=0) + 1
        self.lock = threading.Lock()

    def write(self, path: str, raw: bytes, log: Log | None = None) -> Path | None:
        route = re.sub(r"[^A-Za-z0-9]+", "-", path.split("?", 1)[0].removeprefix("/v1/")).strip("-") or "root"
        with self.lock:
            target = self.folder / f"{self.next:05d}-{route}.json"
            self.next += 1
        try:
            target.write_bytes(raw)
        except OSError as error:  # a full disk must not take the server down: say so per request
            if log:
                log(f"capture failed: {target}: {error.strerror or error}")
            return None
        return target


class ConformanceServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], provider: str, log: Log | None = None, capture: Path | None = None) -> None:
        self.provider = provider
        self.cache = PrefixCache()
        self.log = log
        self.capture = Capture(capture) if capture is not None else None
        super().__init__(address, _Handler)

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        host = str(host)
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/v1"


class _ConformanceServer6(ConformanceServer):
    address_family = socket.AF_INET6


def loopback_host(host: str) -> str:
    """The address to bind for ``host``; anything that is not loopback is a usage error."""
    if host.lower() == "localhost":
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        address = None
    if address is None or not address.is_loopback:
        raise UsageError(f"--host {host!r} is not a loopback address; zhin serve only listens on 127.0.0.1, ::1 or localhost")
    return str(address)


def make_server(provider: str = "openai", host: str = "127.0.0.1", port: int = 0, log: Log | None = None,
                capture: Path | None = None) -> ConformanceServer:
    """A bound (not yet serving) server; checks the host and that ``provider`` can serve the endpoints that use it."""
    address = loopback_host(host)
    if provider not in PROFILES:
        raise UsageError(f"unknown provider {provider!r} (known: {', '.join(sorted(PROFILES))})")
    for route, endpoint in ENDPOINTS.items():
        if endpoint.profile is None and PROFILES[provider].wire != endpoint.dialect:
            raise UsageError(f"provider {provider!r} speaks {PROFILES[provider].wire}, but POST {route} needs an "
                             f"{endpoint.dialect} profile")
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port} is out of range (0-65535; 0 picks a free port)")
    server_class = _ConformanceServer6 if ":" in address else ConformanceServer
    try:
        return server_class((address, port), provider, log, capture)
    except OSError as error:
        raise ZhinError(f"cannot listen on {address}:{port}: {error.strerror or error}") from None


@contextmanager
def running_server(provider: str = "openai", port: int = 0, host: str = "127.0.0.1",
                   log: Log | None = None, capture: Path | None = None) -> Iterator[tuple[str, ConformanceServer]]:
    """Run a server in a background thread; yields ``(base_url, server)`` and shuts it down on exit."""
    server = make_server(provider, host, port, log, capture)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="zhin-serve", daemon=True)
    thread.start()
    try:
        yield server.base_url, server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def serve(provider: str = "openai", host: str = "127.0.0.1", port: int = 0, *,
          on_ready: Callable[[str], None] | None = None, log: Log | None = None, capture: Path | None = None) -> None:
    """Serve in the foreground until Ctrl-C (which returns normally)."""
    server = make_server(provider, host, port, log, capture)
    try:
        if on_ready:
            on_ready(server.base_url)
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
