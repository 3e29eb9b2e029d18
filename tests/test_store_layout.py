"""The store package's layout (issue 32): no import cycle inside ``zhin_cli/store`` — function-level imports
included, since a lazy import that closes a loop still ties the modules together — the database code split by
role into ``store/db/`` (each module importing only the roles before it), and ``zhin_cli.store.database`` kept as a
deprecated re-export of the same objects."""

from __future__ import annotations

import ast
import importlib
import sys
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STORE = ROOT / "zhin_cli" / "store"
# The roles of store/db, in the order they may import each other (a module imports only those before it).
DB_ROLES = ("urls", "engines", "rows", "sql", "parse", "fetch", "reader", "writer")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.Module, name: str, is_package: bool) -> Iterator[str]:
    """Every module an ``import`` anywhere in the file names (function bodies too), as dotted names: for
    ``from a import b`` both ``a`` and ``a.b`` (b may be a module)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            yield target
            yield from (f"{target}.{alias.name}" for alias in node.names)


def import_graph(package: Path, root: Path) -> dict[str, set[str]]:
    """Module → the modules of the same tree it imports. Importing ``p.q.r`` runs the package ``p.q`` too, so that
    counts as an edge to it — except from a module inside ``p.q`` (its package is already running)."""
    files = {module_name(path, root): path for path in sorted(package.rglob("*.py"))}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        for target in imported(ast.parse(path.read_text(encoding="utf-8")), name, path.name == "__init__.py"):
            parts = target.split(".")
            for end in range(1, len(parts) + 1):
                prefix = ".".join(parts[:end])
                if prefix in files and prefix != name and not (end < len(parts) and name.startswith(prefix + ".")):
                    graph[name].add(prefix)
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_store_package_has_no_import_cycle_even_through_function_level_imports() -> None:
    assert cycles(import_graph(STORE, ROOT)) == []


def test_negative_control_a_lazy_import_back_into_the_package_is_a_cycle(tmp_path: Path) -> None:
    """The detector sees the shape the store had: ``__init__`` registering a source whose module (lazily) imports
    the package back; and a plain module importing its sibling's package is no cycle."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from pkg.sources import Source\n")
    (package / "sources.py").write_text("def load():\n    from pkg import limit\n    return limit\n")
    assert cycles(import_graph(package, tmp_path)) == [["pkg", "pkg.sources"]]
    (package / "sources.py").write_text("def load():\n    from pkg.limits import limit\n    return limit\n")
    (package / "limits.py").write_text("limit = 1\n")
    assert cycles(import_graph(package, tmp_path)) == []


def db_role_imports(graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """For each role module of store/db, the roles it imports."""
    prefix = "zhin_cli.store.db."
    return {role: {t.removeprefix(prefix) for t in graph[prefix + role] if t.startswith(prefix)} for role in DB_ROLES}


def out_of_order(uses: Mapping[str, set[str]], order: tuple[str, ...]) -> list[tuple[str, str]]:
    return sorted((role, used) for role, roles in uses.items() for used in roles if order.index(used) >= order.index(role))


def test_each_database_module_imports_only_the_roles_before_it() -> None:
    uses = db_role_imports(import_graph(STORE, ROOT))
    assert out_of_order(uses, DB_ROLES) == []
    assert uses["reader"] >= {"urls", "engines", "rows", "sql", "parse", "fetch"}  # the check has edges to judge
    # Negative control: read in the reverse order, the same edges are all out of order.
    assert len(out_of_order(uses, DB_ROLES[::-1])) == sum(map(len, uses.values()))


def test_the_old_module_path_is_a_deprecated_reexport_of_the_same_objects() -> None:
    import zhin_cli.store.db as db

    sys.modules.pop("zhin_cli.store.database", None)
    with pytest.warns(DeprecationWarning, match="moved to zhin_cli.store.db"):
        old = importlib.import_module("zhin_cli.store.database")
    names = ("SessionDatabase", "parse_db", "db_error", "import_session", "import_sessions", "writable_engine",
             "DatabaseRef", "SERVER_DIALECTS", "require_driver", "hot_journal_error", "ImportResult")
    assert all(getattr(old, name) is getattr(db, name) for name in names)
    # Negative control: the new path imports without the warning.
    sys.modules.pop("zhin_cli.store.db", None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        importlib.import_module("zhin_cli.store.db")


def test_no_module_of_zhin_imports_the_old_path() -> None:
    users = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "zhin_cli").rglob("*.py"))
             if path.name != "database.py" and "zhin_cli.store.database" in {
                 t for t in imported(ast.parse(path.read_text(encoding="utf-8")), module_name(path, ROOT), False)}]
    assert users == []
    # Negative control: the same reading finds such an import, lazy or not.
    tree = ast.parse("def f():\n    from zhin_cli.store.database import parse_db\n")
    assert "zhin_cli.store.database" in set(imported(tree, "zhin_cli.tools.x", False))
