"""A real ``zhin serve`` process for the serve tests: started from this checkout on 127.0.0.1 (port 0), its stderr
kept so a test can assert that nothing on it is a traceback, and raw-socket helpers for hostile HTTP."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from conftest import clean_env, default_sigint

ROOT = Path(__file__).resolve().parents[1]


class ServeProcess:
    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "zhin_cli", "serve", "--port", "0", *args], cwd=ROOT,
                                        env=env or clean_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, preexec_fn=default_sigint)
        assert self.process.stderr is not None
        first = self.process.stderr.readline().decode("utf-8", "replace")
        self.ready_line = first
        match = re.search(r"listening on (http://127\.0\.0\.1:(\d+)/v1)", first)
        assert match, first
        self.base_url, self.port = match.group(1), int(match.group(2))
        self.lines: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)

    @property
    def stderr(self) -> str:
        return b"".join(self.lines).decode("utf-8", "replace")

    def peak_rss_mib(self) -> float:
        return self._status("VmHWM") / 1024

    def rss_mib(self) -> float:
        return self._status("VmRSS") / 1024

    def threads(self) -> int:
        return self._status("Threads")

    def _status(self, field: str) -> int:
        with open(f"/proc/{self.process.pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise AssertionError(f"no {field} in /proc status")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise
        self._reader.join(5)
        return code

    def __enter__(self) -> ServeProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def request(port: int, data: bytes, *, timeout: float = 20) -> bytes:
    """Send ``data`` on a fresh connection, then read the answer to the end (b"" if the server just closed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(data)
        except OSError:
            pass
        return read_all(sock, timeout)


def read_all(sock: socket.socket, timeout: float = 20) -> bytes:
    sock.settimeout(timeout)
    answer = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            piece = sock.recv(65536)
        except ConnectionResetError:
            return answer + b"<reset>"
        if not piece:
            break
        answer += piece
    return answer


def status_of(answer: bytes) -> int:
    match = re.match(rb"HTTP/1\.[01] (\d{3}) ", answer)
    assert match, answer[:200]
    return int(match.group(1))


def post(port: int, body: bytes, *, path: str = "/v1/chat/completions", headers: dict[str, str] | None = None,
         chunked: bool = False) -> bytes:
    fields = {"Host": f"127.0.0.1:{port}", "Content-Type": "application/json", **(headers or {})}
    if chunked:
        fields["Transfer-Encoding"] = "chunked"
    else:
        fields.setdefault("Content-Length", str(len(body)))
    head = f"POST {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
    return request(port, head.encode("latin-1") + body)


def no_traceback(stderr: str) -> None:
    assert "Traceback" not in stderr and "Exception occurred during processing" not in stderr, stderr[-3000:]


def wait_for(condition: object, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(0.05)
    return False


__all__ = ["ROOT", "ServeProcess", "no_traceback", "post", "read_all", "request", "signal", "status_of", "wait_for"]
