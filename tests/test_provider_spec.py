"""One object per provider (issue 32): the registry (``provider``, ``provider_names``, ``for_wire``,
``register_provider``), the cached resolution, and the built-in specs as light data."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from zhin_cli.core.registry import DuplicateName
from zhin_cli.pipeline.providers import spec as registry
from zhin_cli.pipeline.providers.capabilities import CacheRules, ProviderSpec

ACME = ProviderSpec(name="acme", wire="openai-chat", mid_conversation_system="system", display="Acme",
                    price_key="openai", default_model="acme-1", model_prefixes=("acme-",),
                    cache=CacheRules(mechanism="none", min_tokens=0, step_tokens=1))


@pytest.fixture
def acme() -> Iterator[ProviderSpec]:
    """``ACME`` registered for one test, then removed."""
    registry.register_provider(ACME, owner="test")
    try:
        yield ACME
    finally:
        registry.unregister_provider(ACME.name)


def test_a_registered_spec_is_found_by_name_and_listed(acme: ProviderSpec) -> None:
    assert registry.provider("acme") is acme
    assert "acme" in registry.provider_names()
    assert registry.PROVIDERS.owners["acme"] == "test"
    assert registry.PROFILES is registry.PROVIDERS  # the old name reads the same table


def test_a_removed_spec_is_unknown_with_the_one_message() -> None:
    registry.register_provider(ACME)
    registry.unregister_provider("acme")
    assert "acme" not in registry.provider_names()
    known = re.escape(", ".join(registry.provider_names()))  # whatever the built-ins are, all of them, sorted
    with pytest.raises(registry.UnknownProvider, match=rf"unknown provider 'acme' \(known: {known}"):
        registry.provider("acme")


def test_a_duplicate_name_is_refused_unless_replacing(acme: ProviderSpec) -> None:
    with pytest.raises(DuplicateName, match="acme"):
        registry.register_provider(replace(acme, display="Other"))
    assert registry.provider("acme").display == "Acme"  # negative control: the first one still answers
    registry.register_provider(replace(acme, display="Other"), replace=True)
    assert registry.provider("acme").title == "Other"


def test_provider_names_are_sorted_and_take_extra_names() -> None:
    names = registry.provider_names()
    assert names == sorted(names) and {"openai", "anthropic", "gemini", "deepseek", "vllm"} <= set(names)
    assert registry.provider_names(["zz-plugin"])[-1] == "zz-plugin"
    assert "zz-plugin" not in registry.provider_names()  # negative control: extra names are not registered


def test_for_wire_picks_the_wire_default_provider() -> None:
    assert registry.for_wire("openai-chat").name == "openai"
    assert registry.for_wire("anthropic-messages").name == "anthropic"
    assert registry.for_wire("gemini-generate").name == "gemini"
    with pytest.raises(registry.UnknownProvider, match="no provider speaks wire format 'nope'"):
        registry.for_wire("nope")


def test_for_wire_prefers_the_wire_default_over_registration_order(acme: ProviderSpec,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from zhin_cli.wire import WIRES

    monkeypatch.setitem(WIRES, "test-wire", WIRES["openai-chat"])  # a spec's wire must be a registered one
    registry.unregister_provider("acme")
    first = replace(acme, wire="test-wire", name="acme")
    second = replace(acme, wire="test-wire", name="acme-default", wire_default=True)
    registry.register_provider(first)
    registry.register_provider(second)
    try:
        assert registry.for_wire("test-wire").name == "acme-default"
        registry.unregister_provider("acme-default")
        assert registry.for_wire("test-wire").name == "acme"  # negative control: without the mark, the first
    finally:
        registry.unregister_provider("acme-default")


def test_the_built_in_specs_carry_what_other_tables_used_to_list() -> None:
    assert registry.provider("openai-reasoning").prices_under == "openai"
    assert registry.provider("deepseek").prices_under == "deepseek"
    assert registry.provider("anthropic").title == "Anthropic" and registry.provider("vllm").title == "vllm"
    # report economy's default providers, once its own list, are the specs marked economy (a built-in added later
    # may join them): each is billable at its default model from the shipped rows, as an economy case must be.
    economy = {spec.name for spec in registry.PROVIDERS.values() if spec.economy}
    assert {"openai", "anthropic", "deepseek"} <= economy and "gemini" not in economy
    assert all(_ships_a_price(name) for name in economy)
    assert not _ships_a_price("gemini")  # negative control: a provider without rows in prices.json
    assert registry.provider("anthropic").economy_min_tokens == 1024
    assert registry.provider("gemini").default_model == "gemini-2.5-flash"
    assert registry.provider("openai-compatible").default_model is None  # a gateway serves any model


def _ships_a_price(name: str) -> bool:
    """prices.json has a row for the provider's default model."""
    from zhin_cli.pipeline.prices import builtin_prices

    spec = registry.provider(name)
    return spec.default_model is not None and builtin_prices().choose(name, spec.default_model) is not None


