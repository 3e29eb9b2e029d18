"""The World Info scan (pipeline/preset/worldinfo.py) on large and hostile books (issue 30 item 1).

Seconds of one ``activate`` call for:

* ``keywords``: 2,000 and 5,000 keyword entries (3 keys each, none found) against 200 messages at scan depth 200;
* ``budget``: 100 / 300 / 1,000 constant entries of 50 words under a budget that does not bind, counted with
  zhin's o200k token counter (ST recounts the whole new text after every entry);
* ``chain``: 300 and 1,000 entries each naming the next one's key (recursion; zhin stops at ``MAX_PASSES``).

The code measured is the ``zhin_cli`` Python imports: for the code before a change, run this script with
``PYTHONPATH`` set to an export of an older commit (``git archive <commit> zhin_cli | tar -x -C /tmp/old``).
Absolute numbers depend on the machine; compare runs made on one machine.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from zhin_cli.core.tokens import counter
from zhin_cli.pipeline.preset import worldinfo as wi

RNG = random.Random(2)
WORDS = ["".join(RNG.choice("abcdefghijklmnop") for _ in range(RNG.randint(4, 9))) for _ in range(5000)]


def _text(words: int) -> str:
    return " ".join(RNG.choice(WORDS) for _ in range(words))


def _timed(entries: tuple[wi.Entry, ...], chat: list[str], depth: int, tokens: Callable[[str], int]) -> tuple[int, float]:
    world = wi.WorldInfo((wi.Book("B", "global", entries),), wi.Settings(depth=depth))
    started = time.perf_counter()
    fired = wi.activate(world, chat, expand=lambda s: s, count_tokens=tokens, max_context=10**9, seed="x").fired
    return len(fired), time.perf_counter() - started


def main() -> None:
    for count in (2000, 5000):
        entries = tuple(wi.Entry(uid=str(i), world="B", content=_text(30), order=i,
                                 keys=tuple(RNG.choice(WORDS) + "zz" for _ in range(3))) for i in range(count))
        fired, seconds = _timed(entries, [_text(80) for _ in range(200)], 200, len)
        print(f"keywords  {count:>5} entries, depth 200: {fired} fired, {seconds:.2f} s")
    for count in (100, 300, 1000):
        entries = tuple(wi.Entry(uid=str(i), world="B", content=_text(50), constant=True, order=RNG.randint(0, 200),
                                 position=i % 2) for i in range(count))
        fired, seconds = _timed(entries, ["Hal: hi"], 2, counter().count)
        print(f"budget    {count:>5} constant entries: {fired} fired, {seconds:.2f} s")
    for count in (300, 1000):
        entries = tuple(wi.Entry(uid=str(i), world="B", content=f"link{i + 1} " + "filler words here " * 5,
                                 keys=(f"link{i}",), order=i) for i in range(count))
        fired, seconds = _timed(entries, ["Hal: link0"], 2, len)
        print(f"chain     {count:>5} entries: {fired} fired, {seconds:.2f} s")


if __name__ == "__main__":
    main()
