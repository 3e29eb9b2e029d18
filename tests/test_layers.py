"""The tree's layers, checked on the import graph (issue 16 item 9): stages never import tools or the CLI.

The graph is built with ``ast`` from the sources, not by importing them: every ``import`` / ``from … import``
counts — at module level, inside functions (the lazy imports) and under ``TYPE_CHECKING`` — because each is a
dependency of the design whether or not it runs at start-up.

Two rules:

* **Layers.** ``core < store < wire < pipeline < cache < tools < _cli``: a module imports only its own layer or
  lower ones. ``zhin_cli/__init__.py``, ``__main__.py``, ``launch.py`` and ``signals.py`` are the entry: they may
  import anything, and only the CLI may import them (the version, the signal state). A package that does not exist
  yet is an empty layer.
* **No cycle across packages.** A strongly connected component of the module graph that spans more than one package
  (``pipeline`` and ``pipeline.preset`` are two packages) is a failure. A cycle inside one package — a package's
  ``__init__`` importing the modules that register into it — is how registration works here and is allowed.

Cycles that are known and owned by another change are listed in ``KNOWN_CYCLES`` with the fix; the test fails
when a new one appears *and* when a listed one is gone (so the list only shrinks).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "zhin_cli"
LAYERS = ("core", "store", "wire", "pipeline", "cache", "tools", "_cli")
# zhin_cli.api (the public API) and the one-release shims of moved modules sit above the layers, like the entry
ENTRY = frozenset({"zhin_cli", "zhin_cli.__main__", "zhin_cli.launch", "zhin_cli.signals", "zhin_cli.api",
                   "zhin_cli.segments", "zhin_cli.segments.builtin"})

Graph = Mapping[str, set[str]]

# Cross-package cycles that remain, each with the change that removes it. Keys: the packages the cycle spans.
KNOWN_CYCLES: dict[frozenset[str], str] = {}

# The three cycles issue 16 named as cutting across the design, and the renderers <-> validators one found by this
# test: gone, and they must stay gone.
FIXED_CYCLES = (
    ("zhin_cli.pipeline.config", "zhin_cli.pipeline.preset.importer"),  # the readers moved to core/readers.py
    ("zhin_cli.store.facts", "zhin_cli.store.database"),  # clean_text to core, the commands to tools/facts/facts.py
    ("zhin_cli.tools.eval.registry", "zhin_cli.tools.eval.timeline"),  # the steps are registered beside the Builder
    # the model tables (prefill gate, R1-era list) live with the profiles; a template's warnings come from the
    # validator's verdict in assemble, not from the renderer asking the validator
    ("zhin_cli.pipeline.providers.local", "zhin_cli.pipeline.validate.templates"),
)


# --- the graph ------------------------------------------------------------------------------------------------


def modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Every module of the package under ``root``: dotted name → (file, is a package ``__init__``)."""
    found: dict[str, tuple[Path, bool]] = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _known(name: str, names: Iterable[str]) -> str | None:
    """``name``, or the nearest enclosing module that exists (``a.b.func`` → ``a.b``)."""
    known = set(names)
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module → the package's modules it imports (anywhere in the file)."""
    table = modules(root)
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in table.items():
        package = name if is_package else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                # ``from pkg import sub`` imports the module ``pkg.sub`` when there is one
                targets.update(f"{source}.{alias.name}" if f"{source}.{alias.name}" in table else source
                               for alias in node.names)
        resolved = {_known(t, table) for t in targets if t == PACKAGE or t.startswith(PACKAGE + ".")}
        graph[name] = {t for t in resolved if t is not None and t != name}
    return graph


def layer_of(module: str) -> int | None:
    """The layer's rank, ``None`` for an entry module."""
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def package_of(module: str, graph: Graph) -> str:
    """The package a module belongs to: itself for a package ``__init__``, else its parent."""
    is_package = any(other.startswith(module + ".") for other in graph)
    return module if is_package else module.rpartition(".")[0]


def layer_violations(graph: Graph) -> list[str]:
    problems = []
    for module in sorted(graph):
        for target in sorted(graph[module]):
            here, there = layer_of(module), layer_of(target)
            if module in ENTRY:
                continue
            if target in ENTRY:
                if here != LAYERS.index("_cli"):
                    problems.append(f"{module} -> {target} (only the CLI imports the entry modules)")
            elif here is None or there is None:
                problems.append(f"{module} -> {target} (not in a layer: {LAYERS})")
            elif there > here:
                problems.append(f"{module} ({LAYERS[here]}) -> {target} ({LAYERS[there]})")
    return problems