def test_resolved_computes_once_per_name_model_and_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str]] = []
    original = registry.resolve_profile

    def counting(name: str, model: str, overrides: object = None) -> object:
        calls.append((name, model))
        return original(name, model, overrides)  # type: ignore[arg-type]

    monkeypatch.setattr(registry, "resolve_profile", counting)
    registry._resolve_once.cache_clear()
    overrides = {"mid_conversation_system": "developer", "models": {"^gpt": {"prefill": False}}}
    first = registry.resolved("openai", "gpt-4o", overrides)
    for _ in range(5):
        assert registry.resolved("openai", "gpt-4o", dict(overrides)) == first
    assert calls == [("openai", "gpt-4o")]
    assert first == original("openai", "gpt-4o", overrides) and not first.prefill
    registry.resolved("openai", "gpt-4o", {"mid_conversation_system": "none"})  # negative controls: other overrides,
    registry.resolved("openai", "gpt-4.1", overrides)  # another model
    assert len(calls) == 3


def test_resolved_follows_a_replaced_spec_and_module_state(acme: ProviderSpec) -> None:
    assert registry.resolved("acme", "acme-1").mid_conversation_system == "system"
    registry.register_provider(replace(acme, mid_conversation_system="none"), replace=True)
    assert registry.resolved("acme", "acme-1").mid_conversation_system == "none"  # not the cached answer

    from zhin_cli.pipeline.providers.specs import deepseek

    assert not registry.resolved("deepseek", "my-r1").strict_turns
    deepseek.set_r1_era_models(["my-r1"])
    try:
        assert registry.resolved("deepseek", "my-r1").strict_turns  # set_r1_era_models is part of the key
    finally:
        deepseek.set_r1_era_models([])


def test_a_bad_override_is_not_cached_and_still_refused() -> None:
    for _ in range(2):
        with pytest.raises(registry.ConfigError, match="mid_conversation_system must be"):
            registry.resolved("openai", "gpt-4o", {"mid_conversation_system": "sometimes"})


def test_the_provider_table_loads_without_renderers_presets_or_wire_formats() -> None:
    code = ("import sys\nfrom zhin_cli.pipeline.providers import provider_names\nprovider_names()\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('zhin_cli'))))\n")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "zhin_cli.pipeline.providers.specs.anthropic" in loaded  # negative control: the specs were read
    heavy = [m for m in loaded if m.startswith(("zhin_cli.pipeline.preset", "zhin_cli.pipeline.segments",
                                                "zhin_cli.pipeline.assemble", "zhin_cli.wire", "zhin_cli.store"))
             or m in {f"zhin_cli.pipeline.providers.{r}" for r in ("openai", "anthropic", "gemini", "local", "shaping")}]
    assert heavy == []


def test_a_renderer_is_imported_on_the_first_render_only() -> None:
    code = ("import sys\nfrom zhin_cli.pipeline.providers import renderer_for, provider\n"
            "print('zhin_cli.pipeline.providers.gemini' in sys.modules)\n"
            "renderer_for(provider('gemini'))\nprint('zhin_cli.pipeline.providers.gemini' in sys.modules)\n")
    answer = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert answer == ["False", "True"]


def _private_imports(sources: dict[str, str]) -> list[tuple[str, str]]:
    return [(name, alias.name) for name, text in sources.items() for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("zhin_cli.pipeline.providers")
            for alias in node.names if alias.name.startswith("_")]


def test_no_provider_module_imports_a_private_helper_of_another() -> None:
    import zhin_cli.pipeline.providers as package

    folder = Path(package.__file__).parent
    assert _private_imports({p.name: p.read_text(encoding="utf-8") for p in folder.rglob("*.py")}) == []
    # negative control: the line gemini.py had is found
    assert _private_imports({"gemini.py": "from zhin_cli.pipeline.providers.anthropic import _input\n"}) == [
        ("gemini.py", "_input")]


# --- the lists that used to be kept by hand, now read from the registry ------------------------------------------

ROWS = {"default": "acme-1", "models": {"acme-1": {"input": 1.0, "cached_input": 0.1,
                                                   "source": "test", "read_on": "2026-12-01"}}}


