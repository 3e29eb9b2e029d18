"""Whether a host name means this machine — one rule for every place that asks: the conformance server's
DNS-rebinding guard (``Host``, ``Origin``), the address it binds, and the live tier's "is this model server local"
check. ``localhost`` and its subdomains (RFC 6761), a trailing dot ignored, and any loopback IP."""

from __future__ import annotations

import ipaddress
import re

from zhin_cli.core.errors import UsageError


def is_loopback_name(name: str) -> bool:
    """``name`` (a bare host: no port, no brackets) names this machine."""
    name = name.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def loopback_authority(value: str) -> bool:
    """Whether a ``Host`` value (``name[:port]``, ``[v6][:port]``) names this machine: ``localhost`` or a loopback IP."""
    value = value.strip()
    if value.startswith("["):
        name, _, rest = value[1:].partition("]")
        if rest and not re.fullmatch(r":\d{1,5}", rest):
            return False
    elif value.count(":") == 1:
        name, _, port = value.partition(":")
        if not re.fullmatch(r"\d{1,5}", port):
            return False
    else:
        name = value
    return is_loopback_name(name)


def loopback_host(host: str, command: str) -> str:
    """The address ``command`` (``zhin serve``, ``zhin view``) binds for ``--host``; anything that is not loopback is a
    usage error (the servers answer with whole conversations)."""
    if host.lower().rstrip(".") == "localhost":
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        address = None
    if address is None or not address.is_loopback:
        raise UsageError(f"--host {host!r} is not a loopback address; {command} only listens on 127.0.0.1, ::1 or localhost")
    return str(address)
