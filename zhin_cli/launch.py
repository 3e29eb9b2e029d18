"""The ``zhin`` console script and ``python -m zhin_cli``: signal handlers first, then the commands.

Kept free of heavy imports on purpose (see ``zhin_cli.signals``): a SIGTERM or Ctrl-C while the commands load
ends the process with 143/130 and no traceback, like one during a command.
"""

from __future__ import annotations

import sys

from zhin_cli.core.errors import EXIT_INTERRUPTED, EXIT_TERMINATED
from zhin_cli.signals import install_signal_handlers, terminated_by_sigterm


def main() -> None:
    install_signal_handlers()
    try:
        from zhin_cli._cli import main as cli_main
    except KeyboardInterrupt:  # nothing ran yet: nothing to clean up, nothing to say
        sys.exit(EXIT_TERMINATED if terminated_by_sigterm() else EXIT_INTERRUPTED)
    cli_main()
