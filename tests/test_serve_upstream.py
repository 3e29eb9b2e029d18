"""``zhin serve --upstream URL``: a recorder in front of the real provider (issue 29 item 1), against real loopback
upstreams — a second ``zhin serve`` (the conformance server) and scripted HTTP servers that stream on cue, echo the
headers they got, stay silent or have stopped.

Every test has its control: the byte-identity check uses a body that re-serialising would change; the stream is
shown to arrive while the upstream is still held; the credential grep runs on a folder where the upstream did get
the key; the 502 is compared with the same proxy in front of a running upstream.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from conftest import clean_env
from serve_process import ROOT, ServeProcess, no_traceback, post, status_of, wait_for

from zhin_cli.core.errors import UsageError
from zhin_cli.tools.serve.server import make_server, running_server
from zhin_cli.tools.serve.upstream import EventStream, Exchange, parse_upstream

TIMEOUT = 20.0
CANARY = "sk-canary-7f3a9e1d5b"  # a key that must reach the upstream and nowhere else
LONG = " ".join(f"rule {i}: greet member {i} politely and keep answers short." for i in range(400))  # > 1024 tokens


def client(base_url: str, key: str = "test-key") -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=TIMEOUT,
                         http_client=openai.DefaultHttpxClient(trust_env=False, timeout=TIMEOUT))


def http() -> httpx2.Client:
    return httpx2.Client(trust_env=False, timeout=TIMEOUT)


def origin(base_url: str) -> str:
    return base_url.removesuffix("/v1")


def bodies(folder: Path) -> list[Path]:
    """The captured bodies: not their exchange records, nor the temporary file a record is being written to (there
    for a moment after a relayed stream ends)."""
    return sorted(p for p in folder.iterdir() if p.name[:1].isdigit() and p.name.endswith(".json")
                  and not p.name.endswith(".exchange.json"))


def exchange(body_file: Path) -> dict[str, Any]:
    """A body's exchange record. A relayed stream's is written once the stream has ended, which may be just after
    the client read its last event: wait for it a while (a JSON answer's is there before the answer is sent)."""
    path = body_file.with_name(body_file.name.removesuffix(".json") + ".exchange.json")
    assert wait_for(path.exists, 10), f"no exchange record {path.name}"
    record: dict[str, Any] = json.loads(path.read_text())
    return record


@contextmanager
def recorder(tmp_path: Path, upstream: str, **limits: Any) -> Iterator[tuple[str, Path, list[str]]]:
    """``zhin serve --upstream`` in a thread: (base URL, capture folder, log lines)."""
    folder, lines = tmp_path / "recorded", list[str]()
    with running_server(capture=folder, upstream=upstream, log=lines.append, **limits) as (url, _server):
        yield url, folder, lines


@contextmanager
def conformance(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The upstream: zhin serve's conformance mode, capturing what it receives."""
    folder = tmp_path / "upstream-received"
    with running_server(capture=folder) as (url, _server):
        yield url, folder


# --- scripted loopback upstreams ---------------------------------------------------------------------------------


class Scripted:
    """An HTTP server on 127.0.0.1 whose POST answer is ``script(handler, body)``; it keeps what it received and
    counts the connections it accepted."""

    def __init__(self, script: Callable[[BaseHTTPRequestHandler, bytes], None]) -> None:
        self.received: list[tuple[str, list[tuple[str, str]], bytes]] = []
        self.connections = 0
        outer = self

        class Server(ThreadingHTTPServer):
            def process_request(self, request: Any, client_address: Any) -> None:
                outer.connections += 1
                super().process_request(request, client_address)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                outer.received.append((self.path, list(self.headers.items()), body))
                script(self, body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> Scripted:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def send_json(handler: BaseHTTPRequestHandler, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
    data = json.dumps(body).encode()
    handler.send_response(status)
    for name, value in {"Content-Type": "application/json", "Content-Length": str(len(data)), **(headers or {})}.items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(data)


def sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


ANTHROPIC_EVENTS = [
    sse("message_start", {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 12, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 2048, "output_tokens": 1}}}),
    sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}),
    sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " there"}}),
    sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
    sse("content_block_start", {"type": "content_block_start", "index": 1,
                                "content_block": {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}}),
    sse("content_block_delta", {"type": "content_block_delta", "index": 1,
                                "delta": {"type": "input_json_delta", "partial_json": "{\"city\": \"横"}}),
    sse("content_block_delta", {"type": "content_block_delta", "index": 1,
                                "delta": {"type": "input_json_delta", "partial_json": "滨\"}"}}),
    sse("content_block_stop", {"type": "content_block_stop", "index": 1}),
    sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                          "usage": {"output_tokens": 9}}),
    sse("message_stop", {"type": "message_stop"}),
]
ANTHROPIC_BODY = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 64, "stream": True,
                             "messages": [{"role": "user", "content": "hi"}]}).encode()


