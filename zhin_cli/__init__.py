"""zhin — the ADR 0041 prompt assembler and the tools around it.

``from zhin_cli import Pipeline`` is the library's entry point (``zhin_cli.pipeline.facade``). It is loaded on
first use (PEP 562), so ``import zhin_cli`` — the first thing the console script does, before its signal
handlers — stays as cheap as this file.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (checkers treat the name alike)
__version__ = "0.1.0"
__all__ = ["Pipeline", "__version__"]

if TYPE_CHECKING:
    from typing import Any

    from zhin_cli.pipeline.facade import Pipeline


def __getattr__(name: str) -> Any:
    if name == "Pipeline":
        from zhin_cli.pipeline.facade import Pipeline

        return Pipeline
    raise AttributeError(f"module 'zhin_cli' has no attribute {name!r}")
