"""zhin_cli.api, the stable public API (issue 32 Build 2): its names, its cost, who may import it, the deprecated
``zhin_cli.segments`` path, and a plugin owning — and releasing — what it registers in any registry."""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, clean_env
from test_layers import import_graph

import zhin_cli.api as api
from zhin_cli.core.registry import DuplicateName, Registry, recording
from zhin_cli.pipeline.config import parse_config

# Every name the API had at API_VERSION 1. A name may be added (add it here and to docs/api.md); removing one
# breaks plugins, so it needs a new API_VERSION.
SNAPSHOT_V1 = frozenset({
    "API_VERSION", "ZhinError", "ConfigError", "InputError", "UsageError", "Registry", "DuplicateName", "Session",
    "Actor", "UserMessage", "AssistantMessage", "ToolCall", "ToolResultMessage", "EventMessage", "SummaryMessage",
    "SceneFacts", "BotFacts", "Summary", "load_session", "SessionSource", "register_source", "SOURCES", "line_type",
    "LINE_TYPES", "PromptSegment", "TextSegment", "SegmentInput", "RuntimeView", "SessionView", "Retention", "KINDS",
    "Plugin", "Pipeline", "AssembledRequest", "Config", "load_config", "PriceTable", "Price", "load_prices",
    "Capabilities", "CacheRules", "RenderedRequest", "RenderedPart", "PROFILES", "register_profile", "RENDERERS",
    "register_renderer", "Verdict", "VALIDATORS", "register_validator", "WireFormat", "Block", "WIRES",
    "register_wire", "macro", "Arity", "MACROS", "NormalizedUsage", "usage_kind", "USAGE_KINDS", "assertion",
    "transform", "ASSERTIONS", "TRANSFORMS", "step", "STEPS", "Dialect", "register_dialect", "DIALECTS",
    "ProviderCase", "register_case", "CASES", "ProviderSpec", "PROVIDERS", "register_provider", "provider",
    "provider_names", "for_wire", "register_prices", "PRICE_ROWS", "RunContext", "Outcome", "ProviderRun",
    "EvalOptions", "run_eval",
})
HEAVY = ("zhin_cli.tools", "zhin_cli.pipeline.assemble", "zhin_cli.store.database", "zhin_cli.store.db", "sqlalchemy", "rich", "typer")


def removed(snapshot: frozenset[str], names: list[str]) -> set[str]:
    return set(snapshot) - set(names)


# --- the names ------------------------------------------------------------------------------------------------


def test_no_name_of_api_version_1_is_removed() -> None:
    assert api.API_VERSION == 1
    assert removed(SNAPSHOT_V1, api.__all__) == set()
    # negative control: the check sees a name that went
    assert removed(SNAPSHOT_V1, [n for n in api.__all__ if n != "TextSegment"]) == {"TextSegment"}


def test_every_name_is_in_the_snapshot_and_documented() -> None:
    """A new name is a promise too: it goes into the snapshot and docs/api.md in the same change."""
    assert set(api.__all__) - SNAPSHOT_V1 == set()
    assert len(api.__all__) == len(set(api.__all__))
    documented = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    assert [n for n in api.__all__ if not re.search(rf"`{n}[`(]", documented)] == []


def test_every_name_resolves_to_its_home_object() -> None:
    for name in api.__all__:
        if name == "API_VERSION":
            continue
        module, _, attr = api._HOMES[name].partition(":")
        assert getattr(api, name) is getattr(importlib.import_module(module), attr or name), name
    with pytest.raises(AttributeError):
        api.NoSuchName  # noqa: B018  (negative control: a name outside the API is an AttributeError)


def _modules_after(code: str) -> list[str]:
    script = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, env=clean_env(),
                            timeout=60, check=True)
    return json.loads(result.stdout)


def test_importing_the_api_loads_nothing_heavy() -> None:
    loaded = _modules_after("import zhin_cli.api")
    assert [m for m in loaded if m.startswith(HEAVY)] == []
    # negative control: reading a name from the eval layer does load it (the check can see a heavy import)
    loaded = _modules_after("import zhin_cli.api\nzhin_cli.api.assertion")
    assert "zhin_cli.tools.eval.registry" in loaded


def api_importers(graph: dict[str, set[str]]) -> list[str]:
    return sorted(module for module, targets in graph.items() if "zhin_cli.api" in targets and module != "zhin_cli.api")


def test_no_zhin_module_imports_the_api(tmp_path: Path) -> None:
    assert api_importers(import_graph()) == []
    # negative control: a tree where a stage imports the API is caught
    (tmp_path / "zhin_cli" / "pipeline").mkdir(parents=True)
    (tmp_path / "zhin_cli" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "zhin_cli" / "api.py").write_text("", encoding="utf-8")
    (tmp_path / "zhin_cli" / "pipeline" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "zhin_cli" / "pipeline" / "x.py").write_text("from zhin_cli.api import TextSegment\n", encoding="utf-8")
    assert api_importers(import_graph(tmp_path)) == ["zhin_cli.pipeline.x"]


