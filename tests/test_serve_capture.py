"""``zhin serve --capture``: bodies published atomically and exclusively (issue 14 §2). Two server processes
capturing into one folder lose nothing; numbering reads every width (past 99999); a stopped server (SIGTERM,
SIGINT) leaves no truncated capture and no temporary file."""

from __future__ import annotations

import errno
import json
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
from serve_process import ServeProcess, no_traceback, post, status_of

from zhin_cli.tools.serve.server import Capture


def body(tag: str) -> bytes:
    return json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": tag}]}).encode()


def bodies(folder: Path) -> list[Path]:
    """The captured request bodies (beside each, ``zhin serve`` writes its ``.exchange.json`` record)."""
    return [p for p in folder.iterdir() if not p.name.endswith(".exchange.json")]


def test_two_server_processes_capturing_into_one_folder_lose_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "same"
    with ServeProcess("--capture", str(folder)) as first, ServeProcess("--capture", str(folder)) as second:
        sent = [body(f"{name} {n}") for name in ("first", "second") for n in range(20)]
        errors: list[BaseException] = []

        def send(server: ServeProcess, payloads: list[bytes]) -> None:
            try:
                for payload in payloads:
                    assert status_of(post(server.port, payload)) == 200
            except BaseException as error:  # noqa: BLE001 — surfaced below
                errors.append(error)

        threads = [threading.Thread(target=send, args=(server, sent[i::4])) for i, server in
                   enumerate([first, second, first, second])]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors
        names = sorted(p.name for p in bodies(folder))
        assert sorted(p.read_bytes() for p in bodies(folder)) == sorted(sent)  # every body, each once, intact
        assert len(names) == 40 and all(n.endswith("-chat-completions.json") for n in names)
        exchanges = sorted(p.name for p in folder.iterdir() if p.name.endswith(".exchange.json"))
        assert exchanges == [n.removesuffix(".json") + ".exchange.json" for n in names]  # one record beside each body
        assert all(json.loads((folder / n).read_text())["status"] == 200 for n in exchanges)
        assert first.stop() == 0 and second.stop() == 0
        no_traceback(first.stderr + second.stderr)


def test_numbering_continues_past_99999_without_overwriting(tmp_path: Path) -> None:
    folder = tmp_path / "captured"
    folder.mkdir()
    (folder / "99999-chat-completions.json").write_bytes(b"old 99999")
    (folder / "100000-chat-completions.json").write_bytes(b"old 100000")
    capture = Capture(folder)
    written = capture.write("/v1/chat/completions", b"{}")
    assert written is not None and written.name == "100001-chat-completions.json"
    assert (folder / "100000-chat-completions.json").read_bytes() == b"old 100000"
    again = Capture(folder).write("/v1/messages", b"{}")
    assert again is not None and again.name == "100002-messages.json"


def test_a_name_taken_meanwhile_moves_on_to_the_next_number(tmp_path: Path) -> None:
    capture = Capture(tmp_path)
    (tmp_path / "00001-chat-completions.json").write_bytes(b"someone else")  # another writer, after we scanned
    (tmp_path / "00002-messages.json").write_bytes(b"someone else")
    written = capture.write("/v1/chat/completions", b"mine")
    assert written is not None and written.name == "00003-chat-completions.json" and written.read_bytes() == b"mine"
    assert (tmp_path / "00001-chat-completions.json").read_bytes() == b"someone else"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["00001-chat-completions.json", "00002-messages.json",
                                                          "00003-chat-completions.json"]  # no temporary file left


def test_without_hard_links_a_name_is_claimed_exclusively_then_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_links(*args: object) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")  # what link(2) says where links are unsupported

    monkeypatch.setattr("os.link", no_links)
    (tmp_path / "00001-chat-completions.json").write_bytes(b"theirs")
    capture = Capture(tmp_path)
    (tmp_path / "00002-chat-completions.json").write_bytes(b"also theirs")
    written = capture.write("/v1/chat/completions", b"mine")
    assert written is not None and written.name == "00003-chat-completions.json" and written.read_bytes() == b"mine"
    assert (tmp_path / "00002-chat-completions.json").read_bytes() == b"also theirs"
    assert len(list(tmp_path.iterdir())) == 3


def test_a_link_that_fails_for_another_reason_claims_no_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The temporary file vanished (a shutdown removed it): no empty numbered capture may be left in its place.
    def gone(*args: object) -> None:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory")

    monkeypatch.setattr("os.link", gone)
    capture = Capture(tmp_path)
    assert capture.write("/v1/chat/completions", b"mine") is None
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stopping_during_an_upload_leaves_no_truncated_capture(tmp_path: Path, sig: int) -> None:
    folder = tmp_path / "captured"
    payload = body("x" * 200_000)
    with ServeProcess("--capture", str(folder)) as server:
        assert status_of(post(server.port, body("before"))) == 200
        head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\n\r\n").encode()
        gone = socket.create_connection(("127.0.0.1", server.port))
        gone.sendall(head + payload[: len(payload) // 2])  # a client killed with the server (one Ctrl-C for both)
        gone.close()
        pending = socket.create_connection(("127.0.0.1", server.port))  # and one still uploading
        pending.sendall(head + payload[: len(payload) // 3])
        time.sleep(0.5)
        code = server.stop(sig)
        pending.close()
        assert [p.read_bytes() for p in bodies(folder)] == [body("before")]  # only the complete request
        assert sorted(p.name for p in folder.iterdir()) == ["00001-chat-completions.exchange.json",
                                                            "00001-chat-completions.json"]  # and its record; no temp file
        assert code == 0
        no_traceback(server.stderr)
