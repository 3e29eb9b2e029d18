"""Corpus plugin: registers a segment under a built-in id."""

from typing import Any

from zhin_cli.pipeline.segments import TextSegment


def register(generation: Any) -> None:
    generation.register(TextSegment("core.rules", "system", "my own rules"))