# --- the moved module ---------------------------------------------------------------------------------------


def test_the_old_segments_path_still_loads_and_warns() -> None:
    script = ("import warnings\nwarnings.simplefilter('always')\n"
              "with warnings.catch_warnings(record=True) as caught:\n"
              "    from zhin_cli.segments import TextSegment, Generation\n"
              "    from zhin_cli.segments.builtin import default_registry\n"
              "import zhin_cli.pipeline.segments as new, zhin_cli.pipeline.segments.builtin as newb\n"
              "assert TextSegment is new.TextSegment and Generation is new.Generation\n"
              "assert default_registry is newb.default_registry\n"
              "print([(w.category.__name__, str(w.message)) for w in caught])")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, env=clean_env(),
                            timeout=60)
    assert result.returncode == 0, result.stderr
    caught = eval(result.stdout)  # noqa: S307  (our own repr of a list of tuples)
    assert [c for c, _ in caught] == ["DeprecationWarning"]
    assert "zhin_cli.api" in caught[0][1]


def test_the_new_segments_path_does_not_warn() -> None:
    """Negative control for the test above: the warning comes from the old path, not from the module itself."""
    script = ("import warnings\nwarnings.simplefilter('error')\nimport zhin_cli.pipeline.segments.builtin\n"
              "import zhin_cli.api\nzhin_cli.api.TextSegment\nprint('quiet')")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, env=clean_env(),
                            timeout=60)
    assert result.stdout.strip() == "quiet", result.stderr


# --- a plugin owns what it registers ---------------------------------------------------------------------------

OWNED = """\
from zhin_cli.api import (MACROS, NormalizedUsage, TextSegment, Verdict, line_type, macro, register_source,
                          register_validator, step, transform, usage_kind)
from zhin_cli.api import assertion


class Source:
    name = "acme-src"

    def claims(self, ref, cwd):
        return ref.startswith("acme:")

    def load(self, ref, *, db=None, cwd=None):
        raise NotImplementedError


@assertion("acme_ok")  # at import: the plugin's too
def _ok(run, spec):
    \"\"\"Always passes.\"\"\"
    return None


def register(plugin):
    plugin.register(TextSegment("acme.rules", "role_rules", "Be kind.", weight=3))
    register_source(Source())
    macro("user", replace=True)(lambda ctx, args: "ACME")  # overrides a built-in on purpose
    macro("acmeonly")(lambda ctx, args: "x")
    usage_kind("acme-usage")(lambda usage: NormalizedUsage())
    step("acme_step", {"type": "object"})(lambda builder, value, where: None)
    transform("acme_transform")(lambda request, params: request.body)
    register_validator("acme-validator")(lambda body, model: Verdict(ok=True))
    line_type("acme_line")(lambda builder, obj, where: None)
"""


def _registries() -> dict[str, Registry[object]]:
    names = ("SOURCES", "MACROS", "USAGE_KINDS", "STEPS", "TRANSFORMS", "VALIDATORS", "LINE_TYPES", "ASSERTIONS")
    return {name: getattr(api, name) for name in names}


def test_a_plugin_owns_its_registrations_everywhere_and_release_removes_them(tmp_path: Path) -> None:
    (tmp_path / "owned.py").write_text(OWNED, encoding="utf-8")
    registries = _registries()
    builtin_user = registries["MACROS"]["user"]
    config = parse_config({"plugins": ["owned.py"]}, tmp_path / "zhin.yaml")
    registry, generations = config.registry()
    try:
        plugin = generations[-1]
        expected = {("SOURCES", "acme-src"), ("MACROS", "user"), ("MACROS", "acmeonly"), ("USAGE_KINDS", "acme-usage"),
                    ("STEPS", "acme_step"), ("TRANSFORMS", "acme_transform"), ("VALIDATORS", "acme-validator"),
                    ("LINE_TYPES", "acme_line"), ("ASSERTIONS", "acme_ok")}
        for kind, name in expected:
            assert name in registries[kind], (kind, name)
            assert registries[kind].owners[name] == "owned.py", (kind, name)
        assert registries["MACROS"]["user"] is not builtin_user
        assert registry.owner("acme.rules") == "owned.py"
        assert {name for _, name in plugin.registered} >= {name for _, name in expected}
    finally:
        for generation in generations:
            generation.release()
    for kind, name in expected:
        if (kind, name) != ("MACROS", "user"):
            assert name not in registries[kind], (kind, name)
    assert registries["MACROS"]["user"] is builtin_user  # the replaced built-in is back, owned by builtin again
    assert registries["MACROS"].owners["user"] == "builtin"
    assert "acme.rules" not in registry


