"""Loading plugin code: a file (``path/to/file.py[:function]``), a module (``module:function``) or an installed
package's entry point (``entry:<name>``, group ``zhin`` of ``[project.entry-points]``).

Nothing here decides whether code may run: the caller has asked :func:`zhin_cli.core.trust.authorize` (a config
named on the command line, a trusted found config or case file, a git ref with ``--allow-ref-plugins``). An
installed package is never imported because it is installed — only when a config that may run plugins names its
entry point (:func:`installed` reads the entry points' metadata without importing anything).

What a plugin registers while it loads — in any registry — is recorded in its :class:`Generation`
(``zhin_cli.api.Plugin``) and undone when the generation is released.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from zhin_cli.core import trust
from zhin_cli.core.errors import ConfigError, ZhinError
from zhin_cli.core.trust import GIVEN, PluginSource, inside
from zhin_cli.pipeline.segments import Generation

GROUP = "zhin"  # [project.entry-points."zhin"] of a plugin package
ENTRY = trust.ENTRY  # ``plugins: ["entry:acme"]`` names an installed entry point


@dataclass(frozen=True)
class InstalledPlugin:
    """An entry point of group ``zhin`` as its package's metadata declares it (nothing imported)."""

    name: str
    value: str  # "module:function"
    distribution: str
    version: str


def installed() -> list[InstalledPlugin]:
    """Every installed ``zhin`` entry point, read from metadata only: listing them runs no plugin code."""
    found = []
    for point in importlib.metadata.entry_points(group=GROUP):
        dist = point.dist
        found.append(InstalledPlugin(point.name, point.value, dist.name if dist else "", dist.version if dist else ""))
    return sorted(found, key=lambda p: (p.name, p.distribution))


def run_plugin(generation: Generation, spec: str, config_path: Path | None, where: str | None = None, *,
               source: PluginSource = GIVEN) -> None:
    """Import the plugin ``spec`` and call its function with ``generation``: everything it registers while it is
    imported and while its function runs is the generation's. A failure is one ``ConfigError`` naming the spec."""
    with generation.recording():
        register = load_plugin(spec, config_path, where, source=source)
        try:
            register(generation)
        except ZhinError as exc:
            raise ConfigError(f"plugin {spec!r}: {exc.message}", where=exc.where or where) from None
        except (Exception, SystemExit) as exc:  # the plugin's own bug must not become a traceback
            raise ConfigError(f"plugin {spec!r} failed while registering: {type(exc).__name__}: {exc}", where=where) from None


def load_plugin(spec: str, config_path: Path | None, where: str | None = None, *,
                source: PluginSource = GIVEN) -> Callable[..., Any]:
    """``module:function``, ``path/to/file.py:function`` or ``entry:<name>``; the function receives a ``Generation``.

    The caller has checked the spec may run (``zhin_cli.core.trust.authorize``); a plugin file of a ref or a case
    (``source.root``) is refused here too if it resolves outside that tree."""
    if spec.startswith(ENTRY):
        return _entry_point(spec, where)
    target, _, attr = spec.partition(":")
    attr = attr or "register"
    try:
        module = _plugin_file(target, spec, config_path, where, source) if target.endswith(".py") else importlib.import_module(target)
    except ConfigError:
        raise
    except (Exception, SystemExit) as exc:  # a plugin's own import error (or exit) must not become a traceback
        raise ConfigError(f"plugin {spec!r} failed to load: {type(exc).__name__}: {exc}", where=where) from None
    function: object = getattr(module, attr, None)
    if not callable(function):
        raise ConfigError(f"plugin {spec!r}: no callable {attr!r}", where=where)
    return function


def _plugin_file(target: str, spec: str, config_path: Path | None, where: str | None, source: PluginSource) -> ModuleType:
    file = Path(target)
    if not file.is_absolute() and config_path is not None:
        file = config_path.parent / file
    inside(file, source, spec, where)
    if not file.is_file():
        raise ConfigError(f"plugin {spec!r}: no such file {file}", where=where)
    # A unique module name per file (a base and a head tree may both hold plugins/clock.py), registered in
    # sys.modules while it runs: @dataclass and typing look their module up there.
    name = f"zhin_plugin_{file.stem}_{hashlib.sha1(str(file.resolve()).encode()).hexdigest()[:10]}"
    module_spec = importlib.util.spec_from_file_location(name, file)
    if module_spec is None or module_spec.loader is None:
        raise ConfigError(f"cannot load plugin file {file}", where=where)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _entry_point(spec: str, where: str | None) -> Callable[..., Any]:
    name = spec[len(ENTRY):]
    points = list(importlib.metadata.entry_points(group=GROUP, name=name))
    if not points:
        known = ", ".join(sorted({p.name for p in installed()})) or "none installed"
        raise ConfigError(f"plugin {spec!r}: no installed entry point {name!r} in group {GROUP!r} (known: {known})", where=where)
    try:
        function: object = points[0].load()
    except (Exception, SystemExit) as exc:
        raise ConfigError(f"plugin {spec!r} failed to load: {type(exc).__name__}: {exc}", where=where) from None
    if not callable(function):
        raise ConfigError(f"plugin {spec!r}: entry point {points[0].value!r} is not callable", where=where)
    return function
