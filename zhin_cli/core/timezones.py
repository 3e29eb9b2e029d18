"""Time zone names: one check for every place a user names a zone (zhin.yaml, a session line, a database row,
``--timezone``, an eval case).

It sits in ``core`` because the config stage, the data sources and the tools all need it, and none of them should
import another layer's module for one function (it used to live in ``store/payload.py``, so the config stage
imported the store's JSON payload checks).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TypeVar, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


def valid_timezone(name: str) -> bool:
    """An IANA time zone name (``Asia/Shanghai``). ``Asia`` (a folder), ``/etc/passwd`` or ``../x`` are not."""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


# Where a session's zone came from, in the order one is chosen (issue 28): the user's option, zhin.yaml, the
# session's stored zone, the zone the data names (upstream's ``[Turn context]``), the environment's TZ, UTC.
ZONE_SOURCES = ("--timezone", "zhin.yaml", "session", "data", "TZ", "default")


def choose_timezone(option: str | None, configured: str | None, session_zone: str | None,
                    session_source: str | None, environ_tz: str | None) -> tuple[str, str]:
    """The zone requests are rendered in and where it came from (one of ``ZONE_SOURCES``). ``session_source``
    says whether the session's zone was stored (``session``) or read from its data (``data``); a ``TZ`` that is
    not an IANA name (``JST-9``, ``:/etc/localtime``) is passed over."""
    if option:
        return option, "--timezone"
    if configured:
        return configured, "zhin.yaml"
    if session_zone:
        return session_zone, "data" if session_source == "data" else "session"
    zone = environ_zone(environ_tz)
    if zone is not None:
        return zone, "TZ"
    return "UTC", "default"


def environ_zone(environ_tz: str | None) -> str | None:
    """The IANA zone a ``TZ`` value names, else None. POSIX lets ``TZ`` start with ``:`` ("implementation-defined":
    glibc reads the rest as a zone file name), so ``:Asia/Shanghai`` is ``Asia/Shanghai``; a path
    (``:/etc/localtime``) or a POSIX rule (``JST-9``) names no IANA zone."""
    zone = (environ_tz or "").strip().removeprefix(":")
    return zone if zone and valid_timezone(zone) else None


def iso_ms(value: int | None) -> str | None:
    """A ms epoch as ISO 8601 in UTC (``2025-10-30T14:02:00.000Z``), written beside the number in ``--json``."""
    if value is None:
        return None
    try:
        return datetime.fromtimestamp(value / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return None


def human_ms(value: int, *, seconds: bool = False, zone: str | None = None) -> str:
    """A ms epoch for people: ``2025-10-30 14:02 UTC`` (``seconds``: ``2025-10-30 14:02:10``, a table column's UTC);
    ``zone`` (an IANA name): that zone's local time, named (``2026-10-17 12:13 Asia/Tokyo``). A value no calendar
    holds is said in words, never an OverflowError."""
    try:
        moment = datetime.fromtimestamp(value / 1000, UTC if zone in (None, "UTC") else ZoneInfo(str(zone)))
    except (OverflowError, OSError, ValueError):
        return "the beginning of time" if value < 0 else "the end of time"
    if seconds:
        return moment.strftime("%Y-%m-%d %H:%M:%S")
    return moment.strftime(f"%Y-%m-%d %H:%M {zone or 'UTC'}")


def _is_time_key(key: str) -> bool:
    return key.endswith(("_at", "_until")) or key in ("last_activity", "time", "timestamp")


T = TypeVar("T")

MS_EPOCHS = range(10**11, 10**14)  # 1973–5138 in milliseconds: a 0 ("never") or a count of seconds is not a time


def with_iso_times(value: T) -> T:
    """``value`` (JSON data) with ``<key>_iso`` beside every ms-epoch time (``updated_at``, ``last_activity``, …):
    machines keep the number, people and scripts in other languages get the ISO string (issue 17 §3)."""
    data: object = value
    if isinstance(data, list):
        return cast(T, [with_iso_times(item) for item in data])
    if not isinstance(data, dict):
        return value
    out: dict[object, object] = {}
    for key, item in data.items():
        out[key] = with_iso_times(item)
        if (isinstance(key, str) and _is_time_key(key) and isinstance(item, int) and not isinstance(item, bool)
                and item in MS_EPOCHS and f"{key}_iso" not in data):
            out[f"{key}_iso"] = iso_ms(item)
    return cast(T, out)  # the same shape, with the ``_iso`` keys added
