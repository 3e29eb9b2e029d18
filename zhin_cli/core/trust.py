"""Which configs may run plugin code: ``zhin.yaml`` ``plugins:`` and eval case plugins are Python.

A plugin loads only from a source the user vouched for (docs/safety.md "Plugins and trust"):

- ``given`` — a config named on the command line (``--config``, ``ZHIN_CONFIG``, a ``--base``/``--head`` file),
  or built by a library caller: naming the file is the decision.
- ``found`` — a ``zhin.yaml`` found upward from the current folder: only with ``zhin --allow-plugins``
  (``ZHIN_ALLOW_PLUGINS=1``) or after ``zhin trust FILE`` recorded its path and the SHA-256 of it and of every
  plugin file it names, and the installed release of each entry point (``entry:<name>``) it names. A changed
  config or plugin file, or an upgraded plugin package, needs ``zhin trust`` again.
- ``case`` — an eval case file's ``config: {plugins}`` and ``plugin: {load}`` steps: like ``found`` (the case
  file is what gets trusted); plugin files must resolve inside the case's folder.
- ``ref`` — the config of a git ref (``--base``/``--head``): only with ``zhin --allow-ref-plugins``
  (``ZHIN_ALLOW_REF_PLUGINS=1``); plugin files must resolve inside the extracted tree.

The trust store is ``$XDG_CONFIG_HOME/zhin/trusted.json`` (default ``~/.config/zhin/trusted.json``), never in
the checkout. Refusals are one :class:`UntrustedPlugins` line (exit 3; 2 for ``prefix-diff``), fail closed.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from zhin_cli.core.errors import ConfigError, OutputError
from zhin_cli.core.outputfiles import atomic_output

STORE_VERSION = 1
ENV_ALLOW = "ZHIN_ALLOW_PLUGINS"
ENV_ALLOW_REF = "ZHIN_ALLOW_REF_PLUGINS"
_TRUE = {"1", "true", "t", "yes", "y", "on"}
Kind = Literal["given", "found", "case", "ref"]

# Set by the CLI's global ``--allow-plugins`` / ``--allow-ref-plugins`` for one command (a plain global, not a
# ContextVar: eval prepares and runs cases on worker threads, which do not inherit context variables).
_allowed: dict[str, bool] = {"plugins": False, "ref": False}
_store_lock = threading.Lock()


class UntrustedPlugins(ConfigError):
    """Plugin code from a source the user has not trusted: nothing of it ran."""


@dataclass(frozen=True)
class PluginSource:
    """Where a config's plugins come from, and so what lets them run (see the module docstring)."""

    kind: Kind = "given"
    file: Path | None = None  # the file that is trusted (zhin.yaml, the case file)
    root: Path | None = None  # plugin files must resolve inside this folder (ref tree, case folder)
    ref: str = ""  # a ref source: the ref as given ("main") …
    label: str = ""  # … and how messages name it ("git ref 'main' (3f2a1c9)")

    @classmethod
    def case(cls, file: Path) -> PluginSource:
        return cls("case", file, file.parent)

    def shown(self, where: str | None) -> str | None:
        """``where`` with a ref's temporary tree written as ``<ref>:<path>`` (what the user can look up)."""
        if self.kind != "ref" or self.root is None or where is None or not where.startswith(str(self.root) + os.sep):
            return where
        return f"{self.ref}:{where[len(str(self.root)) + 1 :].replace(os.sep, '/')}"


GIVEN = PluginSource()


def set_allowed(*, plugins: bool = False, ref_plugins: bool = False) -> None:
    """The CLI's global flags, for the command about to run (``False`` resets)."""
    _allowed["plugins"], _allowed["ref"] = plugins, ref_plugins


