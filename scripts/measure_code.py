"""The code-health figures of issue 32, measured the same way each time: ``python scripts/measure_code.py``.

Figures (``--json`` for the closing note; ``version`` 1):

* ``Any`` and ``dict[str, Any]`` per 1,000 non-blank lines of the package. Every ``\\bAny\\b`` in the text counts,
  imports included. A name bound to a type that contains ``Any`` (``Body = dict[str, Any]``,
  ``from typing import Any as A``) is an alias: each use of it counts what it stands for, so renaming ``Any``
  does not lower the figure.
* TypedDicts: classes with a ``TypedDict`` base and ``TypedDict("X", …)`` calls.
* Import cycles: strongly connected components of the module graph, counted twice — imports that run when the
  module is imported (top level, ``if``/``try``/``class`` bodies; never ``if TYPE_CHECKING``), and those plus
  the imports inside functions. Importing ``a.b.c`` also runs the packages ``a.b`` (an edge to each, unless the
  importer is inside it: a package is already importing when its modules run).
* The largest modules, and the share of lines under ``tools/``.
* ``--mypy``: the number of ``mypy --strict`` errors (about 15 s), the figure ``strict = true`` must bring to 0.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NotRequired, TypedDict

ANY = re.compile(r"\bAny\b")
DICT_STR_ANY = re.compile(r"\bdict\[\s*str\s*,\s*Any\s*\]")
TYPING_MODULES = frozenset({"typing", "typing_extensions"})
MYPY_SUMMARY = re.compile(r"Found (\d+) errors? in (\d+) files?")
LARGEST = 10

Graph = Mapping[str, set[str]]


@dataclass(frozen=True)
class Module:
    name: str  # dotted: zhin_cli.core.jsontext
    path: Path
    is_package: bool  # an __init__.py
    text: str
    tree: ast.Module


@dataclass
class Counts:
    """``Any`` and ``dict[str, Any]`` in one piece of code (a file, or what an alias stands for)."""

    any: int = 0
    dict_str_any: int = 0

    def add(self, other: Counts, times: int = 1) -> None:
        self.any += other.any * times
        self.dict_str_any += other.dict_str_any * times


@dataclass
class FileFigures:
    path: str
    lines: int
    nonblank: int
    counts: Counts = field(default_factory=Counts)
    typeddicts: int = 0


class Cycle(TypedDict):
    modules: list[str]
    edges: list[list[str]]


class Rate(TypedDict):
    count: int
    per_kloc: float


class CycleLevel(TypedDict):
    count: int
    modules: int
    components: list[Cycle]


class Cycles(TypedDict):
    module_level: CycleLevel
    with_function_imports: CycleLevel


class ModuleSize(TypedDict):
    path: str
    lines: int


class ToolsShare(TypedDict):
    files: int
    lines: int
    share: float


class FileRow(TypedDict):
    path: str
    any: int
    dict_str_any: int
    nonblank_lines: int


class MypyCount(TypedDict):
    errors: int
    files: int


class Figures(TypedDict):
    version: int
    package: str
    files: int
    lines: int
    nonblank_lines: int
    any: Rate
    dict_str_any: Rate
    typeddicts: int
    cycles: Cycles
    largest: list[ModuleSize]
    tools: ToolsShare
    by_file: list[FileRow]
    mypy_strict: NotRequired[MypyCount]


# --- reading the package ----------------------------------------------------------------------------------------


def read_modules(package: Path) -> dict[str, Module]:
    """Every ``.py`` file under ``package``, by dotted name (named from the package's own directory)."""
    found: dict[str, Module] = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        text = path.read_text(encoding="utf-8")
        found[name] = Module(name, path, is_package, text, ast.parse(text, filename=str(path)))
    return found


def imported_from(module: Module, node: ast.ImportFrom) -> str:
    """The absolute name ``from X import …`` reads from (relative levels resolved)."""
    if not node.level:
        return node.module or ""
    base = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


# --- Any, dict[str, Any], TypedDicts ----------------------------------------------------------------------------


def text_counts(text: str) -> Counts:
    return Counts(len(ANY.findall(text)), len(DICT_STR_ANY.findall(text)))


def alias_value(node: ast.stmt) -> tuple[str, ast.expr] | None:
    """``(name, value)`` of a module-level ``X = <type>``, ``X: TypeAlias = <type>`` or ``type X = <type>``."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return (node.targets[0].id, node.value) if looks_like_a_type(node.value) else None
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        return (node.target.id, node.value) if looks_like_a_type(node.value) else None
    type_alias = getattr(ast, "TypeAlias", None)  # the ``type`` statement, Python 3.12+
    if type_alias is not None and isinstance(node, type_alias):
        return node.name.id, node.value
    return None


def looks_like_a_type(value: ast.expr) -> bool:
    """A name, ``a.b``, ``X[...]``, ``X | Y`` or a quoted type: not a call's result (``x = cast(Any, y)``)."""
    if isinstance(value, ast.BinOp):
        return isinstance(value.op, ast.BitOr) and looks_like_a_type(value.left) and looks_like_a_type(value.right)
    return isinstance(value, (ast.Name, ast.Attribute, ast.Subscript)) or (
        isinstance(value, ast.Constant) and isinstance(value.value, str)
    )


def names_used(node: ast.AST) -> Iterator[str]:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
            yield sub.id


def find_aliases(modules: Mapping[str, Module]) -> dict[str, dict[str, Counts]]:
    """Per module, each name that stands for a type containing ``Any`` → what one use of it counts.

    A name is an alias when its module-level definition mentions ``Any`` — in its text, or through another alias
    (of this module or imported from one) — so chains and re-exports are followed until nothing changes."""
    definitions = {name: module_definitions(module) for name, module in modules.items()}
    aliases: dict[str, dict[str, Counts]] = {name: typing_renames(module) for name, module in modules.items()}
    changed = True
    while changed:
        changed = False
        for name, module in modules.items():
            in_scope = scope(module, aliases)
            for target, value in definitions[name].items():
                counts = text_counts(ast.get_source_segment(module.text, value) or "")
                for used in names_used(value):
                    if used in in_scope:
                        counts.add(in_scope[used])
                if counts.any and counts != aliases[name].get(target):
                    aliases[name][target] = counts
                    changed = True
    return aliases


def module_definitions(module: Module) -> dict[str, ast.expr]:
    found: dict[str, ast.expr] = {}
    for node in module.tree.body:
        pair = alias_value(node)
        if pair is not None:
            found[pair[0]] = pair[1]
    return found


def typing_renames(module: Module) -> dict[str, Counts]:
    """``from typing import Any as A``: ``A`` is ``Any`` (the import line's ``Any`` is counted in the text)."""
    renames: dict[str, Counts] = {}
    for node in ast.walk(module.tree):
        if isinstance(node, ast.ImportFrom) and node.module in TYPING_MODULES and not node.level:
            for name in node.names:
                if name.name == "Any" and name.asname and name.asname != "Any":
                    renames[name.asname] = Counts(any=1)
    return renames


def scope(module: Module, aliases: Mapping[str, Mapping[str, Counts]]) -> dict[str, Counts]:
    """The aliases ``module`` can name: its own and those it imports from other modules of the package."""
    visible = dict(aliases.get(module.name, {}))
    for node in ast.walk(module.tree):
        if isinstance(node, ast.ImportFrom):
            source = aliases.get(imported_from(module, node), {})
            for name in node.names:
                if name.name in source:
                    visible[name.asname or name.name] = source[name.name]
    return visible


def alias_uses(module: Module, in_scope: Mapping[str, Counts]) -> Counts:
    """What the uses of aliases in ``module`` stand for (a definition's own target is not a use)."""
    counts = Counts()
    for name in names_used(module.tree):
        if name in in_scope:
            counts.add(in_scope[name])
    return counts


def count_typeddicts(tree: ast.Module) -> int:
    def is_typeddict(node: ast.expr) -> bool:
        return (isinstance(node, ast.Name) and node.id == "TypedDict") or (
            isinstance(node, ast.Attribute) and node.attr == "TypedDict"
        )

    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(is_typeddict(base) for base in node.bases):
            count += 1
        elif isinstance(node, ast.Call) and is_typeddict(node.func):
            count += 1
    return count


def file_figures(modules: Mapping[str, Module], root: Path) -> list[FileFigures]:
    aliases = find_aliases(modules)
    figures = []
    for module in modules.values():
        lines = module.text.splitlines()
        one = FileFigures(
            path=module.path.relative_to(root).as_posix(),
            lines=len(lines),
            nonblank=sum(1 for line in lines if line.strip()),
            counts=text_counts(module.text),
            typeddicts=count_typeddicts(module.tree),
        )
        one.counts.add(alias_uses(module, scope(module, aliases)))
        figures.append(one)
    return figures


# --- import cycles ----------------------------------------------------------------------------------------------


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_in(body: Iterable[ast.stmt], *, in_functions: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements that run with ``body`` (and, with ``in_functions``, those its functions run)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not is_type_checking(node.test):
                yield from imports_in(node.body, in_functions=in_functions)
            yield from imports_in(node.orelse, in_functions=in_functions)
        elif isinstance(node, ast.Try):
            for block in (node.body, *(handler.body for handler in node.handlers), node.orelse, node.finalbody):
                yield from imports_in(block, in_functions=in_functions)
        elif isinstance(node, (ast.With, ast.For, ast.While)):
            yield from imports_in(node.body, in_functions=in_functions)
        elif isinstance(node, ast.ClassDef):
            yield from imports_in(node.body, in_functions=in_functions)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and in_functions:
            yield from imports_in(node.body, in_functions=True)


def import_graph(modules: Mapping[str, Module], *, in_functions: bool) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, module in modules.items():
        for node in imports_in(module.tree.body, in_functions=in_functions):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                source = imported_from(module, node)
                targets = [source, *(f"{source}.{alias.name}" for alias in node.names)]
            for target in targets:
                graph[name].update(runs_when_imported(target, name, modules))
    return graph


def runs_when_imported(target: str, importer: str, modules: Mapping[str, Module]) -> set[str]:
    """The package modules importing ``target`` runs: it and its parent packages, outside the importer's own."""
    parts = target.split(".")
    ran = {target} if target in modules else set()
    for end in range(1, len(parts)):
        parent = ".".join(parts[:end])
        if parent in modules and not importer.startswith(parent + "."):
            ran.add(parent)
    ran.discard(importer)
    return ran


def cycles(graph: Graph) -> list[Cycle]:
    """The strongly connected components of more than one module, with their edges (Tarjan, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[Cycle] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            successor = next(successors, None)
            if successor is not None:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                elif successor in on_stack:
                    low[node] = min(low[node], index[successor])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = pop_component(stack, on_stack, node)
                if len(component) > 1:
                    found.append(cycle_of(component, graph))
    return sorted(found, key=lambda cycle: cycle["modules"])


def pop_component(stack: list[str], on_stack: set[str], root: str) -> list[str]:
    component = []
    while True:
        member = stack.pop()
        on_stack.discard(member)
        component.append(member)
        if member == root:
            return sorted(component)


def cycle_of(component: list[str], graph: Graph) -> Cycle:
    members = set(component)
    edges = [[a, b] for a in component for b in sorted(graph.get(a, set()) & members)]
    return Cycle(modules=component, edges=edges)


# --- mypy --strict ----------------------------------------------------------------------------------------------


def mypy_strict(package: Path) -> MypyCount:
    """``mypy --strict`` on the package: its error and file counts (0 and 0 when it succeeds)."""
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(package)],
        capture_output=True,
        text=True,
        cwd=package.parent,
    )
    summary = MYPY_SUMMARY.search(run.stdout)
    if summary:
        return MypyCount(errors=int(summary[1]), files=int(summary[2]))
    if run.returncode == 0:
        return MypyCount(errors=0, files=0)
    raise SystemExit(f"measure_code: mypy failed without a summary:\n{run.stdout}{run.stderr}")


# --- the report -------------------------------------------------------------------------------------------------


def per_kloc(count: int, lines: int) -> float:
    return round(count * 1000 / lines, 1) if lines else 0.0


def measure(package: Path, *, with_mypy: bool = False, largest: int = LARGEST) -> Figures:
    modules = read_modules(package)
    files = file_figures(modules, package.parent)
    nonblank = sum(one.nonblank for one in files)
    lines = sum(one.lines for one in files)
    any_total = sum(one.counts.any for one in files)
    dict_total = sum(one.counts.dict_str_any for one in files)
    tools = [one for one in files if one.path.startswith(f"{package.name}/tools/")]
    tools_lines = sum(one.lines for one in tools)
    result = Figures(
        version=1,
        package=package.name,
        files=len(files),
        lines=lines,
        nonblank_lines=nonblank,
        any=Rate(count=any_total, per_kloc=per_kloc(any_total, nonblank)),
        dict_str_any=Rate(count=dict_total, per_kloc=per_kloc(dict_total, nonblank)),
        typeddicts=sum(one.typeddicts for one in files),
        cycles=Cycles(
            module_level=cycle_level(import_graph(modules, in_functions=False)),
            with_function_imports=cycle_level(import_graph(modules, in_functions=True)),
        ),
        largest=[ModuleSize(path=one.path, lines=one.lines) for one in sorted(files, key=lambda f: (-f.lines, f.path))[:largest]],
        tools=ToolsShare(files=len(tools), lines=tools_lines, share=round(tools_lines / lines, 3) if lines else 0.0),
        by_file=[
            FileRow(path=one.path, any=one.counts.any, dict_str_any=one.counts.dict_str_any, nonblank_lines=one.nonblank)
            for one in sorted(files, key=lambda f: (-f.counts.any, -f.counts.dict_str_any, f.path))
            if one.counts.any or one.counts.dict_str_any
        ],
    )
    if with_mypy:
        result["mypy_strict"] = mypy_strict(package)
    return result


def cycle_level(graph: Graph) -> CycleLevel:
    found = cycles(graph)
    return CycleLevel(count=len(found), modules=sum(len(cycle["modules"]) for cycle in found), components=found)


def text_report(result: Figures, top: int) -> str:
    any_, dict_, tools = result["any"], result["dict_str_any"], result["tools"]
    out = [
        f"{result['package']}: {result['files']} files, {result['lines']:,} lines, {result['nonblank_lines']:,} non-blank",
        f"Any: {any_['count']:,} ({any_['per_kloc']} per kLOC)   dict[str, Any]: {dict_['count']:,} ({dict_['per_kloc']} per kLOC)"
        f"   TypedDicts: {result['typeddicts']}",
    ]
    for level, label in (
        (result["cycles"]["module_level"], "module-level"),
        (result["cycles"]["with_function_imports"], "with function-level imports"),
    ):
        out.append(f"import cycles, {label}: {level['count']} ({level['modules']} modules)")
        out += [f"  {' '.join(component['modules'])}" for component in level["components"]]
    out.append(f"tools/: {tools['files']} files, {tools['lines']:,} lines = {tools['share']:.1%} of the lines")
    out.append("largest modules: " + ", ".join(f"{row['path']} {row['lines']:,}" for row in result["largest"]))
    if "mypy_strict" in result:
        mypy = result["mypy_strict"]
        out.append(f"mypy --strict: {mypy['errors']} errors in {mypy['files']} files")
    if top:
        out.append(f"most Any (Any / dict[str, Any] / non-blank lines), top {top}:")
        out += [
            f"  {row['any']:4} {row['dict_str_any']:4} {row['nonblank_lines']:6}  {row['path']}"
            for row in result["by_file"][:top]
        ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Measure Any, dict[str, Any], TypedDicts, import cycles, module sizes.")
    parser.add_argument("package", nargs="?", type=Path, default=Path(__file__).resolve().parent.parent / "zhin_cli")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON (version 1)")
    parser.add_argument("--mypy", action="store_true", help="also count mypy --strict errors (about 15 s)")
    parser.add_argument("--top", type=int, default=15, help="files with the most Any to list (text only)")
    options = parser.parse_args(argv)
    if not (options.package / "__init__.py").is_file():
        parser.error(f"{options.package}: not a package (no __init__.py)")
    result = measure(options.package.resolve(), with_mypy=options.mypy)
    print(json.dumps(result, indent=2) if options.json else text_report(result, options.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
