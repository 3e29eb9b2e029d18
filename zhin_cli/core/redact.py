"""Credentials are never shown: the one place that decides what of a URL or a message may be printed or stored.

* ``mask_url(url)`` — everything between ``://`` and the **last** ``@`` becomes ``***`` (user name and password:
  a password may hold an unencoded ``@``, so the first ``@`` is not the end of it), and the value of every
  password-like query parameter (``password``, ``pwd``, ``token``, ``api_key``, ``sslpassword`` …, any case)
  becomes ``***``. Used for every ``--db`` value, live-model base URL and engine URL a message names.
* ``redact_text(text)`` — the same for free text (a driver's or a server's error message): every URL in it is
  masked, ``password=…``-style ``key=value`` pairs too, and every secret ``remember_secret`` was told about
  (the password parsed out of a ``--db`` URL) is replaced with ``***`` wherever it appears.
* ``split_userinfo(rest)`` — where the user information of ``scheme://rest`` ends, by the same rule as
  ``mask_url``, so what is used to connect and what is shown agree.

A URL whose path or query holds an ``@`` must write it ``%40``: by the rule above everything up to the last ``@``
is user information (shown as ``***``, never leaked, never used as a host name).
"""

from __future__ import annotations

import re
import threading
from urllib.parse import unquote_plus

MASK = "***"

# Query parameters (and ``key=value`` pairs in messages) whose value is a secret, compared case-insensitively
# with ``-`` read as ``_``.
SECRET_PARAMETERS = frozenset({
    "password", "passwd", "pass", "pwd", "secret", "client_secret", "token", "access_token", "refresh_token",
    "auth_token", "id_token", "api_key", "apikey", "key", "sslpassword", "sslkey_password", "private_key",
    "signature", "sig", "credentials", "auth",
})
_SECRET_SUFFIXES = ("password", "passwd", "secret", "token", "apikey", "api_key")
MIN_REMEMBERED = 3  # shorter remembered secrets are not replaced in free text (they would garble every message)

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>`]+")
# ``password=x`` / ``password='x y'`` (libpq conninfo, query strings) and ``"password": "x"`` (JSON)
_PAIR_IN_TEXT = re.compile(
    r"(?P<key>[A-Za-z_][A-Za-z0-9_\-]*)(?P<sep>\s*=\s*)(?P<value>'[^']*'|\"[^\"]*\"|[^\s&;,'\")]+)"
    r"|(?P<q>[\"'])(?P<jkey>[A-Za-z_][A-Za-z0-9_\-]*)(?P=q)(?P<jsep>\s*:\s*)(?P<jvalue>\"(?:[^\"\\]|\\.)*\"|'[^']*')")

_remembered: set[str] = set()
_lock = threading.Lock()


def is_secret_parameter(name: str) -> bool:
    key = unquote_plus(name).strip().lower().replace("-", "_")
    return key in SECRET_PARAMETERS or key.endswith(_SECRET_SUFFIXES)


def split_userinfo(rest: str) -> tuple[str | None, str]:
    """``rest`` (what follows ``scheme://``) as (user information or None, the remainder): the separator is the
    **last** ``@``, so ``bot:pa@ss@host/db`` is user ``bot``, password ``pa@ss``, host ``host``."""
    userinfo, at, remainder = rest.rpartition("@")
    return (userinfo, remainder) if at else (None, rest)


def _mask_query(query: str) -> str:
    parts = re.split(r"([&;])", query)
    for i in range(0, len(parts), 2):
        name, eq, _value = parts[i].partition("=")
        if eq and is_secret_parameter(name):
            parts[i] = f"{name}={MASK}"
    return "".join(parts)


def mask_url(url: str) -> str:
    """The URL as it may be shown: no user information, no secret query values (see the module docstring)."""
    match = _SCHEME.match(url)
    if match is None:
        head, rest = "", url
    else:
        head, rest = url[: match.end()], url[match.end() :]
        userinfo, rest = split_userinfo(rest)
        if userinfo is not None:
            rest = f"{MASK}@{rest}"
    path, question, query = rest.partition("?")
    if not question:
        return head + rest
    query, hash_, fragment = query.partition("#")
    return head + path + question + _mask_query(query) + hash_ + fragment


def remember_secret(value: str | None) -> None:
    """From now on ``redact_text`` replaces ``value`` wherever it appears (the password of a URL in use)."""
    if value and len(value) >= MIN_REMEMBERED:
        with _lock:
            _remembered.add(value)


def _mask_pair(match: re.Match[str]) -> str:
    if match["key"] is not None:
        if not is_secret_parameter(match["key"]):
            return match[0]
        value = match["value"]
        # unquoted, the punctuation ending the clause (`password=x: refused`) is the sentence's, not the secret's
        bare = value.rstrip(".,:;!?)")
        tail = "" if value[:1] in "'\"" or not bare else value[len(bare):]
        return f"{match['key']}{match['sep']}{MASK}{tail}"
    if not is_secret_parameter(match["jkey"]):
        return match[0]
    quote = match["q"]
    return f"{quote}{match['jkey']}{quote}{match['jsep']}\"{MASK}\""


def _mask_url_in_text(match: re.Match[str]) -> str:
    """A URL inside a sentence: the punctuation that ends the sentence or clause (``…/db?password=x: cannot``) is
    not part of it, so it is kept after the masked URL instead of being masked with the last query value."""
    url = match[0]
    bare = url.rstrip(".,:;!?)")
    return mask_url(bare) + url[len(bare):]


def redact_text(text: str) -> str:
    """A message with every URL masked, every ``password=…`` pair masked and every remembered secret replaced."""
    with _lock:
        remembered = sorted(_remembered, key=len, reverse=True)
    for secret in remembered:
        text = text.replace(secret, MASK)
    text = _URL_IN_TEXT.sub(_mask_url_in_text, text)
    return _PAIR_IN_TEXT.sub(_mask_pair, text)
