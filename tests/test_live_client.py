"""``LiveModel``: the real ``openai`` client over real HTTP against a scripted loopback server (no llama.cpp).

Each test starts its own ``http.server`` on 127.0.0.1 port 0 in a thread. The server answers from a script
(a list of replies, the last one repeated) and records every request it got, so the tests can count attempts,
read the exact body and headers, and time the retries.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, clean_env

from zhin_cli.core.errors import EXIT_CANNOT_RUN, ZhinError
from zhin_cli.tools.eval.live import (
    LOCAL_PLACEHOLDER_KEY,
    LiveModel,
    LiveModelError,
    cache_key,
    default_cache_dir,
    is_loopback_url,
)

SECRET = "sk-zhin-test-SECRET-0123456789abcdef"
BODY: dict[str, Any] = {
    "model": "gpt-4o",
    "messages": [{"role": "system", "content": "You are Zhin."}, {"role": "user", "content": "[id:m1] hi"}],
}


def completion(text: str = "hello there", prompt_tokens: int = 12, completion_tokens: int = 3) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "served-model",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


@dataclass
class Reply:
    status: int = 200
    body: Any = field(default_factory=completion)
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    echo_auth: bool = False  # put the Authorization header into the error message (a careless server)


@dataclass
class Seen:
    at: float
    path: str
    headers: dict[str, str]
    body: Any


class ScriptedServer:
    def __init__(self, script: list[Reply]) -> None:
        self.script = script
        self.seen: list[Seen] = []
        self.lock = threading.Lock()

    def next_reply(self) -> Reply:
        with self.lock:
            index = min(len(self.seen) - 1, len(self.script) - 1)
            return self.script[index]

    @property
    def count(self) -> int:
        return len(self.seen)


def _handler(state: ScriptedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args: Any) -> None:
            pass

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with state.lock:
                state.seen.append(Seen(time.monotonic(), self.path, {k.lower(): v for k, v in self.headers.items()},
                                       json.loads(raw or b"null")))
            reply = state.next_reply()
            if reply.delay:
                time.sleep(reply.delay)
            body = reply.body
            if reply.echo_auth:
                body = {"error": {"message": f"bad credentials: {self.headers.get('Authorization')}", "type": "invalid_request_error"}}
            data = json.dumps(body).encode()
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test)

    return Handler


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[ThreadingHTTPServer] = []

    def start(*script: Reply) -> tuple[str, ScriptedServer]:
        state = ScriptedServer(list(script) or [Reply()])
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/v1", state

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def model(base_url: str, tmp_path: Path, **kwargs: Any) -> LiveModel:
    kwargs.setdefault("api_key", SECRET)
    kwargs.setdefault("cache_dir", tmp_path / "cache")
    kwargs.setdefault("timeout", 10.0)
    return LiveModel(base_url=base_url, **kwargs)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- the request and the reply ----------------------------------------------------------------------------------


def test_sends_the_assembled_body_and_returns_text_and_usage(serve: Any, tmp_path: Path) -> None:
    url, server = serve(Reply(body=completion("Paris.", 21, 2)))
    body = {**BODY, "tools": [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}],
            "stream": True}
    reply = model(url, tmp_path, model="smollm2").complete(body, seed=7)
    assert reply.text == "Paris." and not reply.cached and reply.latency_ms > 0
    assert reply.usage == {"prompt_tokens": 21, "completion_tokens": 2, "total_tokens": 23}
    [seen] = server.seen
    assert seen.path == "/v1/chat/completions"
    # exactly what zhin assembled, with the model override and the seed; never a streamed answer
    assert seen.body == {"model": "smollm2", "messages": BODY["messages"], "tools": body["tools"], "seed": 7}
    assert seen.headers["authorization"] == f"Bearer {SECRET}"


def test_base_url_and_key_come_from_the_environment(serve: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url, server = serve()
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    assert LiveModel(cache_dir=tmp_path).complete(BODY).text == "hello there"
    assert server.seen[0].headers["authorization"] == f"Bearer {SECRET}"
    assert server.seen[0].body["model"] == "gpt-4o"  # no override: the body's own model


def test_a_loopback_server_needs_no_key(serve: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    url, server = serve()
    LiveModel(base_url=url, cache_dir=tmp_path).complete(BODY)
    assert server.seen[0].headers["authorization"] == f"Bearer {LOCAL_PLACEHOLDER_KEY}"


def test_a_remote_server_without_a_key_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(LiveModelError) as caught:
        LiveModel(base_url="https://llm.example.invalid/v1")
    assert str(caught.value) == "no API key for the live model at https://llm.example.invalid/v1: set OPENAI_API_KEY"
    assert caught.value.exit_code == EXIT_CANNOT_RUN
    # control: the same URL with a key constructs (nothing is sent until complete())
    assert LiveModel(base_url="https://llm.example.invalid/v1", api_key=SECRET).base_url == "https://llm.example.invalid/v1"


@pytest.mark.parametrize(("url", "loopback"), [
    ("http://127.0.0.1:8080/v1", True), ("http://127.9.9.9/v1", True), ("http://[::1]:9/v1", True),
    ("http://localhost:1/v1", True), ("https://api.openai.com/v1", False), ("http://10.0.0.1/v1", False),
    ("http://127.0.0.1.example.com/v1", False),
])
def test_loopback_detection(url: str, loopback: bool) -> None:
    assert is_loopback_url(url) is loopback


def test_not_an_http_url_is_an_error() -> None:
    with pytest.raises(LiveModelError, match="is not an http"):
        LiveModel(base_url="127.0.0.1:8080", api_key=SECRET)


def test_openai_is_imported_only_when_a_request_is_made() -> None:
    code = (
        "import sys; from zhin_cli.tools.eval.live import LiveModel; "
        "LiveModel(base_url='http://127.0.0.1:9/v1'); "
        "print('openai' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(), cwd=ROOT,
                         timeout=60, check=True)
    assert out.stdout.strip() == "False"


# --- retries with backoff -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 500, 503])
def test_retries_on_429_and_5xx_then_succeeds(serve: Any, tmp_path: Path, status: int) -> None:
    fail = Reply(status=status, body={"error": {"message": "busy", "type": "server_error"}}, headers={"retry-after-ms": "10"})
    url, server = serve(fail, fail, Reply(body=completion("third time")))
    assert model(url, tmp_path, max_retries=3).complete(BODY).text == "third time"
    assert server.count == 3
    assert server.seen[0].body == server.seen[2].body  # the same request again


def test_no_retries_when_max_retries_is_zero(serve: Any, tmp_path: Path) -> None:
    # negative control for the test above: the same script fails at once without retries
    fail = Reply(status=503, body={"error": {"message": "overloaded", "type": "server_error"}}, headers={"retry-after-ms": "10"})
    url, server = serve(fail, Reply())
    with pytest.raises(LiveModelError) as caught:
        model(url, tmp_path, max_retries=0).complete(BODY)
    assert server.count == 1
    assert str(caught.value) == f"live model at {url}: HTTP 503: overloaded"


def test_gives_up_after_max_retries(serve: Any, tmp_path: Path) -> None:
    url, server = serve(Reply(status=502, body={"error": {"message": "bad gateway"}}, headers={"retry-after-ms": "5"}))
    with pytest.raises(LiveModelError, match="HTTP 502: bad gateway"):
        model(url, tmp_path, max_retries=2).complete(BODY)
    assert server.count == 3  # one try + two retries


def test_backoff_grows_exponentially_without_retry_after(serve: Any, tmp_path: Path) -> None:
    fail = Reply(status=503, body={"error": {"message": "busy"}})
    url, server = serve(fail, fail, fail, Reply())
    model(url, tmp_path, max_retries=3).complete(BODY)
    gaps = [b.at - a.at for a, b in zip(server.seen, server.seen[1:], strict=False)]
    # openai's backoff: 0.5 s · 2^n, less up to 25 % jitter → at least 0.375, 0.75, 1.5 s
    assert len(gaps) == 3
    assert gaps[0] >= 0.37 and gaps[1] >= 0.74 and gaps[2] >= 1.49
    assert gaps[2] > gaps[0]


def test_a_400_is_not_retried_and_names_url_status_and_message(serve: Any, tmp_path: Path) -> None:
    message = "Conversation roles must alternate user/assistant/user/assistant/..."
    url, server = serve(Reply(status=400, body={"error": {"message": message, "type": "invalid_request_error"}}))
    with pytest.raises(LiveModelError) as caught:
        model(url, tmp_path, max_retries=3).complete(BODY)
    assert server.count == 1
    assert str(caught.value) == f"live model at {url}: HTTP 400: {message}"
    assert "\n" not in str(caught.value)


def test_llama_cpp_python_validation_errors_are_one_line(serve: Any, tmp_path: Path) -> None:
    # llama-cpp-python answers pydantic failures as {"detail": [...]} (with status 500 or 422)
    detail = [{"type": "literal_error", "loc": ["body", "messages", 0, "role"], "msg": "Input should be 'system'"}]
    url, _ = serve(Reply(status=422, body={"detail": detail}))
    with pytest.raises(LiveModelError) as caught:
        model(url, tmp_path).complete(BODY)
    assert "HTTP 422" in str(caught.value) and "Input should be 'system'" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_connection_refused_names_the_url(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(LiveModelError) as caught:
        model(url, tmp_path, max_retries=1).complete(BODY)
    assert str(caught.value).startswith(f"live model at {url}: cannot connect")
    assert "after 1 retries" in str(caught.value)


def test_a_slow_server_times_out(serve: Any, tmp_path: Path) -> None:
    import openai  # noqa: F401  (imported before the clock starts: only the wait is timed)

    url, server = serve(Reply(delay=1.5))
    started = time.monotonic()
    with pytest.raises(LiveModelError, match=r"no answer within 0\.4 s"):
        model(url, tmp_path, timeout=0.4, max_retries=0).complete(BODY)
    assert time.monotonic() - started < 1.4
    # control: the same server answers when the timeout is long enough
    assert model(url, tmp_path, timeout=10.0, max_retries=0, use_cache=False).complete(BODY).text == "hello there"


def test_an_answer_without_choices_is_an_error(serve: Any, tmp_path: Path) -> None:
    url, _ = serve(Reply(body={"id": "x", "object": "chat.completion", "choices": []}))
    with pytest.raises(LiveModelError, match="has no choices"):
        model(url, tmp_path).complete(BODY)


# --- the response cache -------------------------------------------------------------------------------------------


def test_second_identical_request_comes_from_the_cache(serve: Any, tmp_path: Path) -> None:
    url, server = serve(Reply(body=completion("first")), Reply(body=completion("second")))
    live = model(url, tmp_path)
    first = live.complete(BODY, seed=1)
    again = model(url, tmp_path).complete(json.loads(json.dumps(BODY)), seed=1)  # a new client, an equal body
    assert (first.text, first.cached) == ("first", False)
    assert (again.text, again.cached, again.usage) == ("first", True, first.usage)
    assert server.count == 1
    files = list((tmp_path / "cache").rglob("*.json"))
    assert len(files) == 1 and files[0].stem == cache_key(url, live.request_body(BODY, seed=1))


def test_use_cache_false_always_asks_the_server(serve: Any, tmp_path: Path) -> None:
    url, server = serve(Reply(body=completion("first")), Reply(body=completion("second")))
    model(url, tmp_path).complete(BODY)
    uncached = model(url, tmp_path, use_cache=False).complete(BODY)
    assert (uncached.text, uncached.cached) == ("second", False)
    assert server.count == 2


def test_use_cache_false_writes_no_file(serve: Any, tmp_path: Path) -> None:
    url, _ = serve()
    model(url, tmp_path, use_cache=False).complete(BODY)
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("change", ["seed", "model", "message", "base_url"])
def test_anything_that_changes_the_request_misses_the_cache(serve: Any, tmp_path: Path, change: str) -> None:
    url, server = serve()
    other_url, other_server = serve()
    model(url, tmp_path).complete(BODY, seed=1)
    body = json.loads(json.dumps(BODY))
    kwargs: dict[str, Any] = {}
    seed = 1
    target_url = url
    if change == "seed":
        seed = 2
    elif change == "model":
        kwargs["model"] = "gpt-4o-mini"
    elif change == "message":
        body["messages"][1]["content"] = "[id:m1] hi!"
    else:
        target_url = other_url
    reply = model(target_url, tmp_path, **kwargs).complete(body, seed=seed)
    assert not reply.cached
    assert server.count + other_server.count == 2


def test_cache_key_ignores_key_order_and_a_trailing_slash() -> None:
    a = {"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 0}
    b = {"temperature": 0, "messages": [{"content": "x", "role": "user"}], "model": "m"}
    assert cache_key("http://127.0.0.1:1/v1", a) == cache_key("http://127.0.0.1:1/v1/", b)
    assert cache_key("http://127.0.0.1:1/v1", a) != cache_key("http://127.0.0.1:1/v1", {**a, "temperature": 1})


def test_a_corrupt_cache_file_is_a_miss(serve: Any, tmp_path: Path) -> None:
    url, server = serve()
    live = model(url, tmp_path)
    live.complete(BODY)
    [path] = (tmp_path / "cache").rglob("*.json")
    path.write_text("{not json", encoding="utf-8")
    assert not live.complete(BODY).cached
    assert server.count == 2
    assert json.loads(path.read_text(encoding="utf-8"))["reply"]["text"] == "hello there"  # rewritten


def test_default_cache_dir_is_the_user_cache_directory_never_the_checkout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # a checkout's files are whatever its last pull request made them: its cache must not answer for the model
    monkeypatch.delenv("ZHIN_EVAL_CACHE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "zhin" / "eval-cache"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "zhin" / "eval-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # the XDG spec: a relative path is ignored
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "zhin" / "eval-cache"
    assert not str(default_cache_dir()).startswith(str(tmp_path / ".zhin"))
    monkeypatch.setenv("ZHIN_EVAL_CACHE_DIR", str(tmp_path / "elsewhere"))  # an explicit choice still wins
    assert default_cache_dir() == tmp_path / "elsewhere"


def test_an_unwritable_cache_is_a_one_line_error(serve: Any, tmp_path: Path) -> None:
    url, _ = serve()
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(LiveModelError, match="cannot write the live-model cache"):
        model(url, tmp_path, cache_dir=blocker / "cache").complete(BODY)


# --- the key is never shown ---------------------------------------------------------------------------------------


def test_a_server_that_echoes_the_key_does_not_leak_it(serve: Any, tmp_path: Path) -> None:
    url, server = serve(Reply(status=401, echo_auth=True), Reply(status=400, echo_auth=True))
    with pytest.raises(LiveModelError) as unauthorized:
        model(url, tmp_path).complete(BODY)
    assert str(unauthorized.value) == f"live model at {url}: HTTP 401: the API key was rejected"
    with pytest.raises(LiveModelError) as rejected:
        model(url, tmp_path).complete(BODY)
    assert SECRET not in str(rejected.value) and "bad credentials: Bearer ***" in str(rejected.value)
    assert server.count == 2


LEAK_SCRIPT = """
import json, sys
from pathlib import Path
from zhin_cli.core.errors import ZhinError
from zhin_cli.tools.eval.live import LiveModel
live = LiveModel(base_url=sys.argv[1], cache_dir=Path(sys.argv[2]), max_retries=1, timeout=10)
print(repr(live), vars(live).keys() - {"_api_key", "_client"})
for body in json.loads(sys.argv[3]):
    try:
        reply = live.complete(body)
        print("reply", reply)
    except ZhinError as error:
        print("zhin: error:", error, file=sys.stderr)
