"""check-capture's turn matching and PNG card reading on hostile sizes (issue 27 items 7 and 8).

* Matching: seconds of ``TurnMatcher.turn_of`` (``turn_of`` where there is no matcher) for one capture of turn 1
  (every later turn is tried first) against chats of 5,000 / 20,000 / 40,000 turns, and for a 2,000-turn chat
  with a capture per turn (each body the history up to its turn, as ST sends it).
* PNG: the peak resident memory of a process reading a 562 KB card whose image is 12,000 × 12,000 RGBA.

The code measured is the ``zhin_cli`` Python imports: for the code before a change, run this script with
``PYTHONPATH`` set to an export of an older commit (``git archive <commit> zhin_cli | tar -x -C /tmp/old``).
Absolute numbers depend on the machine; compare runs made on one machine.
"""

from __future__ import annotations

import base64
import json
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

from zhin_cli.store.sillytavern import SillyTavernChat, read_chat
from zhin_cli.tools.preset import capture as stcapture

CARD = Path(__file__).resolve().parent.parent / "tests" / "st_golden" / "content" / "golden-card.json"


def chat_file(folder: Path, turns: int) -> Path:
    lines: list[dict[str, Any]] = [{"user_name": "unused", "character_name": "unused", "chat_metadata": {"integrity": "b"}}]
    for number in range(1, turns + 1):
        lines.append({"name": "Sol", "is_user": True, "mes": f"question {number} about the tides",
                      "send_date": "2026-03-01T10:00:00.000Z"})
        lines.append({"name": "Juniper", "is_user": False, "mes": f"answer {number}: the tide turns",
                      "send_date": "2026-03-01T10:00:01.000Z"})
    path = folder / f"chat-{turns}.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    return path


def body(turn: int) -> dict[str, Any]:
    """What ST sends for turn ``turn``: the history up to its user message."""
    messages = [{"role": "system", "content": "rules"}]
    for number in range(1, turn):
        messages += [{"role": "user", "content": f"question {number} about the tides"},
                     {"role": "assistant", "content": f"answer {number}: the tide turns"}]
    messages.append({"role": "user", "content": f"question {turn} about the tides"})
    return {"messages": messages}


def match_seconds(chat: SillyTavernChat, bodies: list[dict[str, Any]]) -> float:
    started = time.perf_counter()
    if hasattr(stcapture, "TurnMatcher"):
        matcher = stcapture.TurnMatcher(chat)
        found = [matcher.turn_of(b) for b in bodies]
    else:  # the code before issue 27 item 8
        found = [stcapture.turn_of(b, chat) for b in bodies]
    elapsed = time.perf_counter() - started
    assert [t.number if t else None for t in found] == list(range(1, len(bodies) + 1))
    return elapsed


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def bomb_card(path: Path, side: int = 12_000) -> Path:
    """A PNG of side × side RGBA (zero pixels, streamed through zlib: a few hundred KB) carrying the golden card."""
    compressor = zlib.compressobj(9)
    row = bytes(1 + 4 * side)
    idat = b"".join(compressor.compress(row) for _ in range(side)) + compressor.flush()
    text = b"chara\0" + base64.b64encode(CARD.read_bytes())
    header = struct.pack(">IIBBBBB", side, side, 8, 6, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", idat) + _chunk(b"tEXt", text)
                     + _chunk(b"IEND", b""))
    return path


def card_peak_mb(path: Path) -> tuple[float, str]:
    """Peak RSS (MB) of a fresh process that reads the card, and what it wrote to stderr."""
    code = ("import resource, sys; from pathlib import Path; from zhin_cli.store.sillytavern import read_card; "
            "read_card(Path(sys.argv[1])); print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True,
                          cwd=path.parent)  # not the repository: "-c" puts the working folder first on sys.path
    return int(done.stdout.split()[-1]) / 1024, done.stderr.strip()


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        card = bomb_card(root / "bomb.png")  # first: a child forked from a large process reports that one's peak
        peak, stderr = card_peak_mb(card)
        print(f"{card.stat().st_size / 1000:.0f} KB card of 12,000 × 12,000 RGBA: peak {peak:.0f} MB"
              + (f"; stderr: {stderr.splitlines()[0][:160]}" if stderr else "; nothing on stderr"), flush=True)
        for turns in (5_000, 20_000, 40_000):
            chat = read_chat(chat_file(root, turns))
            print(f"{turns:,}-turn chat, one capture (turn 1): matching {match_seconds(chat, [body(1)]):.2f} s", flush=True)
        chat = read_chat(chat_file(root, 2_000))
        bodies = [body(turn) for turn in range(1, 2_001)]
        print(f"2,000-turn chat, a capture per turn: matching {match_seconds(chat, bodies):.2f} s", flush=True)


if __name__ == "__main__":
    main()
