"""Deprecated: ``zhin_cli.segments`` moved to ``zhin_cli.pipeline.segments`` (271b824). Import from ``zhin_cli.api``.

Kept for one release so a plugin written against the old path still loads; it warns (DeprecationWarning) once,
when first imported. Every name of the new module reads through, private ones included.
"""

from __future__ import annotations

import warnings
from typing import Any

from zhin_cli.pipeline import segments as _moved

MOVED_TO = "zhin_cli.pipeline.segments"
warnings.warn("zhin_cli.segments is deprecated and goes in the next release: import from zhin_cli.api "
              f"(or {MOVED_TO})", DeprecationWarning, stacklevel=2)


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)


def __dir__() -> list[str]:
    return dir(_moved)
