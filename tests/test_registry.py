"""One rule for every registry (issue 16 item 9): a name registered twice is an error, unless ``replace=True``.

The rule is tested once on :class:`zhin_cli.core.registry.Registry`; then every registry of the toolkit is driven
through its own public registration function: the duplicate of a name it holds is refused (before 271b824's
successor five of them silently overwrote and the data sources appended a second copy), ``replace=True`` is
accepted, and a new name is accepted (the negative control: the refusal is about the name, not about
registering at all). A last test keeps new registries from being plain dicts that bypass the rule.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from zhin_cli.core.errors import ConfigError, ZhinError
from zhin_cli.core.registry import DuplicateName, Registry

ROOT = Path(__file__).resolve().parent.parent


# --- the rule, once ---------------------------------------------------------------------------------------------


def test_a_duplicate_name_is_refused_with_one_line() -> None:
    table: Registry[int] = Registry("widget")
    table.add("a", 1)
    with pytest.raises(DuplicateName, match=r"^duplicate widget 'a'$"):
        table.add("a", 2)
    assert table == {"a": 1}  # the first registration stands: nothing half-replaced
    error = DuplicateName("x")
    assert isinstance(error, ConfigError) and isinstance(error, ZhinError)  # one `zhin: error:` line from a plugin
    assert isinstance(error, ValueError)  # what import-time registrations raised before


def test_replace_true_overrides_on_purpose() -> None:
    table: Registry[int] = Registry("widget")
    table.add("a", 1)
    assert table.add("a", 2, replace=True) == 2
    assert table == {"a": 2}


def test_distinct_names_are_all_kept_in_registration_order() -> None:  # negative control for the refusal
    table: Registry[int] = Registry("widget")
    for index, name in enumerate(("c", "a", "b")):
        table.add(name, index)
    assert list(table) == ["c", "a", "b"]


def test_the_decorator_registers_every_alias_and_refuses_a_taken_one() -> None:
    table: Registry[Callable[[], int]] = Registry("handler")

    @table.adding("one", "uno")
    def one() -> int:
        return 1

    assert table["one"] is one and table["uno"] is one
    with pytest.raises(DuplicateName, match="duplicate handler 'uno'"):
        table.adding("uno")(lambda: 2)


def test_owners_name_who_registered_first_and_remove_forgets_both() -> None:
    table: Registry[int] = Registry("segment id")
    table.add("s", 1, owner="plugin-a")
    with pytest.raises(DuplicateName, match=r"duplicate segment id 's' \(registered by plugin-a, again by plugin-b\)"):
        table.add("s", 2, owner="plugin-b")
    assert table.remove("s") == 1 and "s" not in table and "s" not in table.owners
    assert table.remove("s") is None  # removing twice is harmless (a generation released twice)
    table.add("s", 3, owner="plugin-b")  # the name is free again
    assert table == {"s": 3}


# --- every registry of the toolkit, through its own registration function ---------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    """One registry: the table, and how its public API registers ``item`` (under ``name`` where the API takes one)."""

    table: Registry[Any]
    register: Callable[[str, Any, bool], Any]
    renamed: Callable[[Any, str], Any] = lambda item, name: item  # a copy of ``item`` that carries ``name``
    cleanup: Callable[[str], None] = lambda name: None


def _profiles() -> Case:
    from zhin_cli.pipeline.providers import PROFILES, register_profile

    return Case(PROFILES, lambda name, item, replace: register_profile(item, replace=replace),
                lambda item, name: dataclasses.replace(item, name=name))


def _renderers() -> Case:
    from zhin_cli.pipeline.providers import RENDERERS, register_renderer

    return Case(RENDERERS, lambda name, item, replace: register_renderer(name, replace=replace)(item))


def _validators() -> Case:
    from zhin_cli.pipeline.validate import VALIDATORS, register_validator

    return Case(VALIDATORS, lambda name, item, replace: register_validator(name, replace=replace)(item))


def _wires() -> Case:
    from zhin_cli.wire import WIRES, register_wire

    def renamed(item: Any, name: str) -> Any:
        other = copy.copy(item)
        other.name = name
        return other

    return Case(WIRES, lambda name, item, replace: register_wire(item, replace=replace), renamed)


def _sources() -> Case:
    from zhin_cli.store import FALLBACKS, SOURCES, register_source

    def register(name: str, item: Any, replace: bool) -> Any:
        return register_source(item, fallback=name in FALLBACKS, replace=replace)

    return Case(SOURCES, register, lambda item, name: dataclasses.replace(item, name=name), FALLBACKS.discard)


def _line_types() -> Case:
    from zhin_cli.store.jsonl import LINE_TYPES, line_type

    return Case(LINE_TYPES, lambda name, item, replace: line_type(name, replace=replace)(item))


def _usage_kinds() -> Case:
    from zhin_cli.cache.usage import USAGE_KINDS, usage_kind

    return Case(USAGE_KINDS, lambda name, item, replace: usage_kind(name, replace=replace)(item))


def _macros() -> Case:
    from zhin_cli.pipeline.preset.macros import MACROS, macro

    return Case(MACROS, lambda name, item, replace: macro(name, replace=replace)(item))


def _assertions() -> Case:
    from zhin_cli.tools.eval import assertions as _builtin  # noqa: F401  (registers the built-ins)
    from zhin_cli.tools.eval.registry import ASSERTIONS, assertion

    return Case(ASSERTIONS, lambda name, item, replace: assertion(name, params=item.params, replace=replace)(item.check))


def _steps() -> Case:
    from zhin_cli.tools.eval.timeline import STEPS, step

    return Case(STEPS, lambda name, item, replace: step(name, item.schema, replace=replace)(item.apply))


def _transforms() -> Case:
    from zhin_cli.tools.eval import transforms as _builtin  # noqa: F401  (registers the built-ins)
    from zhin_cli.tools.eval.registry import TRANSFORMS, transform

    return Case(TRANSFORMS, lambda name, item, replace: transform(name, item.params, replace=replace)(item.apply))


def _economy_cases() -> Case:
    from zhin_cli.tools.report.economy import CASES, register_case

    return Case(CASES, lambda name, item, replace: register_case(item, replace=replace),
                lambda item, name: dataclasses.replace(item, provider=name))


def _dialects() -> Case:
    from zhin_cli.tools.serve.server import DIALECTS, register_dialect

    return Case(DIALECTS, lambda name, item, replace: register_dialect(item, replace=replace),
                lambda item, name: dataclasses.replace(item, name=name))


REGISTRIES = {
    "provider profiles": _profiles, "renderers": _renderers, "validators": _validators, "wire formats": _wires,
    "data sources": _sources, "JSONL line types": _line_types, "usage kinds": _usage_kinds, "macros": _macros,
    "eval assertions": _assertions, "eval timeline steps": _steps, "eval transforms": _transforms,
    "economy cases": _economy_cases, "serve dialects": _dialects,
}


@pytest.fixture(params=sorted(REGISTRIES))
def case(request: pytest.FixtureRequest) -> Case:
    return REGISTRIES[request.param]()


def test_each_registry_refuses_a_duplicate_name(case: Case) -> None:
    name, item = next(iter(case.table.items()))
    before = dict(case.table)
    with pytest.raises(DuplicateName, match=f"duplicate .*'{name}'"):
        case.register(name, _copy_of(item, case, name), False)
    assert dict(case.table) == before  # refused: the registered one still answers


def test_each_registry_accepts_replace_true(case: Case) -> None:
    name, item = next(iter(case.table.items()))
    case.register(name, item, True)  # the same object again, on purpose
    assert case.table[name] is item or case.table[name] == item


def test_each_registry_accepts_a_new_name(case: Case) -> None:  # negative control
    name, item = next(iter(case.table.items()))
    new = "zz-test-registry-new-name"
    try:
        case.register(new, case.renamed(item, new), False)
        assert new in case.table and name in case.table
    finally:
        case.table.remove(new)
        case.cleanup(new)


def _copy_of(item: Any, case: Case, name: str) -> Any:
    """A second object under the same name (a plugin registering its own), so the refusal is not about identity."""
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return case.renamed(dataclasses.replace(item), name)
    if callable(item) and not hasattr(item, "__dict__"):
        return item
    if callable(item):
        return lambda *args, **kwargs: item(*args, **kwargs)
    return case.renamed(copy.copy(item), name)


def test_segment_ids_follow_the_same_rule() -> None:
    from zhin_cli.pipeline.segments import TextSegment
    from zhin_cli.pipeline.segments.builtin import default_registry

    registry = default_registry({})
    with registry.loaded("plugin-a") as generation:
        generation.register(TextSegment("p.one", "environment", 10, "x"))
        with pytest.raises(DuplicateName, match=r"duplicate segment id 'p.one' \(registered by plugin-a, again by plugin-b\)"):
            registry.generation("plugin-b").register(TextSegment("p.one", "environment", 10, "y"))
        registry.generation("plugin-b").register(TextSegment("p.two", "environment", 10, "y"))  # negative control
    assert "p.one" not in registry  # released with its generation: the name is free again


# --- no registry bypasses the rule -------------------------------------------------------------------------------

# Module-level containers that start empty and are filled at run time, and are NOT registries of named
# extensions: each is a cache or process state, with the reason.
NOT_REGISTRIES = {
    "zhin_cli/core/tokens.py:_ENCODINGS": "cache of loaded tokenizers",
    "zhin_cli/store/db/engines.py:_OPEN_HERE": "databases this process has open (lock bookkeeping)",
    "zhin_cli/store/db/engines.py:_LOCK_FDS": "lock file descriptors held by this process",
    "zhin_cli/signals.py:SIGNALLED": "the signal received, if any",
    "zhin_cli/core/redact.py:_remembered": "secrets seen this run, masked wherever they are printed",
    "zhin_cli/store/__init__.py:FALLBACKS": "which registered data sources are the catch-alls (names of SOURCES)",
    "zhin_cli/core/registry.py:_SHARES": "bookkeeping of the registries themselves: which plugin registration other "
                                         "loads of the same plugin share, so a release undoes it only at the last",
}


def _empty_module_containers(root: Path = ROOT) -> list[str]:
    found = []
    for path in sorted((root / "zhin_cli").rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            target, value = (node.target, node.value) if isinstance(node, ast.AnnAssign) else (
                (node.targets[0], node.value) if isinstance(node, ast.Assign) and len(node.targets) == 1 else (None, None))
            empty = (isinstance(value, ast.Dict) and not value.keys) or (isinstance(value, ast.List) and not value.elts) or (
                isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in ("dict", "list", "set")
                and not value.args)
            if isinstance(target, ast.Name) and empty:
                found.append(f"{path.relative_to(root).as_posix()}:{target.id}")
    return found


def test_every_module_level_table_filled_at_run_time_is_a_registry_or_a_named_cache() -> None:
    unexplained = [name for name in _empty_module_containers() if name not in NOT_REGISTRIES]
    assert unexplained == [], ("a module-level table filled at run time: make it a zhin_cli.core.registry.Registry "
                               "(one duplicate rule) or add it to NOT_REGISTRIES with the reason")


def test_the_scan_finds_a_plain_dict_registry(tmp_path: Path) -> None:  # negative control for the scan above
    (tmp_path / "zhin_cli").mkdir()
    (tmp_path / "zhin_cli" / "plugin_table.py").write_text(
        "HANDLERS: dict[str, int] = {}\nHOOKS = []\nSEEN = set()\nOK: Registry[int] = Registry('x')\nFULL = {'a': 1}\n",
        encoding="utf-8")
    assert _empty_module_containers(tmp_path) == [
        "zhin_cli/plugin_table.py:HANDLERS", "zhin_cli/plugin_table.py:HOOKS", "zhin_cli/plugin_table.py:SEEN"]