def components(graph: Graph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def cross_package_cycles(graph: Graph) -> dict[frozenset[str], list[str]]:
    """The cycles that span more than one package, keyed by the packages they span."""
    cycles = {}
    for component in components(graph):
        packages = frozenset(package_of(m, graph) for m in component)
        if len(packages) > 1:
            cycles[packages] = component
    return cycles


# --- the checks on the real tree ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_every_module_is_in_a_layer_or_the_entry(graph: Graph) -> None:
    outside = [m for m in graph if m not in ENTRY and layer_of(m) is None]
    assert outside == [], f"place these packages in LAYERS (or make them entry modules): {outside}"


def test_no_module_imports_a_higher_layer(graph: Graph) -> None:
    assert layer_violations(graph) == []


def test_no_import_cycle_crosses_a_package(graph: Graph) -> None:
    cycles = cross_package_cycles(graph)
    new = {", ".join(sorted(k)): v for k, v in cycles.items() if k not in KNOWN_CYCLES}
    assert new == {}, "an import cycle across packages (move the shared function down a layer)"
    gone = [", ".join(sorted(k)) for k in KNOWN_CYCLES if k not in cycles]
    assert gone == [], "fixed: remove it from KNOWN_CYCLES"


@pytest.mark.parametrize(("one", "other"), FIXED_CYCLES)
def test_the_cycles_issue_16_named_stay_gone(graph: Graph, one: str, other: str) -> None:
    assert not any(one in c and other in c for c in components(graph)), f"{one} and {other} import each other again"


# --- negative controls: the checker catches what it is for ----------------------------------------------------


def test_a_stage_importing_a_tool_fails_the_checker() -> None:
    synthetic = {"zhin_cli.pipeline.window": {"zhin_cli.tools.trace.trace", "zhin_cli.core.model"},
                 "zhin_cli.tools.trace.trace": {"zhin_cli.pipeline.window"}, "zhin_cli.core.model": set()}
    assert layer_violations(synthetic) == ["zhin_cli.pipeline.window (pipeline) -> zhin_cli.tools.trace.trace (tools)"]
    del synthetic["zhin_cli.pipeline.window"]  # the same graph without the upward edge is clean
    assert layer_violations(synthetic) == []


def test_core_importing_the_entry_or_the_cli_fails_the_checker() -> None:
    synthetic = {"zhin_cli.core.errors": {"zhin_cli.signals", "zhin_cli._cli"}, "zhin_cli.signals": set(),
                 "zhin_cli._cli": {"zhin_cli.signals"}}
    assert layer_violations(synthetic) == [
        "zhin_cli.core.errors (core) -> zhin_cli._cli (_cli)",
        "zhin_cli.core.errors -> zhin_cli.signals (only the CLI imports the entry modules)",
    ]


def test_a_cycle_across_packages_is_found_and_one_inside_a_package_is_not() -> None:
    synthetic = {
        "zhin_cli.pipeline.config": {"zhin_cli.pipeline.preset.importer"},
        "zhin_cli.pipeline.preset": {"zhin_cli.pipeline.preset.importer"},
        "zhin_cli.pipeline.preset.importer": {"zhin_cli.pipeline.config", "zhin_cli.pipeline.preset"},
        "zhin_cli.wire": {"zhin_cli.wire.openai_chat"}, "zhin_cli.wire.openai_chat": {"zhin_cli.wire"},
    }
    cycles = cross_package_cycles(synthetic)
    assert list(cycles.values()) == [["zhin_cli.pipeline.config", "zhin_cli.pipeline.preset",
                                      "zhin_cli.pipeline.preset.importer"]]
    assert frozenset({"zhin_cli.wire"}) not in cycles  # registration inside one package
    assert ["zhin_cli.wire", "zhin_cli.wire.openai_chat"] in components(synthetic)


def test_the_graph_sees_lazy_relative_and_type_checking_imports(tmp_path: Path) -> None:
    files = {
        "__init__.py": "",
        "core/__init__.py": "",
        "core/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from zhin_cli.tools.t import X\n",
        "core/b.py": "def f():\n    from . import a\n    from ..store import s\n    import zhin_cli.tools.t.deep\n",
        "store/__init__.py": "", "store/s.py": "import json\n",
        "tools/__init__.py": "", "tools/t.py": "from zhin_cli.core.a import *\n",
    }
    for name, text in files.items():
        path = tmp_path / PACKAGE / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    synthetic = import_graph(tmp_path)
    assert synthetic["zhin_cli.core.a"] == {"zhin_cli.tools.t"}
    assert synthetic["zhin_cli.core.b"] == {"zhin_cli.core.a", "zhin_cli.store.s", "zhin_cli.tools.t"}
    assert layer_violations(synthetic) == [
        "zhin_cli.core.a (core) -> zhin_cli.tools.t (tools)",
        "zhin_cli.core.b (core) -> zhin_cli.store.s (store)",
        "zhin_cli.core.b (core) -> zhin_cli.tools.t (tools)",
    ]
    assert cross_package_cycles(synthetic) == {frozenset({"zhin_cli.core", "zhin_cli.tools"}):
                                               ["zhin_cli.core.a", "zhin_cli.tools.t"]}


# --- no import cycle at module level (issue 32 item 7) ----------------------------------------------------------


def _module_level_graph(package: Path) -> dict[str, set[str]]:
    """The imports that run when a module is imported (scripts/measure_code.py's definition: module level, inside
    ``try``/``if`` but not ``if TYPE_CHECKING``, an import of ``a.b.c`` also running ``a.b``'s ``__init__``)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("measure_code", ROOT / "scripts" / "measure_code.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    sys.modules["measure_code"] = script
    spec.loader.exec_module(script)
    graph: dict[str, set[str]] = script.import_graph(script.read_modules(package), in_functions=False)
    return graph


def test_no_import_cycle_at_module_level() -> None:
    """Registration is done by the registry's users (or lazy ``module:attr`` tables), never by a package
    ``__init__`` importing the modules that import it back: importing any module of zhin runs no cycle."""
    assert components(_module_level_graph(ROOT / PACKAGE)) == []


def test_negative_control_a_package_init_importing_its_registrants_is_a_cycle(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("REGISTRY = {}\nfrom pkg import plugin\n")
    (package / "plugin.py").write_text("from pkg import REGISTRY\nREGISTRY['x'] = 1\n")
    assert components(_module_level_graph(package)) == [["pkg", "pkg.plugin"]]