# --- forwarding: byte for byte, both ways, usage recorded ----------------------------------------------------------


def test_a_body_reaches_the_upstream_byte_for_byte_and_its_usage_is_recorded(tmp_path: Path) -> None:
    # odd spacing, key order and escapes: a proxy that parsed and re-serialised the body would change it (control)
    sent = b'{ "messages" :[{"content":"caf\\u00e9 \xe2\x98\x95  two  spaces","role":"user"}],\n"model":"gpt-4o" }'
    assert json.dumps(json.loads(sent)).encode() != sent and json.dumps(json.loads(sent), separators=(",", ":")).encode() != sent
    with conformance(tmp_path) as (upstream_url, received), recorder(tmp_path, origin(upstream_url)) as (url, folder, lines):
        direct = http().post(upstream_url + "/chat/completions", content=sent, headers={"Content-Type": "application/json"})
        relayed = http().post(url + "/chat/completions", content=sent, headers={"Content-Type": "application/json"})
        # a JSON answer's record and log line are written before the answer is sent: there as soon as the client has it
        on_arrival = ((folder / "00001-chat-completions.exchange.json").exists(), len(lines))
    assert on_arrival == (True, 1)
    assert relayed.status_code == direct.status_code == 200
    upstream_bodies = [p.read_bytes() for p in bodies(received)]
    assert upstream_bodies == [sent, sent]  # the direct one and the forwarded one: identical bytes
    [captured] = bodies(folder)
    assert captured.name == "00001-chat-completions.json" and captured.read_bytes() == sent
    record = exchange(captured)
    answer = relayed.json()
    assert record["usage"] == answer["usage"] and record["response"] == answer  # the provider's own usage, as sent
    assert record["status"] == 200 and record["stream"] is False and record["upstream"] == origin(upstream_url)
    assert isinstance(record["elapsed_ms"], int) and record["elapsed_ms"] >= 0
    assert set(record) == {"version", "upstream", "model", "path", "status", "stream", "usage", "response", "elapsed_ms"}
    assert record["version"] == 1 and record["model"] == "gpt-4o" and record["path"] == "/v1/chat/completions"
    assert lines == [f"POST /v1/chat/completions 200 upstream gpt-4o prompt={answer['usage']['prompt_tokens']} read=0 written=-"]


