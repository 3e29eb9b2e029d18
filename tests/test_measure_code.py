"""scripts/measure_code.py, the issue-32 figures, on made-up packages whose right answers are known by construction."""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("measure_code", ROOT / "scripts" / "measure_code.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["measure_code"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


measure_code = load_script()


def make_package(root: Path, files: dict[str, str], name: str = "pkg") -> Path:
    package = root / name
    for relative, text in {"__init__.py": "", **files}.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return package


# --- Any and dict[str, Any] -------------------------------------------------------------------------------------


def test_any_counts_every_mention_and_every_use_of_an_alias(tmp_path: Path) -> None:
    package = make_package(
        tmp_path,
        {
            "types.py": """\
                from typing import Any

                Body = dict[str, Any]
                Bodies = list[Body]
                """,
            "use.py": """\
                from typing import Any as Anything

                from pkg.types import Bodies, Body

                def first(bodies: Bodies) -> Body:
                    return bodies[0]

                def raw(value: Anything) -> dict[str, Any]:
                    return value
                """,
        },
    )
    figures = measure_code.measure(package)
    rows = {row["path"]: row for row in figures["by_file"]}
    # types.py: the import, Body's definition (1 Any, 1 dict), and Bodies' use of Body (1, 1)
    assert (rows["pkg/types.py"]["any"], rows["pkg/types.py"]["dict_str_any"]) == (3, 2)
    # use.py: the import line's "Any"; Bodies (1, 1) and Body (1, 1); Anything (1); the literal dict[str, Any] (1, 1)
    assert (rows["pkg/use.py"]["any"], rows["pkg/use.py"]["dict_str_any"]) == (5, 3)
    assert figures["any"]["count"] == 8 and figures["dict_str_any"]["count"] == 5


def test_a_name_bound_to_a_value_or_to_a_type_without_any_is_no_alias(tmp_path: Path) -> None:
    # negative control: the same names, bound to a call's result and to a type without Any, count nothing
    package = make_package(
        tmp_path,
        {
            "types.py": """\
                from typing import cast

                Body = cast(object, dict)
                Bodies = list[str]
                """,
            "use.py": """\
                from pkg.types import Bodies, Body

                def first(bodies: Bodies) -> Body:
                    return bodies[0]
                """,
        },
    )
    figures = measure_code.measure(package)
    assert figures["any"]["count"] == 0 and figures["dict_str_any"]["count"] == 0 and figures["by_file"] == []


def test_per_kloc_is_over_non_blank_lines_and_typeddicts_are_counted(tmp_path: Path) -> None:
    package = make_package(
        tmp_path,
        {
            "a.py": "from typing import Any, TypedDict\n\n\nclass Row(TypedDict):\n    x: Any\n\n\nPoint = TypedDict('Point', {'x': int})\n",
        },
    )
    figures = measure_code.measure(package)
    assert figures["nonblank_lines"] == 4 and figures["lines"] == 8
    assert figures["any"] == {"count": 2, "per_kloc": 500.0}
    assert figures["typeddicts"] == 2


# --- import cycles ----------------------------------------------------------------------------------------------

CYCLIC = {
    "a.py": "from pkg import b\n",  # a <-> b at module level
    "b.py": "from pkg.a import thing\n",
    "c.py": "def late():\n    from pkg import d\n",  # c <-> d only through a function's import
    "d.py": "import pkg.c\n",
    "e.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import f\n",  # never runs
    "f.py": "from pkg import e\n",
}


def test_cycles_are_found_at_module_level_and_with_function_imports(tmp_path: Path) -> None:
    figures = measure_code.measure(make_package(tmp_path, CYCLIC))
    module_level = figures["cycles"]["module_level"]
    assert [c["modules"] for c in module_level["components"]] == [["pkg.a", "pkg.b"]]
    assert module_level["components"][0]["edges"] == [["pkg.a", "pkg.b"], ["pkg.b", "pkg.a"]]
    everything = figures["cycles"]["with_function_imports"]
    assert [c["modules"] for c in everything["components"]] == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.d"]]
    assert (everything["count"], everything["modules"]) == (2, 4)


def test_an_acyclic_package_has_no_cycle(tmp_path: Path) -> None:
    # negative control: the same package with the back edges removed
    acyclic = {**CYCLIC, "b.py": "x = 1\n", "d.py": "x = 1\n"}
    figures = measure_code.measure(make_package(tmp_path, acyclic))
    assert figures["cycles"]["module_level"]["count"] == 0
    assert figures["cycles"]["with_function_imports"]["count"] == 0


def test_a_package_init_registering_its_modules_is_a_cycle(tmp_path: Path) -> None:
    # the registry pattern of issue 32 item 7: reg/__init__ imports its plugin, which imports the registry
    package = make_package(
        tmp_path,
        {
            "reg/__init__.py": "REGISTRY = {}\nfrom pkg.reg import plugin\n",
            "reg/plugin.py": "from pkg.reg import REGISTRY\n",
            "other.py": "import pkg.reg.plugin\n",
        },
    )
    figures = measure_code.measure(package)
    assert [c["modules"] for c in figures["cycles"]["module_level"]["components"]] == [["pkg.reg", "pkg.reg.plugin"]]


# --- sizes, JSON, mypy ------------------------------------------------------------------------------------------


def test_largest_modules_and_the_tools_share(tmp_path: Path) -> None:
    package = make_package(tmp_path, {"tools/__init__.py": "", "tools/big.py": "x = 1\n" * 30, "small.py": "y = 2\n" * 10})
    figures = measure_code.measure(package, largest=2)
    assert figures["largest"] == [{"path": "pkg/tools/big.py", "lines": 30}, {"path": "pkg/small.py", "lines": 10}]
    assert figures["tools"] == {"files": 2, "lines": 30, "share": 0.75}


def test_json_output_is_version_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    package = make_package(tmp_path, CYCLIC)
    assert measure_code.main([str(package), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["version"] == 1 and printed["cycles"]["module_level"]["count"] == 1
    assert measure_code.main([str(package)]) == 0
    assert "import cycles, module-level: 1 (2 modules)" in capsys.readouterr().out


def test_not_a_package_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_:
        measure_code.main([str(tmp_path)])
    assert exit_.value.code == 2


def test_mypy_strict_errors_are_counted(tmp_path: Path) -> None:
    # one function without annotations: an error under --strict only (a count of 0 would fail this test)
    package = make_package(
        tmp_path, {"typed.py": "def f(x: int) -> int:\n    return x\n", "untyped.py": "def g(x):\n    return x\n"}
    )
    assert measure_code.mypy_strict(package) == {"errors": 1, "files": 1}
