"""Named registries — provider profiles, renderers, validators, wire formats, segments, data sources, JSONL line
types, usage kinds, macros, eval assertions / steps / transforms, economy cases, serve dialects — and the ONE
rule they share for a name registered twice.

The rule: **a duplicate name is an error** (:class:`DuplicateName`, a ``ConfigError``: one ``zhin: error:`` line
when a plugin causes it, and a ``ValueError`` for code that registers at import time). A second registration
that silently wins would make the behaviour depend on import order — which plugin loaded last, whether a module
happened to be imported — and one that silently loses would make a plugin's override do nothing. Replacing is
allowed only when asked for: ``replace=True`` says "I override this on purpose" (a local-template renderer
wrapping the OpenAI one; a user's plugin overriding a built-in macro).

A registry is a ``dict`` for reading (``name in R``, ``R[name]``, ``sorted(R)``, ``R.values()`` in registration
order), so every reader stays as it was; writing goes through :meth:`Registry.add` or the decorator
:meth:`Registry.adding`. Item assignment is the dict's own and is left to test fixtures (``monkeypatch.setitem``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from zhin_cli.core.errors import ConfigError

T = TypeVar("T")
BUILTIN = "builtin"


class DuplicateName(ConfigError, ValueError):
    """A name registered twice without ``replace=True``."""


class Registry(dict[str, T]):
    """Named things of one kind (``what`` names the kind in errors: "duplicate validator 'openai-chat'")."""

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what
        self.owners: dict[str, str] = {}  # who registered each name: "builtin", a plugin, "zhin.yaml"

    def add(self, name: str, item: T, *, replace: bool = False, owner: str = BUILTIN) -> T:
        """Register ``item`` under ``name``; a name already taken is :class:`DuplicateName` unless ``replace``."""
        if name in self and not replace:
            raise DuplicateName(self.duplicate_message(name, owner))
        self[name] = item
        self.owners[name] = owner
        return item

    def adding(self, *names: str, replace: bool = False) -> Callable[[T], T]:
        """Decorator: ``@VALIDATORS.adding("openai-chat")`` registers the function under each name (aliases)."""

        def add(item: T) -> T:
            for name in names:
                self.add(name, item, replace=replace)
            return item

        return add

    def remove(self, name: str) -> T | None:
        """Unregister ``name`` (a released plugin generation); absent names are ignored."""
        self.owners.pop(name, None)
        return self.pop(name, None)

    def duplicate_message(self, name: str, owner: str) -> str:
        first = self.owners.get(name, BUILTIN)
        who = f" (registered by {first}, again by {owner})" if (first, owner) != (BUILTIN, BUILTIN) else ""
        return f"duplicate {self.what} {name!r}{who}"
