"""One rule for "this machine" (zhin_cli.core.loopback): serve's Host guard and the live tier's local-server check agree
(they used to differ on a trailing dot and on ``*.localhost``)."""

from __future__ import annotations

import pytest

from zhin_cli.core.loopback import is_loopback_name, loopback_authority
from zhin_cli.tools.eval.live import is_loopback_url

CASES = [("localhost", True), ("LOCALHOST.", True), ("models.localhost", True), ("127.0.0.1", True), ("127.9.8.7", True),
         ("::1", True), ("localhost.evil.example", False), ("evil-localhost", False), ("10.0.0.1", False),
         ("example.com", False), ("::2", False)]


@pytest.mark.parametrize(("name", "loopback"), CASES)
def test_every_caller_reads_a_host_name_the_same_way(name: str, loopback: bool) -> None:
    bracketed = f"[{name}]" if ":" in name else name
    assert is_loopback_name(name) is loopback
    assert loopback_authority(bracketed) is loopback
    assert loopback_authority(f"{bracketed}:8000") is loopback
    assert is_loopback_url(f"http://{bracketed}:8000/v1") is loopback
