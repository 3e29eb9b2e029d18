"""``zhin report window``: the window sweep (library: ``zhin_cli.tools.windowsweep``). Registered on ``report_app``
when ``zhin_cli._cli.report`` is imported."""

from __future__ import annotations

from zhin_cli._cli.report import report_app  # noqa: F401
