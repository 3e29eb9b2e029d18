"""Time of ``prefix-diff`` on captured bodies (issue 29): grouping into conversations plus the pair diffs and the one
cache across conversations, on synthetic capture sets shaped like upstream zhin's (one shared system prompt and
``prompt_cache_key``; every later group request re-renders the previous turn's row with a ``[sender:…]`` prefix),
``CONVERSATIONS`` chats interleaved, each growing by two messages per request. Prints the best of three runs of
``diff_captures`` per size, and the time per request.

    .venv/bin/python benchmarks/captures_diff.py
"""

from __future__ import annotations

import time
from typing import Any

from zhin_cli.cache.captures import diff_captures
from zhin_cli.store.captures import CapturedBody, CaptureSet

CONVERSATIONS = 10
SYSTEM = "You are a member of a group chat. Follow the rules. " * 150
TOOLS = [{"type": "function", "function": {"name": f"tool{i}", "parameters": {"type": "object"}}} for i in range(4)]


def capture_set(requests_each: int) -> CaptureSet:
    bodies: list[CapturedBody] = []
    histories: list[list[dict[str, Any]]] = [[] for _ in range(CONVERSATIONS)]
    number = 0
    for turn in range(requests_each):
        for chat, history in enumerate(histories):
            if history:  # the previous live row comes back with the host's prefix
                history[-1] = {"role": "user", "content": f"[sender:id={chat} name=m{chat}] {history[-1]['content']}"}
                history.append({"role": "assistant", "content": f"ok {chat}-{turn}"})
            history.append({"role": "user", "content": f"chat {chat} turn {turn}: " + "words of a member " * 20})
            number += 1
            body = {"model": "gpt-4.1-mini", "prompt_cache_key": "one-key", "tools": TOOLS,
                    "messages": [{"role": "system", "content": SYSTEM}, *history]}
            bodies.append(CapturedBody(number, f"{number:05d}", "openai-chat", body))
    return CaptureSet("synthetic", bodies, [])


def main() -> None:
    for requests_each in (10, 40, 160):
        captures = capture_set(requests_each)
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            diff = diff_captures(captures)
            best = min(best, time.perf_counter() - start)
        total = len(captures.bodies)
        assert len(diff.sessions) == CONVERSATIONS, len(diff.sessions)
        print(f"{total:5d} requests ({CONVERSATIONS} conversations × {requests_each}): {best * 1000:8.1f} ms, "
              f"{best / total * 1000:.2f} ms per request")


if __name__ == "__main__":
    main()