"""


def test_key_is_absent_from_output_logs_and_cache(serve: Any, tmp_path: Path) -> None:
    # the server answers a good request (cached), then echoes the Authorization header in a 400 and a 503;
    # the client runs with OPENAI_LOG=debug so the openai and HTTP libraries log everything they do
    url, server = serve(Reply(), Reply(status=400, echo_auth=True), Reply(status=503, echo_auth=True))
    bodies = [BODY, {**BODY, "model": "m2"}, {**BODY, "model": "m3"}]
    env = {**clean_env(), "OPENAI_API_KEY": SECRET, "OPENAI_LOG": "debug"}
    run = subprocess.run([sys.executable, "-c", LEAK_SCRIPT, url, str(tmp_path / "cache"), json.dumps(bodies)],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr
    # control: the key did travel (the server saw it and echoed it) and the errors were reported
    assert all(s.headers["authorization"] == f"Bearer {SECRET}" for s in server.seen)
    assert "HTTP 400: bad credentials: Bearer ***" in run.stderr and "HTTP 503" in run.stderr
    assert "Retrying" in run.stderr or "retry" in run.stderr.lower()  # debug logging was really on
    assert SECRET not in run.stdout and SECRET not in run.stderr
    cache_text = "".join(p.read_text(encoding="utf-8") for p in (tmp_path / "cache").rglob("*") if p.is_file())
    assert cache_text and SECRET not in cache_text


def test_live_model_error_is_a_zhin_error() -> None:
    assert issubclass(LiveModelError, ZhinError)
    assert os.environ.get("OPENAI_API_KEY") != SECRET