def test_price_keys_follow_the_registry(acme: ProviderSpec) -> None:
    from zhin_cli.pipeline.prices import PRICE_PROVIDERS, builtin_prices, price_key

    # the providers billed under another's rows, each under its spec's price key (no fixed list of built-ins)
    assert PRICE_PROVIDERS["acme"] == "openai" and PRICE_PROVIDERS["openai-reasoning"] == "openai"
    assert all(registry.provider(name).prices_under == key != name for name, key in PRICE_PROVIDERS.items())
    assert "openai" not in PRICE_PROVIDERS  # negative control: one billed under its own name is not listed
    assert price_key("acme") == "openai" and price_key("nosuch") == "nosuch"
    choice = builtin_prices().choose("acme", "gpt-4o")
    assert choice is not None and choice.price.model == "gpt-4o"
    registry.unregister_provider("acme")
    assert "acme" not in PRICE_PROVIDERS and builtin_prices().choose("acme", "gpt-4o") is None  # negative control


def test_a_provider_brings_its_own_price_rows() -> None:
    from zhin_cli.pipeline.prices import load_prices

    assert load_prices().choose("acme-own", "acme-1") is None  # negative control: no spec, no rows
    registry.register_provider(replace(ACME, name="acme-own", price_key=None, prices=ROWS))
    try:
        choice = load_prices().choose("acme-own", "acme-1")
        assert choice is not None and (choice.price.input, choice.note) == (1.0, None)
        config = load_prices({"acme-own": {"models": {"acme-1": {"input": 3.0, "cached_input": 0.3, "source": "zhin.yaml", "read_on": "2026-12-02"}}}})
        assert config.choose("acme-own", "acme-1").price.input == 3.0  # type: ignore[union-attr]  # zhin.yaml wins
    finally:
        registry.unregister_provider("acme-own")


def test_a_provider_s_bad_price_rows_are_one_config_error() -> None:
    from zhin_cli.pipeline.prices import load_prices

    registry.register_provider(replace(ACME, name="acme-bad", price_key=None, prices={"default": "x", "models": {}}))
    try:
        with pytest.raises(registry.ConfigError, match="acme-bad"):
            load_prices()
    finally:
        registry.unregister_provider("acme-bad")


def test_default_model_and_model_prefixes_come_from_the_spec() -> None:
    from zhin_cli.pipeline.models import FALLBACK_MODEL, belongs, default_model

    assert default_model("acme-own") == FALLBACK_MODEL and belongs("acme-own", "gpt-4o")  # unknown: serves any
    registry.register_provider(replace(ACME, name="acme-own", price_key=None, prices=ROWS, model_prefixes=("acme-x",)))
    try:
        assert default_model("acme-own") == "acme-1"
        assert belongs("acme-own", "acme-x2") and belongs("acme-own", "acme-1-mini")  # prefix; its own price row
        assert not belongs("acme-own", "gpt-4o")  # negative control: another vendor's model
    finally:
        registry.unregister_provider("acme-own")


def test_the_config_schema_names_the_registered_providers(acme: ProviderSpec) -> None:
    from zhin_cli.pipeline.config_schema import config_schema, validate_config

    assert "acme" in config_schema()["properties"]["providers"]["propertyNames"]["examples"]
    validate_config({"provider": "acme", "providers": {"acme": {"prefill": False}}}, lambda key: None)
    registry.unregister_provider("acme")
    assert "acme" not in config_schema()["properties"]["providers"]["propertyNames"]["examples"]  # negative control
    with pytest.raises(registry.ConfigError, match="unknown provider 'acme'"):
        validate_config({"provider": "acme"}, lambda key: None)


def test_zhin_providers_lists_a_registered_spec_with_its_owner_and_new_fields(acme: ProviderSpec, tmp_path: Path) -> None:
    import json

    from conftest import run_zhin

    shown = json.loads(run_zhin("providers", "--json", cwd=tmp_path).stdout)
    assert shown["version"] == 1
    rows = {row["name"]: row for row in shown["providers"]}
    assert rows["acme"]["owner"] == "test" and rows["acme"]["display"] == "Acme" and rows["openai"]["owner"] == "builtin"
    assert {"wire", "validator", "cache", "description", "mid_conversation_system"} <= rows["openai"].keys()  # kept
    assert "acme" in run_zhin("providers", cwd=tmp_path).stdout
    registry.unregister_provider("acme")
    assert "acme" not in run_zhin("providers", cwd=tmp_path).stdout  # negative control: gone with the spec


# --- no module-level import cycle in the registries' packages (issue 32, Build 7) --------------------------------

PACKAGES = ("zhin_cli.wire", "zhin_cli.pipeline.providers", "zhin_cli.pipeline.validate")


