"""Time zone names: one check for every place a user names a zone (zhin.yaml, a session line, a database row,
``--timezone``, an eval case).

It sits in ``core`` because the config stage, the data sources and the tools all need it, and none of them should
import another layer's module for one function (it used to live in ``store/payload.py``, so the config stage
imported the store's JSON payload checks).
"""

from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


def valid_timezone(name: str) -> bool:
    """An IANA time zone name (``Asia/Shanghai``). ``Asia`` (a folder), ``/etc/passwd`` or ``../x`` are not."""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True
