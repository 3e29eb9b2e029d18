"""Deprecated: ``zhin_cli.segments.builtin`` moved to ``zhin_cli.pipeline.segments.builtin``; kept for one release."""

from __future__ import annotations

from typing import Any

import zhin_cli.segments  # noqa: F401  (the package warns once)
from zhin_cli.pipeline.segments import builtin as _moved


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)


def __dir__() -> list[str]:
    return dir(_moved)