def _imports_of_own_package(package: str, sources: dict[str, str]) -> list[str]:
    """Modules of ``package`` that import the package itself (its ``__init__``) at module level: the registry lives
    there and imports them, so that edge would close a cycle."""
    found = []
    for name, text in sources.items():
        for node in ast.parse(text).body:
            if isinstance(node, ast.ImportFrom) and node.module == package and node.level == 0:
                submodules = {alias.name for alias in node.names if f"{package}.{alias.name}" in sys.modules}
                if {alias.name for alias in node.names} - submodules:
                    found.append(name)
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_imports_its_registry_package(package: str) -> None:
    import importlib

    module = importlib.import_module(package)
    folder = Path(module.__file__ or "").parent
    sources = {str(p.relative_to(folder)): p.read_text(encoding="utf-8") for p in folder.rglob("*.py")
               if p.name != "__init__.py"}
    assert len(sources) >= 4 and _imports_of_own_package(package, sources) == []
    # negative control: the line every format module had before
    assert _imports_of_own_package("zhin_cli.wire", {"openai_chat.py": "from zhin_cli.wire import Block\n"}) == [
        "openai_chat.py"]


def _entry(text: str, name: str) -> str:
    """The lines ``zhin providers`` prints for provider ``name``: its table row, or its block (the name on a line of
    its own, then the indented fields)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == name or line.startswith(f"│ {name} "))
    block = [lines[start]]
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        block.append(line)
    return "\n".join(block)


def test_the_system_prompt_place_is_the_wire_format_s(tmp_path: Path) -> None:
    """``zhin providers`` reads where the system prompt goes from the wire format (no table of wires in the CLI)."""
    from conftest import run_zhin

    from zhin_cli.wire import WIRES, WireFormat, register_wire

    class Elsewhere(WireFormat):
        name = "test-elsewhere"
        system_place = "the preamble field"

    register_wire(Elsewhere())
    registry.register_provider(replace(ACME, name="acme-elsewhere", wire="test-elsewhere"), owner="test")
    try:
        text = run_zhin("providers", cwd=tmp_path).stdout  # a row per provider, or a block each when narrow
        assert "the preamble field" in _entry(text, "acme-elsewhere")
        openai = _entry(text, "openai")
        assert "system message" in openai and "preamble" not in openai  # negative control: the wire's own place
    finally:
        registry.unregister_provider("acme-elsewhere")
        WIRES.remove("test-elsewhere")


# --- adding a provider on an existing wire format is one file ----------------------------------------------------

ACME_MODULE = '''"""Acme: an OpenAI-shaped endpoint (the one file a provider on an existing wire format needs)."""

from zhin_cli.pipeline.providers.capabilities import CacheRules, ProviderSpec

SPECS = (
    ProviderSpec(
        name="acme",
        wire="openai-chat",
        mid_conversation_system="system",
        cache=CacheRules(mechanism="automatic", min_tokens=512, step_tokens=64),
        description="Acme's chat endpoint",
        display="Acme",
        default_model="acme-large",
        model_prefixes=("acme-",),
        prices={"default": "acme-large", "models": {"acme-large": {
            "input": 2.0, "cached_input": 0.5, "source": "acme.example/pricing", "read_on": "2026-12-01"}}},
    ),
)
'''

LISTS = '''
import json, sys
from zhin_cli._cli.data import complete_providers
from zhin_cli.pipeline.config_schema import config_schema
from zhin_cli.pipeline.models import default_model
from zhin_cli.pipeline.prices import load_prices
from zhin_cli.pipeline.providers import provider, provider_names, resolve_profile
print(json.dumps({
    "names": "acme" in provider_names(),
    "completion": [item.value for item in complete_providers("ac")],
    "schema": "acme" in config_schema()["properties"]["providers"]["propertyNames"]["examples"],
    "default_model": default_model("acme"),
    "price": load_prices().choose("acme", "acme-large").price.input,
    "resolved": resolve_profile("acme", "acme-large").cache.min_tokens,
    "display": provider("acme").title,
}))
'''


def _copy_with(tmp_path: Path, files: dict[str, str]) -> Path:
    """A copy of the zhin_cli package with ``files`` (paths inside it) added: what a contributor's change is."""
    import shutil

    import zhin_cli

    root = tmp_path / "tree"
    shutil.copytree(Path(zhin_cli.__file__).parent, root / "zhin_cli", ignore=shutil.ignore_patterns("__pycache__"))
    for name, text in files.items():
        (root / "zhin_cli" / name).write_text(text, encoding="utf-8")
    return root