def _env(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


def plugins_allowed() -> bool:
    """``--allow-plugins`` / ``ZHIN_ALLOW_PLUGINS=1``: every found config and case file may run its plugins."""
    return _allowed["plugins"] or _env(ENV_ALLOW)


def ref_plugins_allowed() -> bool:
    """``--allow-ref-plugins`` / ``ZHIN_ALLOW_REF_PLUGINS=1``: a git ref's plugin code may run."""
    return _allowed["ref"] or _env(ENV_ALLOW_REF)


# --- the store ------------------------------------------------------------------------------------------------


def store_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or ""
    if base and Path(base).is_absolute():
        return Path(base) / "zhin" / "trusted.json"
    try:
        home = Path.home()
    except RuntimeError:  # no HOME and no passwd entry (a container's arbitrary uid)
        raise ConfigError("no user configuration folder for the trust store: set XDG_CONFIG_HOME or HOME") from None
    return home / ".config" / "zhin" / "trusted.json"


def sha256_file(path: Path) -> str | None:
    """The file's SHA-256 (hex), or None if it is not a regular file that can be read (a FIFO is never opened)."""
    try:
        if not path.is_file():
            return None
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _key(path: Path) -> str:
    return str(path.expanduser().resolve())


def read_store() -> dict[str, dict[str, Any]]:
    """``{resolved path: {"sha256", "plugins": {resolved path: sha256}, "trusted_at"}}``; a damaged store is an
    error naming it (never silently empty, never silently trusted)."""
    path = store_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the trust store: {exc}; remove it and run `zhin trust` again", where=str(path)) from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        data = None
    entries = data.get("trusted") if isinstance(data, dict) and data.get("version") == STORE_VERSION else None
    if not isinstance(entries, dict) or not all(isinstance(v, dict) for v in entries.values()):
        raise ConfigError("the trust store is damaged; remove it and run `zhin trust` again", where=str(path))
    return entries


def _write_store(entries: dict[str, dict[str, Any]]) -> None:
    path = store_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with atomic_output(path) as handle:  # whole or not at all: a damaged store would fail closed
            json.dump({"version": STORE_VERSION, "trusted": entries}, handle, ensure_ascii=False, indent=2, sort_keys=True)
            handle.write("\n")
    except OSError as exc:
        raise ConfigError(f"cannot write the trust store: {exc.strerror or exc}", where=str(path)) from None
    except OutputError as exc:
        raise ConfigError(f"cannot write the trust store: {exc.message}", where=str(path)) from None


ENTRY = "entry:"  # ``plugins: ["entry:acme"]``: an installed package's entry point (zhin_cli.pipeline.plugins)


def entry_point_release(spec: str) -> str | None:
    """``distribution==version`` of the installed package an ``entry:<name>`` spec names (metadata only: nothing
    is imported), ``"missing"`` when none is installed, ``None`` for another kind of spec. Trusting a config records
    it, so an upgraded package needs ``zhin trust`` again, like a changed plugin file."""
    if not spec.startswith(ENTRY):
        return None
    import importlib.metadata

    for point in importlib.metadata.entry_points(group="zhin", name=spec[len(ENTRY):]):
        dist = point.dist
        return f"{dist.name}=={dist.version}" if dist is not None else "unknown"
    return "missing"


def plugin_file(spec: str, base: Path) -> Path | None:
    """The file a ``path/to/file.py[:function]`` spec names (relative to ``base``); None for ``module:function``."""
    target = spec.partition(":")[0]
    if not target.endswith(".py"):
        return None
    file = Path(target)
    return file if file.is_absolute() else base / file


def record(file: Path, specs: list[str]) -> dict[str, Any]:
    """Trust ``file`` as it is now, with the plugin files ``specs`` name; returns the stored entry."""
    digest = sha256_file(file)
    if digest is None:
        raise ConfigError(f"cannot read {file}")
    plugins: dict[str, str] = {}
    releases: dict[str, str] = {}
    for spec in specs:
        path = plugin_file(spec, file.parent)
        if path is not None:
            plugin_digest = sha256_file(path)
            if plugin_digest is not None:
                plugins[_key(path)] = plugin_digest
        release = entry_point_release(spec)
        if release is not None:
            releases[spec] = release
    entry: dict[str, Any] = {"sha256": digest, "plugins": plugins, "specs": list(specs),
                             "trusted_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    if releases:
        entry["entry_points"] = releases
    with _store_lock:
        entries = read_store()
        entries[_key(file)] = entry
        _write_store(entries)
    return entry


def revoke(file: Path) -> bool:
    with _store_lock:
        entries = read_store()
        if entries.pop(_key(file), None) is None:
            return False
        _write_store(entries)
    return True


def status(file: Path, specs: list[str] | None = None) -> str | None:
    """None when ``file`` (and the plugin files of ``specs``) match the store; else ``"untrusted"`` or which file
    changed since it was trusted."""
    entry = read_store().get(_key(file))
    if entry is None:
        return "untrusted"
    if sha256_file(file) != entry.get("sha256"):
        return file.name
    recorded = entry.get("plugins") or {}
    releases = entry.get("entry_points") or {}
    for spec in specs if specs is not None else list(entry.get("specs") or []):
        release = entry_point_release(spec)
        if release is not None and releases.get(spec) != release:
            return f"{spec} ({releases.get(spec, 'not trusted')} → {release})"
        path = plugin_file(spec, file.parent)
        if path is None or not path.is_file():
            continue  # a module plugin (the installed environment's), or a missing file (reported when loading)
        if recorded.get(_key(path)) != sha256_file(path):
            return str(path)
    return None


# --- the check ------------------------------------------------------------------------------------------------


def authorize(source: PluginSource, specs: list[str], where: str | None) -> None:
    """Raise :class:`UntrustedPlugins` unless ``source`` may run the plugins ``specs``; nothing of them ran yet."""
    if not specs or source.kind == "given":
        return
    named = ", ".join(specs)
    where = source.shown(where)
    if source.kind == "ref":
        if ref_plugins_allowed():
            return
        raise UntrustedPlugins(
            f"not running the plugins of {source.label or 'a git ref'}: {named}; plugin code from a git ref runs only with "
            f"`zhin --allow-ref-plugins …` (ZHIN_ALLOW_REF_PLUGINS=1), and on a pull request that is the pull request's code",
            where=where)
    if plugins_allowed():
        return
    assert source.file is not None
    why = status(source.file, specs)
    if why is None:
        return
    what = "eval case file" if source.kind == "case" else "config found upward from the current folder"
    state = f"an untrusted {what}" if why == "untrusted" else f"a {what} that changed since `zhin trust` ({why} differs)"
    again = "" if why == "untrusted" else " again"
    other = "" if source.kind == "case" else f"pass --config {source.file}, or "
    raise UntrustedPlugins(
        f"not running the plugins of {state}: {named}; review them, then run `zhin trust {source.file}`{again} "
        f"(or {other}`zhin --allow-plugins …`, ZHIN_ALLOW_PLUGINS=1)", where=where)


def inside(file: Path, source: PluginSource, spec: str, where: str | None) -> None:
    """A plugin file of a ref or a case must resolve inside its tree: no absolute path, no ``..`` leaving it."""
    if source.root is None:
        return
    place = f"the tree of {source.label or source.ref}" if source.kind == "ref" else f"the folder of {source.file}"
    try:
        leaves = Path(spec.partition(":")[0]).is_absolute() or not file.resolve().is_relative_to(source.root.resolve())
    except (OSError, RuntimeError):  # a symlink loop
        leaves = True
    if leaves:
        raise ConfigError(f"plugin {spec!r}: a plugin file must be a relative path inside {place} "
                          "(no absolute path, no '..' leaving it)", where=source.shown(where))
