"""Stored rows are untrusted JSON (issue 32: narrowed with isinstance): a ``[User]{…}`` prefix whose ``roles`` is
a number, or an actor whose roles are not a list, reads as no roles — never a Python TypeError — while the
shapes upstream writes (a list, a comma-separated string) keep their roles (the control)."""

from __future__ import annotations

import pytest

from zhin_cli.store.legacy import actor_from_sender, strip_text_prefix


@pytest.mark.parametrize("roles", ["5", "true", "2.5"])
def test_a_user_prefix_with_scalar_roles_has_no_roles(roles: str) -> None:
    text, actor = strip_text_prefix('[User]{"id": 10002, "name": "Bob", "roles": ' + roles + "}hello")
    assert text == "hello" and actor is not None
    assert (actor.subject_id, actor.display_name, actor.roles) == ("10002", "Bob", ())


def test_a_user_prefix_keeps_listed_and_comma_separated_roles() -> None:
    _, listed = strip_text_prefix('[User]{"id": 1, "roles": ["admin", "vip"]}hi')
    _, joined = strip_text_prefix('[User]{"id": 1, "roles": "admin,vip"}hi')
    assert listed is not None and joined is not None
    assert listed.roles == joined.roles and listed.platform_role == joined.platform_role == "admin"


def test_a_sender_with_scalar_roles_has_no_roles() -> None:
    assert actor_from_sender({"id": 7, "name": "Ann", "roles": 5}).roles == ()
    assert actor_from_sender({"id": 7, "roles": ["owner"]}).platform_role == "owner"  # control
