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

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

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
        """Register ``item`` under ``name``; a name already taken is :class:`DuplicateName` unless ``replace``.

        Inside :func:`recording` (a plugin registering), the plugin owns what it adds and the ledger can undo it;
        the same plugin's equal item registered again (a base and a head config loading one plugin) is shared."""
        ledger = _active_ledger()
        if ledger is not None and owner == BUILTIN:
            owner = ledger.owner
        with _lock:  # eval loads one plugin for several cases on worker threads: check and set at once
            if ledger is not None and name in self and self[name] == item and self.owners.get(name) == owner:
                ledger.shared(self, name)
                return item
            if name in self and not replace:
                raise DuplicateName(self.duplicate_message(name, owner))
            if ledger is not None:
                ledger.changed(self, name)
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
        ledger = _active_ledger()
        with _lock:
            if ledger is not None and name in self:
                ledger.changed(self, name)
            self.owners.pop(name, None)
            return self.pop(name, None)

    def duplicate_message(self, name: str, owner: str) -> str:
        first = self.owners.get(name, BUILTIN)
        who = f" (registered by {first}, again by {owner})" if (first, owner) != (BUILTIN, BUILTIN) else ""
        return f"duplicate {self.what} {name!r}{who}"


# --- a plugin's registrations, undone when it is released ------------------------------------------------------

_ABSENT = object()


@dataclass
class _Change:
    registry: Registry[Any]
    name: str
    before: object  # the item the name held before the plugin changed it, or _ABSENT
    before_owner: str | None
    shares: int = 0  # the same plugin's equal item registered again: released last, by the last holder


@dataclass
class Ledger:
    """What one plugin registered, in every registry: :meth:`undo` puts each name back as it was before."""

    owner: str
    changes: list[_Change] = field(default_factory=list)
    _by_name: dict[tuple[int, str], _Change] = field(default_factory=dict)

    def changed(self, registry: Registry[Any], name: str) -> None:
        key = (id(registry), name)
        if key not in self._by_name:  # the first change keeps the state to restore
            change = _Change(registry, name, registry.get(name, _ABSENT), registry.owners.get(name))
            self._by_name[key] = change
            self.changes.append(change)

    def shared(self, registry: Registry[Any], name: str) -> None:
        holder = _SHARES.get((id(registry), name))
        if holder is not None:
            holder.shares += 1
        self.changes.append(_Change(registry, name, _SHARED, None))

    def undo(self) -> None:
        """Restore every name this plugin changed, latest first; a shared name stays until its last holder goes."""
        with _lock:
            for change in reversed(self.changes):
                _undo(change)
        self.changes.clear()
        self._by_name.clear()

    @property
    def names(self) -> list[tuple[str, str]]:
        """``(registry kind, name)`` of everything registered (for messages and tests)."""
        return [(change.registry.what, change.name) for change in self.changes if change.name in change.registry]


_SHARED = object()
_SHARES: dict[tuple[int, str], _Change] = {}  # a plugin's change of a name that a later equal registration shares
_state = threading.local()
_lock = threading.RLock()  # the registries and the shares, changed by plugin loads on several threads


def _undo(change: _Change) -> None:
    registry, name, key = change.registry, change.name, (id(change.registry), change.name)
    holder = _SHARES.get(key) if change.before is _SHARED else change
    if holder is None:
        return
    if holder.shares > 0:  # another load of the same plugin still holds the item
        holder.shares -= 1
        return
    _SHARES.pop(key, None)
    if holder.before is _ABSENT:
        registry.owners.pop(name, None)
        registry.pop(name, None)
    else:
        registry[name] = holder.before
        registry.owners[name] = holder.before_owner or BUILTIN


def _active_ledger() -> Ledger | None:
    """The ledger of the plugin registering now on this thread — unless a zhin_cli module is being imported (its
    import-time registrations are built-ins, whichever plugin's ``import`` happened to load it)."""
    stack: list[Ledger] = getattr(_state, "stack", [])
    if not stack or _importing_zhin():
        return None
    return stack[-1]


def _importing_zhin() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and str(frame.f_globals.get("__name__", "")).startswith("zhin_cli."):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


@contextmanager
def recording(owner: str) -> Iterator[Ledger]:
    """Every registration made on this thread inside the block, in any registry, is ``owner``'s and recorded in
    the ledger yielded (undo it to release the plugin). Nested blocks record into the innermost."""
    ledger = Ledger(owner)
    stack: list[Ledger] = getattr(_state, "stack", None) or []
    _state.stack = stack
    stack.append(ledger)
    try:
        yield ledger
    finally:
        stack.pop()
        with _lock:
            for change in ledger.changes:
                if change.before is not _SHARED:
                    _SHARES[(id(change.registry), change.name)] = change
