"""``zhin view`` holds a bounded number of connections, and none idle for long (issue 27 item 11: 365 idle
connections held 366 threads, forever).

Slow-loris style: idle sockets to 127.0.0.1 only, opened in bounded loops. The library's server, with a small bound
(and, where the test waits for it, a short idle timeout) so it runs fast: connections past the bound are answered
503 and closed at once while the ones within it are still served (the control), threads stay within the bound, a
slot freed serves a real request again; idle and half-sent connections are closed after the timeout (and not
before: the control). Then the ``zhin view`` command with its documented defaults: the
connections past MAX_CONNECTIONS are refused and its process's threads stay bounded.
"""

from __future__ import annotations

import re
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, clean_env

IDLE = 1.0  # seconds: the idle timeout of the library tests that wait for it
BOUND = 4  # connections: the bound the library tests use
SLACK = 10.0  # seconds: how long a check waits for something that should happen at once (a bound, not a measure)


def wait_for(check: Callable[[], bool], seconds: float = SLACK) -> bool:
    """Poll ``check`` until it holds or ``seconds`` pass (bounded)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


def connect(url_port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", url_port), timeout=SLACK)


def read_to_end(connection: socket.socket, seconds: float = SLACK) -> bytes | None:
    """Everything the server sends until it closes the connection; None if it is still open after ``seconds``."""
    connection.settimeout(seconds)
    data = b""
    try:
        while chunk := connection.recv(65536):
            data += chunk
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return data


def still_open(connection: socket.socket) -> bool:
    """Nothing received and not closed within a short wait."""
    connection.settimeout(0.05)
    try:
        return connection.recv(1, socket.MSG_PEEK) != b""
    except TimeoutError:
        return True


@pytest.fixture()
def serve() -> Iterator[Callable[..., int]]:
    """Start the library's server with BOUND and a given idle timeout (and page), serving in a thread on
    127.0.0.1; its port."""
    from zhin_cli.tools.report.html import PageTemplate, page_server

    running: list[tuple[Any, threading.Thread]] = []

    def start(idle_timeout: float, page: PageTemplate | None = None, **bounds: float) -> int:
        page = page or PageTemplate(("<p", ">page</p><script", "></script>"))
        server = page_server(page, idle_timeout=idle_timeout, max_connections=BOUND, **bounds)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        running.append((server, thread))
        return int(server.server_address[1])

    try:
        yield start
    finally:
        for server, thread in running:
            server.shutdown()
            server.server_close()
            thread.join(timeout=SLACK)


def handler_count() -> Callable[[], int]:
    """Threads started since this call (the server's handlers: one per connection served)."""
    baseline = threading.active_count()
    return lambda: threading.active_count() - baseline


def test_connections_past_the_bound_are_refused_at_once(serve: Callable[..., int]) -> None:
    port = serve(3 * SLACK)  # no connection times out during this test
    handlers = handler_count()
    idle = [connect(port) for _ in range(BOUND)]
    try:
        assert wait_for(lambda: handlers() == BOUND), handlers()
        for _ in range(3 * BOUND):  # past the bound: refused at once, not queued
            with connect(port) as extra:
                answer = read_to_end(extra)
            assert answer is not None and answer.startswith(b"HTTP/1.1 503 "), answer
        assert handlers() == BOUND
        assert all(still_open(c) for c in idle)  # control: the ones within the bound are still served
        idle.pop().close()  # a slot freed: a real request is served
        assert wait_for(lambda: handlers() == BOUND - 1), handlers()
        with connect(port) as fresh:
            fresh.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            answer = read_to_end(fresh)
        assert answer is not None and answer.startswith(b"HTTP/1.0 200 ") and b">page</p>" in answer
    finally:
        for connection in idle:
            connection.close()


def test_idle_connections_are_closed_after_the_timeout(serve: Callable[..., int]) -> None:
    port = serve(IDLE)
    handlers = handler_count()
    idle = [connect(port) for _ in range(BOUND)]
    try:
        assert wait_for(lambda: handlers() == BOUND), handlers()
        assert all(still_open(c) for c in idle)  # control: not closed before the idle timeout
        for connection in idle:  # then closed by the server, with nothing sent
            assert read_to_end(connection, IDLE + SLACK) == b""
        assert wait_for(lambda: handlers() == 0), handlers()
    finally:
        for connection in idle:
            connection.close()


def test_a_connection_that_sends_part_of_a_request_then_stops_is_closed(serve: Callable[..., int]) -> None:
    """Slow loris: half a request line, then silence; control: the other half in time gets the page."""
    port = serve(IDLE)
    with connect(port) as stalled, connect(port) as prompt:
        stalled.sendall(b"GET / HT")
        prompt.sendall(b"GET / HT")
        prompt.sendall(b"TP/1.1\r\nHost: localhost\r\n\r\n")
        answer = read_to_end(prompt)
        assert answer is not None and answer.startswith(b"HTTP/1.0 200 ")
        assert read_to_end(stalled, IDLE + SLACK) == b""


def process_threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^Threads:\s+(\d+)", status, re.M)
    assert found is not None
    return int(found.group(1))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts threads in /proc")
def test_zhin_view_refuses_connections_past_its_bound(tmp_path: Path) -> None:
    from zhin_cli.tools.report.html import MAX_CONNECTIONS

    process = subprocess.Popen([sys.executable, "-m", "zhin_cli", "view", str(FIXTURES / "private-chat.jsonl"),
                                "--no-economy"], cwd=tmp_path, env=clean_env(), stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    idle: list[socket.socket] = []
    try:
        assert process.stderr is not None
        port = None
        for line in process.stderr:  # the header line, then the URL
            found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
            if found is not None:
                port = int(found.group(1))
                break
        assert port is not None
        before = process_threads(process.pid)
        idle = [connect(port) for _ in range(MAX_CONNECTIONS)]
        assert wait_for(lambda: process_threads(process.pid) == before + MAX_CONNECTIONS)
        for _ in range(8):
            with connect(port) as extra:
                answer = read_to_end(extra)
            assert answer is not None and answer.startswith(b"HTTP/1.1 503 "), answer
        assert process_threads(process.pid) == before + MAX_CONNECTIONS
    finally:
        for connection in idle:
            connection.close()
        process.terminate()
        process.communicate(timeout=30)
    assert process.returncode == 0


def test_the_bounds_are_the_documented_ones(tmp_path: Path) -> None:
    """--help and docs/report.md give the bounds the server uses; control: another number is not found."""
    from conftest import ROOT, run_zhin

    from zhin_cli.tools.report.html import IDLE_TIMEOUT, MAX_CONNECTIONS, REQUEST_DEADLINE

    shown = " ".join(run_zhin("view", "--help", cwd=tmp_path).stdout.split())
    docs = (ROOT / "docs" / "report.md").read_text(encoding="utf-8")
    for shift in (0, 1):
        idle, deadline, bound = IDLE_TIMEOUT + shift, REQUEST_DEADLINE + shift, MAX_CONNECTIONS + shift
        documented = f"silent for {idle:g} s" in shown and f"at most {bound} are served" in shown
        documented &= f"not whole {deadline:g} s after it connected" in shown
        documented &= f"| {idle:g} s |" in docs and f"| {bound} |" in docs and f"| {deadline:g} s |" in docs
        assert documented is (shift == 0), (shift, shown)


def test_a_client_that_stops_reading_or_leaves_is_dropped_without_a_traceback(
        serve: Callable[..., int], capfd: pytest.CaptureFixture[str]) -> None:
    """A client that asks for a large page and never reads it: the write times out and the connection ends; one
    that resets the connection mid-answer: it ends too — with nothing on stderr (socketserver printed a traceback
    for the reset); control: a client that reads gets the whole page."""
    from zhin_cli.tools.report.html import PageTemplate

    big = "x" * 16_000_000  # far past what the socket buffers hold
    port = serve(IDLE, PageTemplate(("<p", f">{big}</p><script", "></script>")))
    handlers = handler_count()
    with connect(port) as reader:
        reader.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answer = read_to_end(reader)
        assert answer is not None and answer.endswith(b"</script>") and len(answer) > len(big)
    for leaves in (False, True):
        with socket.socket() as stuck:
            stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: a small window
            stuck.connect(("127.0.0.1", port))
            stuck.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert wait_for(lambda: handlers() == 1), handlers()  # its handler is writing
            if leaves:  # a reset, not a polite close
                stuck.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                stuck.close()
            assert wait_for(lambda: handlers() == 0, IDLE + SLACK), handlers()  # the handler gives up
    assert "Traceback" not in capfd.readouterr().err


def trickle(connection: socket.socket, data: bytes, pause: float) -> bool:
    """Send ``data`` a byte at a time, ``pause`` seconds apart; False as soon as the server has closed."""
    for byte in data:
        try:
            connection.sendall(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            return False
        time.sleep(pause)
        connection.setblocking(False)
        try:
            if connection.recv(1, socket.MSG_PEEK) == b"":  # closed by the server (an answer would be data)
                return False
        except BlockingIOError:
            pass  # nothing yet: still open
        except ConnectionResetError:
            return False
        finally:
            connection.setblocking(True)
    return True


def test_a_request_trickled_past_the_deadline_is_closed(serve: Callable[..., int]) -> None:
    """Slow loris that is never idle: a byte every 0.3 s (well within the 1 s idle timeout) for a 38-byte request
    (11 s) is cut at the 2 s deadline; control: the same bytes 0.02 s apart (0.8 s) are served."""
    port = serve(IDLE, request_deadline=2.0)
    request = b"GET / HTTP/1.1\r\nHost: localhost:8\r\n\r\n"
    with connect(port) as slow:
        assert not trickle(slow, request, 0.3)  # closed before the request was whole
    with connect(port) as quick:
        assert trickle(quick, request, 0.02)
        answer = read_to_end(quick)
    assert answer is not None and answer.startswith(b"HTTP/1.0 200 ")
