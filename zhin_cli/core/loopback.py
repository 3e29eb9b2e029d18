"""Whether a host name means this machine — one rule for every place that asks: the conformance server's
DNS-rebinding guard (``Host``, ``Origin``), the address it binds, and the live tier's "is this model server local"
check. ``localhost`` and its subdomains (RFC 6761), a trailing dot ignored, and any loopback IP."""

from __future__ import annotations

import ipaddress


def is_loopback_name(name: str) -> bool:
    """``name`` (a bare host: no port, no brackets) names this machine."""
    name = name.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
