"""``python -m zhin_cli``: the same entry point as the ``zhin`` console script.

``python -m`` puts the current folder first on ``sys.path``; in a checkout nobody trusted, a file there named like a
module zhin imports (``http.py``, ``yaml.py``) or a ``module:function`` plugin would then run. The console script has
no such entry, so drop it here too: only the installed packages are importable.
"""

import os
import sys

if sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from zhin_cli.launch import main  # noqa: E402

main()