def test_the_real_openai_client_through_the_recorder_streaming_and_not(tmp_path: Path) -> None:
    messages: list[Any] = [{"role": "system", "content": LONG}, {"role": "user", "content": "[id:m1] hi"}]
    with conformance(tmp_path) as (upstream_url, received), recorder(tmp_path, origin(upstream_url)) as (url, folder, lines):
        api = client(url)
        first = api.chat.completions.create(model="gpt-4o", messages=messages)
        chunks = list(api.chat.completions.create(model="gpt-4o", messages=messages, stream=True,
                                                  stream_options={"include_usage": True}))
        bare = list(api.chat.completions.create(model="gpt-4o", messages=messages, stream=True))
    assert first.usage is not None and first.usage.prompt_tokens > 1024
    streamed_usage = chunks[-1].usage
    assert streamed_usage is not None and streamed_usage.prompt_tokens_details is not None
    read = streamed_usage.prompt_tokens_details.cached_tokens
    assert read is not None and read > 0  # the upstream's prompt cache served the repeat
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == first.choices[0].message.content
    plain, streamed, no_usage = (exchange(p) for p in bodies(folder))
    assert plain["usage"] == first.usage.to_dict() and plain["response"] == first.to_dict()
    assert streamed["stream"] is True and streamed["usage"] == streamed_usage.to_dict()
    assert streamed["response"]["choices"][0]["message"] == {"role": "assistant", "content": text}
    assert streamed["response"]["choices"][0]["finish_reason"] == "stop"
    # control: a stream without include_usage carries no usage, and none is invented
    assert no_usage["stream"] is True and no_usage["usage"] is None
    assert "".join(c.choices[0].delta.content or "" for c in bare if c.choices) == text
    assert no_usage["response"]["choices"][0]["message"]["content"] == text
    assert lines[0] == f"POST /v1/chat/completions 200 upstream gpt-4o prompt={first.usage.prompt_tokens} read=0 written=-"
    # the two streams' lines (each written when its stream has ended)
    assert f"POST /v1/chat/completions 200 upstream gpt-4o prompt={streamed_usage.prompt_tokens} read={read} written=-" in lines
    assert len(lines) == 3 and sum(line.endswith(" no usage") for line in lines) == 1
    assert [p.read_bytes() for p in bodies(received)] == [p.read_bytes() for p in bodies(folder)]


def test_anthropic_and_gemini_routes_are_forwarded_with_their_usage(tmp_path: Path) -> None:
    anthropic = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 64,
                            "messages": [{"role": "user", "content": "hi"}]}).encode()
    gemini = json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}).encode()
    with conformance(tmp_path) as (upstream_url, received), recorder(tmp_path, origin(upstream_url)) as (url, folder, lines):
        base = origin(url)
        with http() as h:
            a = h.post(base + "/v1/messages", content=anthropic,
                       headers={"Content-Type": "application/json", "anthropic-version": "2023-06-01"})
            g = h.post(base + "/v1beta/models/gemini-2.5-flash:generateContent", content=gemini,
                       headers={"Content-Type": "application/json"})
    assert a.status_code == g.status_code == 200
    ra, rg = (exchange(p) for p in bodies(folder))
    assert [p.name for p in bodies(folder)] == ["00001-messages.json", "00002-v1beta-models-gemini-2-5-flash-generateContent.json"]
    assert ra["usage"] == a.json()["usage"] and "cache_read_input_tokens" in ra["usage"]
    assert rg["usage"] == g.json()["usageMetadata"] and rg["response"] == g.json()
    assert [p.read_bytes() for p in bodies(received)] == [anthropic, gemini]
    assert lines[1].startswith("POST /v1beta/models/gemini-2.5-flash:generateContent 200 upstream gemini-2.5-flash prompt=")


def test_a_stream_is_relayed_as_it_arrives_and_its_usage_read_from_its_final_events(tmp_path: Path) -> None:
    held, released = threading.Event(), threading.Event()

    def stream(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.send_header("request-id", "req_42")
        handler.end_headers()
        for index, event in enumerate(ANTHROPIC_EVENTS):
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            handler.wfile.flush()
            if index == 2:  # after the first text: hold the rest until the client has seen it
                held.set()
                released.wait(15)
        handler.wfile.write(b"0\r\n\r\n")

    with Scripted(stream) as upstream, recorder(tmp_path, upstream.url) as (url, folder, _lines), http() as h:
        seen = b""
        with h.stream("POST", origin(url) + "/v1/messages", content=ANTHROPIC_BODY,
                      headers={"Content-Type": "application/json"}) as response:
            assert response.status_code == 200 and response.headers["request-id"] == "req_42"
            pieces = response.iter_raw()
            while b"Hello" not in seen:
                seen += next(pieces)
            arrived_while_held = held.is_set() and not released.is_set()  # the upstream has not sent the rest yet
            released.set()
            for piece in pieces:
                seen += piece
    assert arrived_while_held
    assert seen == b"".join(ANTHROPIC_EVENTS)  # every byte relayed unchanged
    record = exchange(bodies(folder)[0])
    assert record["stream"] is True
    assert record["usage"] == {"input_tokens": 12, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 2048,
                               "output_tokens": 9}  # message_start's, with message_delta's final output count
    assert record["response"]["content"] == [{"type": "text", "text": "Hello there"},
                                             {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "横滨"}}]
    assert record["response"]["stop_reason"] == "tool_use"