def _run_in(root: Path, *arguments: str) -> str:
    import os

    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, *arguments], cwd=root, env=env, capture_output=True, text=True,
                          check=True).stdout


def test_a_provider_on_an_existing_wire_is_one_new_module(tmp_path: Path) -> None:
    import json

    root = _copy_with(tmp_path, {"pipeline/providers/specs/acme.py": ACME_MODULE})
    shown = json.loads(_run_in(root, "-c", LISTS))
    assert shown == {"names": True, "completion": ["acme"], "schema": True, "default_model": "acme-large",
                     "price": 2.0, "resolved": 512, "display": "Acme"}
    providers = json.loads(_run_in(root, "-m", "zhin_cli", "providers", "--json"))["providers"]
    assert [row["display"] for row in providers if row["name"] == "acme"] == ["Acme"]


def test_without_the_module_no_list_has_the_provider(tmp_path: Path) -> None:  # negative control for the above
    root = _copy_with(tmp_path, {})
    names = _run_in(root, "-c", "from zhin_cli.pipeline.providers import provider_names\n"
                                "from zhin_cli._cli.data import complete_providers\n"
                                "print(provider_names(), [item.value for item in complete_providers('ac')])\n")
    assert "openai" in names and "acme" not in names
    assert "acme" not in _run_in(root, "-m", "zhin_cli", "providers")


# --- the tools' lists of providers read the registry --------------------------------------------------------------


def test_prefix_diff_names_a_provider_by_its_spec(acme: ProviderSpec) -> None:
    from zhin_cli.cache.diff import provider_name

    assert (provider_name("acme"), provider_name("openai-reasoning"), provider_name("vllm")) == ("Acme", "OpenAI", "vllm")
    registry.unregister_provider("acme")
    assert provider_name("acme") == "acme"  # negative control: gone with the spec, the name as given


def test_report_economy_simulates_any_registered_provider(acme: ProviderSpec) -> None:
    from zhin_cli.tools.report.economy import CASES, provider_case

    # the defaults: the specs marked economy (whichever built-ins those are)
    assert set(CASES) == {name for name, spec in registry.PROVIDERS.items() if spec.economy}
    assert {"openai", "anthropic", "deepseek"} <= set(CASES) and "gemini" not in CASES  # negative control: not marked
    assert provider_case("anthropic") == CASES["anthropic"] and CASES["anthropic"].min_tokens == 1024
    case = provider_case("acme")
    assert case is not None and (case.provider, case.model, case.min_tokens) == ("acme", "acme-1", None)
    registry.unregister_provider("acme")
    assert provider_case("acme") is None  # negative control


def test_report_economy_runs_a_registered_provider_and_refuses_an_unknown_one(acme: ProviderSpec, tmp_path: Path) -> None:
    import json

    from conftest import run_zhin

    fixture = Path(__file__).parent.parent / "fixtures" / "private-chat.jsonl"
    shown = run_zhin("report", "economy", fixture, "--provider", "acme", "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert list(json.loads(shown.stdout)["sessions"][0]["cache"]) == ["acme"]
    registry.unregister_provider("acme")
    refused = run_zhin("report", "economy", fixture, "--provider", "acme", cwd=tmp_path)
    assert refused.returncode == 2 and "unknown provider 'acme'" in refused.stderr  # negative control


def test_a_bare_body_is_simulated_as_its_wire_default_provider(acme: ProviderSpec) -> None:
    from zhin_cli.cache.captures import body_request
    from zhin_cli.store.captures import CapturedBody

    body = CapturedBody(1, "body.json", "openai-chat", {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
    assert body_request(body, None).profile.name == "openai"
    registry.register_provider(replace(acme, name="acme-default", wire="openai-chat", wire_default=True))
    registry.register_provider(replace(registry.provider("openai"), wire_default=False), replace=True)
    try:
        assert body_request(body, None).profile.name == "acme-default"  # the mark moved, so did the simulation
    finally:
        registry.unregister_provider("acme-default")
        registry.register_provider(replace(registry.provider("openai"), wire_default=True), replace=True)


def test_serve_routes_answer_as_their_wire_default_provider() -> None:
    from zhin_cli.tools.serve.server import ENDPOINTS

    messages, chat = ENDPOINTS["/v1/messages"], ENDPOINTS["/v1/chat/completions"]
    assert messages.provider_for("openai") == "anthropic" and chat.provider_for("deepseek") == "deepseek"
    saved = registry.unregister_provider("anthropic")
    try:
        assert messages.provider_for("openai") is None  # negative control: nobody speaks the wire
    finally:
        assert saved is not None
        registry.register_provider(saved)