def test_a_plugin_cannot_take_a_builtin_name_without_replace(tmp_path: Path) -> None:
    """Negative control: recording does not weaken the duplicate rule, and a refused plugin leaves nothing behind."""
    (tmp_path / "clash.py").write_text(OWNED.replace('macro("user", replace=True)', 'macro("user")'), encoding="utf-8")
    config = parse_config({"plugins": ["clash.py"]}, tmp_path / "zhin.yaml")
    with pytest.raises(Exception, match="duplicate macro 'user'"):
        config.registry()
    registries = _registries()
    assert "acme-src" not in registries["SOURCES"] and "acme_ok" not in registries["ASSERTIONS"]
    assert registries["MACROS"].owners["user"] == "builtin"


def _import_as_zhin_module(path: Path, name: str) -> None:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


def test_a_zhin_module_imported_while_a_plugin_loads_registers_as_builtin(tmp_path: Path) -> None:
    """A plugin's ``import`` may be what first loads a zhin module (the eval registry, say): that module's own
    registrations are built-ins and must survive the plugin's release. Its function called by the plugin is not."""
    target: Registry[int] = Registry("test thing")
    sys.modules["_api_test_target"] = type(sys)("_api_test_target")
    sys.modules["_api_test_target"].TARGET = target  # type: ignore[attr-defined]
    module = tmp_path / "fake.py"
    module.write_text("import _api_test_target\n_api_test_target.TARGET.add('at-import', 1)\n"
                      "def later():\n    _api_test_target.TARGET.add('called', 2)\n", encoding="utf-8")
    try:
        with recording("plugin.py") as ledger:
            _import_as_zhin_module(module, "zhin_cli._api_test_fake")
            sys.modules["zhin_cli._api_test_fake"].later()
        assert target.owners == {"at-import": "builtin", "called": "plugin.py"}
        ledger.undo()
        assert dict(target) == {"at-import": 1}
        # negative control: the same file imported under a plugin's module name is the plugin's
        target.clear(), target.owners.clear()
        with recording("plugin.py") as ledger:
            _import_as_zhin_module(module, "zhin_plugin_fake")
        assert target.owners == {"at-import": "plugin.py"}
        ledger.undo()
        assert dict(target) == {}
    finally:
        for name in ("_api_test_target", "zhin_cli._api_test_fake", "zhin_plugin_fake"):
            sys.modules.pop(name, None)


def test_two_loads_of_one_plugin_share_its_items(tmp_path: Path) -> None:
    """prefix-diff loads a base and a head config, each naming the same plugin: its equal items are shared, and
    stay until the last load is released."""
    things: Registry[tuple[str, int]] = Registry("thing")
    with recording("p.py") as first:
        things.add("a", ("a", 1))
    with recording("p.py") as second:
        things.add("a", ("a", 1))
    first.undo()
    assert "a" in things
    second.undo()
    assert "a" not in things
    # the other order
    with recording("p.py") as first:
        things.add("a", ("a", 1))
    with recording("p.py") as second:
        things.add("a", ("a", 1))
    second.undo()
    assert "a" in things
    first.undo()
    assert "a" not in things
    # negative controls: another plugin, or another item under the name, is a duplicate
    with recording("p.py") as first:
        things.add("a", ("a", 1))
    with pytest.raises(DuplicateName), recording("q.py"):
        things.add("a", ("a", 1))
    with pytest.raises(DuplicateName), recording("p.py"):
        things.add("a", ("a", 2))
    first.undo()
    assert "a" not in things


def test_plugin_add_registers_into_any_registry(tmp_path: Path) -> None:
    from zhin_cli.pipeline.segments.builtin import default_registry

    things: Registry[int] = Registry("thing")
    plugin = default_registry().generation("x.py")
    plugin.add(things, "n", 1)
    assert things.owners["n"] == "x.py" and plugin.registered == [("thing", "n")]
    plugin.release()
    assert "n" not in things
    with pytest.raises(Exception, match="released"):
        plugin.add(things, "m", 2)


def test_one_plugin_loaded_on_many_threads_shares_and_releases_cleanly() -> None:
    """eval prepares and runs cases on worker threads, each loading the case's plugins: the same plugin's equal
    item is shared however the threads interleave, and the last release removes it."""
    import threading

    things: Registry[tuple[str, int]] = Registry("thing")
    errors: list[BaseException] = []
    start = threading.Barrier(16)

    def load_and_release(owner: str) -> None:
        try:
            start.wait()
            for _ in range(50):
                with recording(owner) as ledger:
                    things.add("acme", ("acme", 1))
                ledger.undo()
        except BaseException as exc:  # noqa: BLE001  (collected and asserted below)
            errors.append(exc)

    threads = [threading.Thread(target=load_and_release, args=("p.py",)) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and "acme" not in things
    # negative control: two different plugins holding the name at once, on two threads, is still a duplicate
    held = threading.Barrier(2)

    def claim(owner: str) -> None:
        with recording(owner) as ledger:
            try:
                things.add("acme", ("acme", 1))
            except DuplicateName as exc:
                errors.append(exc)
            held.wait()  # both threads have tried while the first one holds the name
        ledger.undo()

    threads = [threading.Thread(target=claim, args=(owner,)) for owner in ("p.py", "q.py")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [type(exc) for exc in errors] == [DuplicateName] and "acme" not in things