# --- headers and credentials ---------------------------------------------------------------------------------------


def test_credentials_are_forwarded_and_written_to_no_file_and_no_log_line(tmp_path: Path) -> None:
    def echo(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        send_json(handler, 200, {"id": "x", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
                  {"x-request-id": "req_7", "Keep-Alive": "timeout=5", "Connection": "keep-alive"})

    with Scripted(echo) as upstream, recorder(tmp_path, upstream.url) as (url, folder, lines), http() as h:
        base = origin(url)
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {CANARY}", "x-api-key": CANARY,
                   "x-goog-api-key": CANARY, "anthropic-version": "2023-06-01", "anthropic-beta": "prompt-caching-2024-07-31",
                   "Connection": "close, X-Hop", "X-Hop": "dropped", "Proxy-Authorization": "Basic eHg6eXk=",
                   "Keep-Alive": "timeout=5", "X-Custom": "kept"}
        openai_answer = h.post(base + "/v1/chat/completions", content=b'{"model":"gpt-4o"}', headers=headers)
        gemini_answer = h.post(base + f"/v1beta/models/gemini-2.5-flash:generateContent?key={CANARY}&alt=json",
                               content=b'{"contents":[]}', headers={"Content-Type": "application/json"})
    assert openai_answer.status_code == gemini_answer.status_code == 200
    assert openai_answer.headers["x-request-id"] == "req_7" and "keep-alive" not in openai_answer.headers
    (path, got, _), (gemini_path, _, _) = upstream.received
    names = {name.lower(): value for name, value in got}
    # control: the upstream did get every credential and provider header
    assert names["authorization"] == f"Bearer {CANARY}" and names["x-api-key"] == names["x-goog-api-key"] == CANARY
    assert names["anthropic-version"] == "2023-06-01" and names["x-custom"] == "kept"
    assert gemini_path == f"/v1beta/models/gemini-2.5-flash:generateContent?key={CANARY}&alt=json"
    assert not {"x-hop", "proxy-authorization", "keep-alive"} & set(names) and "connection" not in names
    assert names["host"] == upstream.url.removeprefix("http://") and names["accept-encoding"] == "identity"
    written = b"".join(p.read_bytes() for p in folder.iterdir())
    assert CANARY.encode() not in written and CANARY not in "\n".join(lines)
    assert "key=***" in lines[1]  # the query's key is masked in the log line
    assert len(list(folder.iterdir())) == 4


def test_credentials_in_the_upstream_url_are_sent_as_basic_auth_and_never_shown(tmp_path: Path) -> None:
    def ok(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        send_json(handler, 200, {"usage": None})

    with Scripted(ok) as upstream:
        with_user = upstream.url.replace("http://", f"http://bot:{CANARY}@")
        with recorder(tmp_path, with_user) as (url, folder, lines), http() as h:
            h.post(url + "/chat/completions", content=b'{"model":"m"}', headers={"Content-Type": "application/json"})
            h.post(url + "/chat/completions", content=b'{"model":"m"}',
                   headers={"Content-Type": "application/json", "Authorization": "Bearer mine"})
    import base64

    sent = [{n.lower(): v for n, v in got}["authorization"] for _, got, _ in upstream.received]
    assert sent == ["Basic " + base64.b64encode(f"bot:{CANARY}".encode()).decode(), "Bearer mine"]
    assert all(exchange(p)["upstream"] == upstream.url.replace("http://", "http://***@") for p in bodies(folder))
    assert CANARY.encode() not in b"".join(p.read_bytes() for p in folder.iterdir()) and CANARY not in "".join(lines)


# --- failures: 502 quickly, 504 bounded, 4xx/5xx relayed -------------------------------------------------------------


def stopped_port() -> int:
    """A loopback port nobody listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_stopped_upstream_is_a_502_quickly_and_a_running_one_is_not(tmp_path: Path) -> None:
    body = b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}'
    with recorder(tmp_path, f"http://127.0.0.1:{stopped_port()}") as (url, folder, lines), http() as h:
        started = time.monotonic()
        answer = h.post(url + "/chat/completions", content=body, headers={"Content-Type": "application/json"})
        took = time.monotonic() - started
    assert answer.status_code == 502 and took < 10  # a generous bound: refused at once, or the 5 s connect timeout
    error = answer.json()["error"]
    assert error["type"] == "server_error" and "\n" not in error["message"]
    assert "cannot connect" in error["message"] and "ConnectionRefusedError" in error["message"]
    [captured] = bodies(folder)
    assert captured.read_bytes() == body and exchange(captured)["status"] == 502 and exchange(captured)["usage"] is None
    assert lines[0].startswith("POST /v1/chat/completions 502 upstream http://127.0.0.1:")
    with conformance(tmp_path) as (upstream_url, _), recorder(tmp_path / "b", origin(upstream_url)) as (url, _, _), http() as h:
        assert h.post(url + "/chat/completions", content=body, headers={"Content-Type": "application/json"}).status_code == 200


def test_a_silent_upstream_is_a_504_at_the_deadline(tmp_path: Path) -> None:
    def silent(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        time.sleep(5)

    with Scripted(silent) as upstream, recorder(tmp_path, upstream.url, upstream_deadline=0.5) as (url, folder, _), \
            http() as h:
        started = time.monotonic()
        answer = h.post(url + "/chat/completions", content=b'{"model":"m"}', headers={"Content-Type": "application/json"})
        took = time.monotonic() - started
    assert answer.status_code == 504 and "no answer within 0.5 s" in answer.json()["error"]["message"] and took < 4.5


def test_an_upstream_error_is_relayed_as_it_is(tmp_path: Path) -> None:
    # the conformance upstream rejects a tool call without its result exactly as OpenAI does (400 + its error body)
    broken = json.dumps({"model": "gpt-4o", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
                                                               "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "user", "content": "again"}]}).encode()
    with conformance(tmp_path) as (upstream_url, _), recorder(tmp_path, origin(upstream_url)) as (url, folder, lines), \
            http() as h:
        direct = h.post(upstream_url + "/chat/completions", content=broken, headers={"Content-Type": "application/json"})
        relayed = h.post(url + "/chat/completions", content=broken, headers={"Content-Type": "application/json"})
        wrong_type = h.post(url + "/chat/completions", content=b"[]", headers={"Content-Type": "application/json"})
    assert relayed.status_code == direct.status_code == 400 and relayed.content == direct.content
    assert wrong_type.status_code == 400  # not ours: the upstream's answer to a body that is not an object
    record = exchange(bodies(folder)[0])
    assert record["status"] == 400 and record["usage"] is None and record["response"] == direct.json()
    assert lines[0] == "POST /v1/chat/completions 400 upstream gpt-4o no usage"

    def unavailable(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        send_json(handler, 529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
                  {"retry-after": "7"})

    with Scripted(unavailable) as upstream, recorder(tmp_path / "b", upstream.url) as (url, _, _), http() as h:
        answer = h.post(origin(url) + "/v1/messages", content=ANTHROPIC_BODY, headers={"Content-Type": "application/json"})
    assert answer.status_code == 529 and answer.headers["retry-after"] == "7"
    assert answer.json()["error"]["type"] == "overloaded_error"


def test_the_servers_bounds_still_hold_in_front_of_an_upstream(tmp_path: Path) -> None:
    with conformance(tmp_path) as (upstream_url, received), recorder(tmp_path, origin(upstream_url)) as (url, folder, _):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        too_big = post(port, b"", headers={"Content-Length": str(64 * 1024 * 1024 + 1)})
        foreign = post(port, b'{"model":"m"}', headers={"Host": "evil.example"})
        unknown = post(port, b'{"model":"m"}', path="/v1/completions")
        good = post(port, b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}')
    assert [status_of(a) for a in (too_big, foreign, unknown, good)] == [413, 403, 404, 200]
    assert len(bodies(received)) == 1  # only the good one reached the upstream (control: it did)


# --- the conformance mode writes the same record --------------------------------------------------------------------


def test_the_conformance_mode_writes_the_same_exchange_record_with_its_simulated_usage(tmp_path: Path) -> None:
    messages: list[Any] = [{"role": "user", "content": "hi"}]
    with conformance(tmp_path) as (url, folder):
        api = client(url)
        plain = api.chat.completions.create(model="gpt-4o", messages=messages)
        chunks = list(api.chat.completions.create(model="gpt-4o", messages=messages, stream=True,
                                                  stream_options={"include_usage": True}))
        # written before the answer (a stream: before its last event) leaves: there as soon as the client has it
        assert sorted(p.name for p in folder.iterdir() if p.name.endswith(".exchange.json")) == [
            "00001-chat-completions.exchange.json", "00002-chat-completions.exchange.json"]
        with pytest.raises(openai.BadRequestError):
            api.chat.completions.create(model="gpt-4o", messages=[{"role": "tool", "content": "x", "tool_call_id": "c"}])
    first, second, third = (exchange(p) for p in bodies(folder))
    assert first["upstream"] is None and first["status"] == 200 and first["stream"] is False
    assert plain.usage is not None and first["usage"]["prompt_tokens"] == plain.usage.prompt_tokens
    assert first["response"]["choices"][0]["message"]["content"] == plain.choices[0].message.content
    assert chunks[-1].usage is not None and second["usage"] == chunks[-1].usage.to_dict() and second["stream"] is True
    assert second["response"]["choices"][0]["message"]["content"] == plain.choices[0].message.content
    assert third["status"] == 400 and third["usage"] is None and "error" in third["response"]
    assert set(first) == set(second) == set(third) == {"version", "upstream", "model", "path", "status", "stream",
                                                       "usage", "response", "elapsed_ms"}
    assert first["model"] == "gpt-4o" and first["path"] == "/v1/chat/completions"


# --- the command line -------------------------------------------------------------------------------------------------


def run_zhin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "zhin_cli", *args], cwd=ROOT, env=clean_env(), capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize(("args", "says"), [
    (["--upstream", "https://api.openai.com"], "--capture DIR"),
    (["--upstream", "https://api.openai.com/v1", "--capture", "x"], "give the origin without it (https://api.openai.com)"),
    (["--upstream", "ftp://host", "--capture", "x"], "http:// or https://"),
    (["--upstream", "http://[::1", "--capture", "x"], "is not a URL"),
])
def test_a_bad_upstream_is_one_line_and_exit_2(args: list[str], says: str, tmp_path: Path) -> None:
    result = run_zhin("serve", "--port", "0", *[str(tmp_path / a) if a == "x" else a for a in args])
    assert result.returncode == 2 and says in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("zhin: error: ")
    assert not (tmp_path / "x").exists()  # nothing written


def test_parse_upstream_keeps_a_gateway_prefix_and_masks_what_it_shows() -> None:
    gateway = parse_upstream("https://user:pw@openrouter.ai/api?token=abc&region=eu")
    assert gateway.target("/v1/chat/completions?x=1") == "/api/v1/chat/completions?token=abc&region=eu&x=1"
    assert gateway.shown == "https://***@openrouter.ai/api?token=***&region=eu" and gateway.port == 443
    with pytest.raises(UsageError):
        parse_upstream("http://127.0.0.1:8080/v1beta/")
    with pytest.raises(UsageError, match="--capture"):
        make_server(upstream="http://127.0.0.1:1")


def test_the_cli_records_in_front_of_another_zhin_serve_and_stops_cleanly(tmp_path: Path) -> None:
    folder = tmp_path / "recorded"
    with ServeProcess("--capture", str(tmp_path / "upstream")) as upstream, \
            ServeProcess("--upstream", origin(upstream.base_url).replace("http://", f"http://k:{CANARY}@"),
                         "--capture", str(folder)) as proxy:
        answer = client(proxy.base_url, CANARY).chat.completions.create(model="gpt-4o",
                                                                        messages=[{"role": "user", "content": "hi"}])
        assert answer.usage is not None
        assert proxy.stop() == 0 and upstream.stop() == 0
    assert "forwarding to http://***@127.0.0.1:" in proxy.ready_line and CANARY not in proxy.ready_line + proxy.stderr
    assert re.search(r"zhin serve: POST /v1/chat/completions 200 upstream gpt-4o prompt=\d+ read=0 written=-", proxy.stderr)
    no_traceback(proxy.stderr + upstream.stderr)
    [captured] = bodies(folder)
    assert exchange(captured)["usage"]["prompt_tokens"] == answer.usage.prompt_tokens
    assert CANARY.encode() not in b"".join(p.read_bytes() for p in folder.iterdir())


# --- the event-stream reader ---------------------------------------------------------------------------------------------


def test_events_split_anywhere_and_in_any_line_ending_are_read_whole() -> None:
    stream = b"".join(ANTHROPIC_EVENTS)
    for ending in (b"\n", b"\r\n"):
        text = stream.replace(b"\n", ending)
        for size in (1, 7, 4096):
            reader = EventStream(1 << 20)
            events = [e for i in range(0, len(text), size) for e in reader.feed(text[i : i + size])]
            assert [name for name, _ in events] == [e.split(b"\n")[0].removeprefix(b"event: ").decode()
                                                   for e in ANTHROPIC_EVENTS]
    over = EventStream(100)
    assert over.feed(stream) == [] and over.overflowed  # past its limit it stops reading (the client still gets it all)


def test_openai_tool_call_deltas_are_reassembled_into_the_message() -> None:
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4.1-mini"}
    chunks = [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": None,
                                                    "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                                                    "function": {"name": "weather", "arguments": ""}}]}}]},
        {**head, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]}}]},
        {**head, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"横滨\"}"}}]}}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {**head, "choices": [], "usage": {"prompt_tokens": 2781, "completion_tokens": 9,
                                          "prompt_tokens_details": {"cached_tokens": 1920}}},
    ]
    record = Exchange("openai-chat", "https://api.openai.com", 1 << 20)
    record.answered(200, stream=True)
    for chunk in chunks:
        record.streamed(f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode())
    record.streamed(b"data: [DONE]\n\n")
    result = record.record()
    assert result["usage"] == chunks[-1]["usage"]
    [choice] = result["response"]["choices"]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    assert choice["message"]["tool_calls"] == [{"id": "call_1", "type": "function",
                                                "function": {"name": "weather", "arguments": "{\"city\":\"横滨\"}"}}]
    assert result["response"]["model"] == "gpt-4.1-mini" and result["response"]["object"] == "chat.completion"


def test_a_gemini_stream_from_the_conformance_upstream_is_recorded_with_its_usage_metadata(tmp_path: Path) -> None:
    body = json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "stream": True}).encode()
    with conformance(tmp_path) as (upstream_url, _), recorder(tmp_path, origin(upstream_url)) as (url, folder, lines), \
            http() as h:
        answer = h.post(origin(url) + "/v1beta/models/gemini-2.5-flash:generateContent", content=body,
                        headers={"Content-Type": "application/json"})
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
    [event] = [json.loads(line.removeprefix("data: ")) for line in answer.text.splitlines() if line.startswith("data: ")]
    record = exchange(bodies(folder)[0])
    assert record["stream"] is True and record["usage"] == event["usageMetadata"]
    assert record["response"]["candidates"][0]["content"]["parts"] == event["candidates"][0]["content"]["parts"]
    assert lines[0].endswith(f"prompt={event['usageMetadata']['promptTokenCount']} read=- written=-")  # Gemini omits a 0 read


def test_a_client_that_leaves_mid_stream_ends_the_relay_and_its_exchange_is_still_written(tmp_path: Path) -> None:
    upstream_gone = threading.Event()

    def endless(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        try:
            for _ in range(600):  # 30 s at most
                handler.wfile.write(ANTHROPIC_EVENTS[2])
                handler.wfile.flush()
                time.sleep(0.05)
        except OSError:
            upstream_gone.set()  # the recorder closed its upstream connection once the client had left

    with Scripted(endless) as upstream, recorder(tmp_path, upstream.url) as (url, folder, lines):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
            sock.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(ANTHROPIC_BODY), ANTHROPIC_BODY))
            assert b"text_delta" in sock.recv(65536) or b"text_delta" in sock.recv(65536)
        assert upstream_gone.wait(20)
        deadline = time.monotonic() + 10
        while not lines and time.monotonic() < deadline:
            time.sleep(0.05)
    assert "the client went away" in lines[0]
    record = exchange(bodies(folder)[0])
    assert record["status"] == 200 and record["stream"] is True


def test_connections_to_the_upstream_are_kept_alive_and_a_stale_one_is_replaced(tmp_path: Path) -> None:
    silently_close = threading.Event()

    def answer(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        send_json(handler, 200, {"usage": {"prompt_tokens": 1}})
        if silently_close.is_set():  # an upstream that drops idle connections without saying so
            handler.close_connection = True

    body = b'{"model":"m"}'
    with Scripted(answer) as upstream, recorder(tmp_path, upstream.url) as (url, folder, _), http() as h:
        for _ in range(5):
            assert h.post(url + "/chat/completions", content=body, headers={"Content-Type": "application/json"}).status_code == 200
        kept = upstream.connections
        silently_close.set()
        answers = [h.post(url + "/chat/completions", content=body, headers={"Content-Type": "application/json"}).status_code
                   for _ in range(3)]
    assert kept == 1  # five requests, one connection
    # the first of the three still uses the kept connection, which the upstream then drops; the next two each find
    # their kept connection gone, and are sent once more on a new one (control: each costs a connection)
    assert answers == [200, 200, 200] and upstream.connections == 3
    assert len(upstream.received) == 8 and len(bodies(folder)) == 8  # nothing sent twice to the upstream


def test_a_header_the_upstream_cannot_be_sent_is_a_502_not_a_dropped_connection(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import http.client

    original = http.client.HTTPConnection.putheader

    def strict(self: http.client.HTTPConnection, header: str, *values: Any) -> None:
        if header.lower() == "x-bad":  # what http.client says of a value it will not send
            raise ValueError(f"Invalid header value {values[0]!r}")
        original(self, header, *values)

    monkeypatch.setattr(http.client.HTTPConnection, "putheader", strict)

    def ok(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        send_json(handler, 200, {"usage": None})

    with Scripted(ok) as upstream, recorder(tmp_path, upstream.url) as (url, folder, _):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        refused = post(port, b'{"model":"m"}', headers={"X-Bad": "x"})
        control = post(port, b'{"model":"m"}', headers={"X-Good": "x"})
    assert status_of(control) == 200 and len(upstream.received) == 1
    assert status_of(refused) == 502 and b"no answer (ValueError: Invalid header value" in refused
    assert exchange(bodies(folder)[0])["status"] == 502


def test_an_https_upstream_is_verified_against_the_trust_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ssl

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)

    def ok(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        send_json(handler, 200, {"usage": {"prompt_tokens": 5, "completion_tokens": 1}})

    body = b'{"model":"gpt-4o"}'
    with Scripted(ok) as upstream:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        upstream.server.socket = context.wrap_socket(upstream.server.socket, server_side=True)
        secure = upstream.url.replace("http://", "https://")
        with recorder(tmp_path / "untrusted", secure) as (url, _, _), http() as h:
            untrusted = h.post(url + "/chat/completions", content=body, headers={"Content-Type": "application/json"})
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # OpenSSL's default trust store, read per connection
        with recorder(tmp_path / "trusted", secure) as (url, folder, _), http() as h:
            trusted = h.post(url + "/chat/completions", content=body, headers={"Content-Type": "application/json"})
    assert untrusted.status_code == 502 and "CERTIFICATE_VERIFY_FAILED" in untrusted.json()["error"]["message"]
    assert trusted.status_code == 200 and [b for _, _, b in upstream.received] == [body]  # control: trusted, it goes through
    assert exchange(bodies(folder)[0])["usage"] == {"prompt_tokens": 5, "completion_tokens": 1}
