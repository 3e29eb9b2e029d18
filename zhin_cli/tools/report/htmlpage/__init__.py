"""The page assets of ``zhin report html`` (``report.css``, ``report.js``): read with ``importlib.resources``
and inlined into every report, so the file needs nothing beside it (zhin_cli/tools/report/html.py)."""
