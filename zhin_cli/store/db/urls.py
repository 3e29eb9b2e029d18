"""Where a database is: ``--db`` as an SQLite path or a server URL (``DatabaseRef``), the server dialects zhin
knows, and a driver's error as one masked line."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote

from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError, DBAPIError

from zhin_cli.core.errors import UsageError
from zhin_cli.core.redact import is_secret_parameter, mask_url, redact_text, remember_secret, split_userinfo


@dataclass(frozen=True)
class ServerDialect:
    """How one kind of database server is reached: the SQLAlchemy driver and how to keep reads read-only."""

    drivername: str
    read_only_connect_args: dict[str, Any]
    connect_args: dict[str, Any]
    # The driver is an optional extra of the package (pip install 'zhin-cli[postgres]'): its module, the server's
    # name and the extra's name, for the one-line error when it is not installed.
    driver_module: str = ""
    server_name: str = ""
    extra: str = ""
    scheme: str = ""


POSTGRES = ServerDialect(
    drivername="postgresql+psycopg",
    # Every transaction on a reading connection is READ ONLY: the server itself refuses a write.
    read_only_connect_args={"options": "-c default_transaction_read_only=on"},
    connect_args={"connect_timeout": 10},
    driver_module="psycopg",
    server_name="PostgreSQL",
    extra="postgres",
    scheme="postgresql",
)

MYSQL = ServerDialect(
    drivername="mysql+pymysql",
    # Every transaction on a reading connection is READ ONLY: the server refuses a write.
    read_only_connect_args={"init_command": "SET SESSION TRANSACTION READ ONLY"},
    connect_args={"connect_timeout": 10, "charset": "utf8mb4"},
    driver_module="pymysql",
    server_name="MySQL/MariaDB",
    extra="mysql",
    scheme="mysql",
)

# URL scheme → dialect. A new server kind is one entry here (and a pinned driver in pyproject.toml).
SERVER_DIALECTS: dict[str, ServerDialect] = {
    "postgresql": POSTGRES,
    "postgres": POSTGRES,
    "postgresql+psycopg": POSTGRES,
    "mysql": MYSQL,
    "mariadb": MYSQL,
    "mysql+pymysql": MYSQL,
}

@dataclass(frozen=True)
class DatabaseRef:
    url: str = field(repr=False)  # holds the password: never shown
    label: str  # what messages call it (a path, or the masked URL: zhin_cli.core.redact.mask_url)
    sqlite_path: Path | None
    server: ServerDialect | None = None


def parse_db(value: str) -> DatabaseRef:
    """``sqlite:///path``, a bare file path, or a server URL (``postgresql://``, ``postgres://``, ``mysql://``,
    ``mariadb://``).

    A server URL is parsed here, not by SQLAlchemy's ``make_url`` (which ends the password at its first ``@``
    and sends the rest to DNS as a host name): the user information ends at the last ``@``, as in
    ``zhin_cli.core.redact``, so the host that is connected to is the host that messages show. The label is the
    masked URL (``scheme://***@host/db``, password-like query values ``***``); the password is remembered so
    that ``db_error`` hides it wherever a driver repeats it."""
    if value.startswith("sqlite:///"):
        path = Path(value[len("sqlite:///") :])
        return DatabaseRef(url=value, label=str(path), sqlite_path=path)
    if re.match(r"^[a-z][a-z0-9+]*://", value):
        scheme = value.split("://", 1)[0]
        masked = mask_url(value)
        server = SERVER_DIALECTS.get(scheme)
        if server is None:
            known = ", ".join(sorted({*SERVER_DIALECTS, "sqlite"}))
            raise UsageError(f"--db {masked}: unknown database URL scheme {scheme!r} (known: {known})")
        url = _server_url(value[len(scheme) + 3 :], server.drivername, masked)
        remember_secret(url.password)
        for name, given in url.query.items():
            if is_secret_parameter(name):
                for secret in (given,) if isinstance(given, str) else given:
                    remember_secret(secret)
        return DatabaseRef(url=url.render_as_string(hide_password=False), label=masked, sqlite_path=None, server=server)
    path = Path(value)
    return DatabaseRef(url=f"sqlite:///{path}", label=str(path), sqlite_path=path)


def _server_url(rest: str, drivername: str, masked: str) -> URL:
    """``[user[:password]@]host[:port][/database][?query]`` (after ``scheme://``) as a SQLAlchemy URL.

    Like ``make_url``: user, password and database are percent-decoded, the query is ``parse_qsl``'d. Unlike it:
    the last ``@`` ends the user information, an IPv6 host must be bracketed and closed, and a port is a number
    1–65535 — anything else is a usage error naming the masked URL."""

    def bad(why: str) -> UsageError:
        return UsageError(f"--db {masked}: not a database URL ({why})")

    userinfo, rest = split_userinfo(rest)
    username = password = None
    if userinfo is not None:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    rest, question, query_text = rest.partition("?")
    authority, slash, database_text = rest.partition("/")
    database = unquote(database_text) if slash and database_text else None
    if authority.startswith("["):
        close = authority.find("]")
        if close < 0:
            raise bad("unclosed '[' in the host")
        host, port_text = authority[1:close], authority[close + 1 :]
        if port_text and not port_text.startswith(":"):
            raise bad("text after the bracketed host")
        port_text = port_text[1:]
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            raise bad("not an IPv6 address in brackets") from None
    else:
        host, _colon, port_text = authority.partition(":")
        if ":" in port_text:
            raise bad("an IPv6 address must be written in brackets, [::1]")
        if re.search(r"[\[\]\s]", host):
            raise bad("a host name holds no brackets or spaces")
    port = None
    if port_text:
        if not port_text.isascii() or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise bad("the port must be a number from 1 to 65535")
        port = int(port_text)
    query: dict[str, str | list[str]] = {}
    if question:
        for name, given in parse_qsl(query_text, keep_blank_values=True):
            known = query.get(name)
            if known is None:
                query[name] = given
            else:
                query[name] = [*([known] if isinstance(known, str) else known), given]
    try:
        return URL.create(drivername, username=username, password=password, host=host or None, port=port,
                          database=database, query=query)
    except (ArgumentError, TypeError, ValueError) as error:
        raise bad(str(error)) from None


def db_error(exc: BaseException) -> str:
    """A driver's error as one line (server messages span several), with every URL, ``password=…`` pair and
    known password masked (``zhin_cli.core.redact``)."""
    original = exc.orig if isinstance(exc, DBAPIError) else exc
    lines = [line.strip() for line in str(original).splitlines() if line.strip()]
    return redact_text(lines[0]) if lines else type(original).__name__

