"""The ``zhin`` console script and ``python -m zhin_cli``: signal handlers first, then the commands.

Kept free of imports on purpose (see ``zhin_cli.signals``): everything before ``install_signal_handlers`` — the
interpreter's own start, ``site``, this package's ``__init__``, this module and ``zhin_cli.signals`` — is a window in
which Ctrl-C prints the interpreter's traceback and SIGTERM kills the process outright, so that window holds nothing
but them. From the handlers on, a SIGTERM or Ctrl-C while the commands load ends the process with 143/130 and no
traceback, like one during a command.
"""

from __future__ import annotations

import sys

from zhin_cli.signals import install_signal_handlers, interrupted_status


def main() -> None:
    install_signal_handlers()
    try:
        from zhin_cli._cli import main as cli_main
    except KeyboardInterrupt:  # nothing ran yet: nothing to clean up, nothing to say (and nothing more to import)
        sys.exit(interrupted_status())
    cli_main()
