"""``zhin report``: the command group its subcommands register on — ``economy`` and ``html`` in ``report.py``,
``window`` in ``report_window.py``. In a module of its own so that both import it and neither imports the other
back (``report`` imports ``report_window`` to register it; the group lives below both)."""

from __future__ import annotations

import typer

from zhin_cli._cli import app

report_app = typer.Typer(help="Reports over stored sessions.", no_args_is_help=True)
app.add_typer(report_app, name="report")
