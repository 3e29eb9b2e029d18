"""``zhin serve --upstream``: a silent provider cannot stall the recorder (issue 29, reviewer finding 1), and the
exchange record names the model and route (finding 2: a Gemini body carries its model only in its path).

Bounds are tested by counting and by what is still pending, never by how fast something is: a silent upstream gets
its 504 at a deadline set low for the test (the bound asserted on ``elapsed_ms`` is generous), the worker it held
answers the next request, a client that left frees its worker, and 17 requests stuck on a silent upstream leave a
worker for everything else. Controls: a slow upstream that answers within the deadline still gets its 200; while the
client is still connected its worker really is busy; the 15 held requests are answered once the upstream answers.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx2
import pytest
from serve_process import ServeProcess, post, status_of, wait_for
from test_serve_upstream import (
    ANTHROPIC_BODY,
    ANTHROPIC_EVENTS,
    Scripted,
    bodies,
    conformance,
    exchange,
    http,
    origin,
    recorder,
    run_zhin,
    send_json,
)

from zhin_cli.store.captures import read_capture_folder

JSON = {"Content-Type": "application/json"}
BODY = b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}'
GENEROUS_MS = 15_000  # far above any deadline set here, far below the old 300 s


@contextmanager
def held_upstream() -> Iterator[tuple[Scripted, threading.Event]]:
    """An upstream that accepts and says nothing until ``release`` is set (then it answers 200)."""
    release = threading.Event()

    def hold(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        release.wait(60)
        send_json(handler, 200, {"usage": {"prompt_tokens": 1}})

    try:
        with Scripted(hold) as upstream:
            yield upstream, release
    finally:
        release.set()


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


# --- finding 1: the deadline, the worker, the connection bound -------------------------------------------------------


def test_a_silent_upstream_is_a_504_at_the_deadline_and_its_worker_is_free_again(tmp_path: Path) -> None:
    with held_upstream() as (upstream, _release), \
            recorder(tmp_path, upstream.url, workers=1, upstream_deadline=1.0) as (url, folder, lines), http() as h:
        answer = h.post(url + "/chat/completions", content=BODY, headers=JSON)
        later = h.get(url + "/models")  # the only worker answers it: the relay let go of it
        still_held = len(upstream.received)
    assert answer.status_code == 504 and "no answer within 1 s" in answer.json()["error"]["message"]
    assert later.status_code == 404 and still_held == 1  # the upstream never answered meanwhile
    record = exchange(bodies(folder)[0])
    assert record["status"] == 504 and record["usage"] is None and record["elapsed_ms"] < GENEROUS_MS
    assert lines[0].startswith("POST /v1/chat/completions 504 upstream http://127.0.0.1:") and "within 1 s" in lines[0]


def test_a_slow_upstream_that_answers_within_the_deadline_still_gets_its_200(tmp_path: Path) -> None:
    def slow(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        time.sleep(1.0)
        send_json(handler, 200, {"usage": {"prompt_tokens": 3}})

    with Scripted(slow) as upstream, recorder(tmp_path, upstream.url, upstream_deadline=10.0) as (url, folder, _), \
            http() as h:
        answer = h.post(url + "/chat/completions", content=BODY, headers=JSON)
    assert answer.status_code == 200 and answer.json() == {"usage": {"prompt_tokens": 3}}
    assert exchange(bodies(folder)[0])["usage"] == {"prompt_tokens": 3}


def test_a_json_answer_that_trickles_past_the_deadline_is_a_504(tmp_path: Path) -> None:
    def trickle(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", "400")
        handler.end_headers()
        try:
            for _ in range(400):  # one byte every 0.1 s: each read is quick, the whole answer takes 40 s
                handler.wfile.write(b" ")
                handler.wfile.flush()
                time.sleep(0.1)
        except OSError:
            pass

    with Scripted(trickle) as upstream, recorder(tmp_path, upstream.url, upstream_deadline=1.0) as (url, folder, _), \
            http() as h:
        answer = h.post(url + "/chat/completions", content=BODY, headers=JSON)
    assert answer.status_code == 504 and "not whole within 1 s" in answer.json()["error"]["message"]
    assert exchange(bodies(folder)[0])["elapsed_ms"] < GENEROUS_MS


def test_a_client_that_leaves_before_the_upstream_answers_frees_its_worker(tmp_path: Path) -> None:
    with held_upstream() as (upstream, _release), \
            recorder(tmp_path, upstream.url, workers=1, upstream_deadline=60.0) as (url, folder, lines):
        head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" \
               f"Content-Length: {len(BODY)}\r\n\r\n".encode()
        with socket.create_connection(("127.0.0.1", port_of(url)), timeout=10) as client:
            client.sendall(head + BODY)
            assert wait_for(lambda: len(upstream.received) == 1)
            # control: while the client waits, the only worker is busy with it (a health request gets no answer)
            with httpx2.Client(trust_env=False, timeout=1.0) as quick, pytest.raises(httpx2.TimeoutException):
                quick.get(url + "/models")
        with http() as h:  # the client has gone: its worker is free long before the 60 s deadline
            later = h.get(url + "/models")
        assert later.status_code == 404
        record = exchange(bodies(folder)[0])
        assert wait_for(lambda: any("went away" in line for line in lines))
    assert record["status"] == 499 and record["usage"] is None and record["elapsed_ms"] < GENEROUS_MS


def test_seventeen_requests_on_a_silent_upstream_do_not_block_a_health_request(tmp_path: Path) -> None:
    results: list[httpx2.Response] = []

    def send(url: str) -> None:
        with httpx2.Client(trust_env=False, timeout=60) as h:
            results.append(h.post(url + "/chat/completions", content=BODY, headers=JSON))

    with held_upstream() as (upstream, release), \
            recorder(tmp_path, upstream.url, upstream_deadline=60.0) as (url, folder, lines):
        threads = [threading.Thread(target=send, args=(url,), daemon=True) for _ in range(17)]
        for thread in threads:
            thread.start()
        assert wait_for(lambda: len(upstream.received) == 15 and len(results) == 2, 20)
        with http() as h:
            health = h.get(url + "/models")
        pending_then = 17 - len(results)
        release.set()  # control: the 15 held requests were really waiting on the upstream, and now get its answer
        for thread in threads:
            thread.join(30)
    assert health.status_code == 404 and pending_then == 15
    refused, relayed = results[:2], results[2:]
    assert [r.status_code for r in refused] == [503, 503] and all(r.headers["retry-after"] == "1" for r in refused)
    assert "15 requests are already waiting on upstream" in refused[0].json()["error"]["message"]
    assert [r.status_code for r in relayed] == [200] * 15 and len(upstream.received) == 15
    assert sorted(exchange(b)["status"] for b in bodies(folder)) == [200] * 15 + [503, 503]


def test_a_stream_is_bounded_by_the_idle_time_between_its_pieces(tmp_path: Path) -> None:
    def stalls(gap: float, release: threading.Event) -> Any:
        def script(handler: BaseHTTPRequestHandler, body: bytes) -> None:
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream")
            handler.end_headers()
            try:
                for index, event in enumerate(ANTHROPIC_EVENTS):
                    if index == 3 and gap < 0:
                        release.wait(60)  # silent mid-stream
                    handler.wfile.write(event)
                    handler.wfile.flush()
                    time.sleep(max(gap, 0))
            except OSError:
                pass
            handler.close_connection = True  # the stream ends when the connection does
        return script

    release = threading.Event()
    try:
        with Scripted(stalls(-1, release)) as upstream, \
                recorder(tmp_path, upstream.url, upstream_read_timeout=1.0) as (url, folder, lines), http() as h:
            cut = h.post(origin(url) + "/v1/messages", content=ANTHROPIC_BODY, headers=JSON)
            assert wait_for(lambda: bool(lines))
    finally:
        release.set()
    assert cut.status_code == 200 and b"Hello" in cut.content and b"message_stop" not in cut.content
    assert "the upstream's stream was silent for 1 s: ended there" in lines[0]
    assert exchange(bodies(folder)[0])["stream"] is True
    # control: a stream whose pieces come more often than the idle time runs to its end, however long it takes
    with Scripted(stalls(0.1, release)) as upstream, \
            recorder(tmp_path / "b", upstream.url, upstream_read_timeout=1.0) as (url, folder, lines), http() as h:
        whole = h.post(origin(url) + "/v1/messages", content=ANTHROPIC_BODY, headers=JSON)
        assert wait_for(lambda: bool(lines))
    assert b"message_stop" in whole.content and "silent" not in lines[0]


def test_the_cli_option_sets_the_deadline(tmp_path: Path) -> None:
    with held_upstream() as (upstream, _release), \
            ServeProcess("--upstream", upstream.url, "--capture", str(tmp_path / "rec"), "--upstream-deadline", "1") as proxy:
        timed_out = post(proxy.port, BODY)
        assert wait_for(lambda: "504" in proxy.stderr)
        log = proxy.stderr
    assert status_of(timed_out) == 504 and b"no answer within 1 s" in timed_out
    assert "POST /v1/chat/completions 504 upstream http://127.0.0.1:" in log and "Traceback" not in log


@pytest.mark.parametrize("value", ["0", "-1", "nan", "3601"])
def test_an_upstream_deadline_out_of_range_is_one_line_and_exit_2(value: str, tmp_path: Path) -> None:
    result = run_zhin("serve", "--port", "0", "--upstream", "http://127.0.0.1:9", "--capture", str(tmp_path / "x"),
                      "--upstream-deadline", value)
    assert result.returncode == 2 and "--upstream-deadline" in result.stderr and "out of range" in result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("zhin: error: "), result.stderr


# --- finding 2: the model and route in the exchange record -----------------------------------------------------------


GEMINI_BODY = json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}).encode()


def test_the_exchange_record_names_a_gemini_bodys_model_from_its_path(tmp_path: Path) -> None:
    gemini = "/v1beta/models/gemini-2.0-flash:generateContent"
    with conformance(tmp_path) as (upstream_url, _), recorder(tmp_path, origin(upstream_url)) as (url, folder, _), \
            http() as h:
        assert h.post(origin(url) + gemini + "?key=secret-k", content=GEMINI_BODY, headers=JSON).status_code == 200
        assert h.post(url + "/chat/completions", content=BODY, headers=JSON).status_code == 200
        assert h.post(url + "/chat/completions", content=b'{"messages":[]}', headers=JSON).status_code == 400
    first, second, third = (exchange(b) for b in bodies(folder))
    assert (first["model"], first["path"]) == ("gemini-2.0-flash", gemini)  # the query (a key) is not kept
    assert (second["model"], second["path"]) == ("gpt-4o", "/v1/chat/completions")  # control: the body's model
    assert third["model"] is None  # control: a body that names none is not given one
    assert "secret-k" not in "".join(p.read_text() for p in folder.iterdir())


def test_a_captured_gemini_body_is_read_with_the_model_its_exchange_file_names(tmp_path: Path) -> None:
    with conformance(tmp_path) as (url, folder), http() as h:
        h.post(origin(url) + "/v1beta/models/gemini-2.5-pro:generateContent", content=GEMINI_BODY, headers=JSON)
        h.post(url + "/chat/completions", content=BODY, headers=JSON)
    gemini, openai_body = read_capture_folder(folder).bodies
    assert "model" not in gemini.body and gemini.model == "gemini-2.5-pro"
    assert openai_body.model == "gpt-4o"  # control: a body's own model is its model
    for path in folder.glob("*.exchange.json"):  # control: without the exchange files the Gemini body names none
        path.unlink()
    assert read_capture_folder(folder).bodies[0].model == ""
