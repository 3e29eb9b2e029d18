"""A provider spec is checked when it is registered (final review X1): a plugin's ``ProviderSpec`` with a wire format
nobody registered, a ``mid_conversation_system`` outside its values, impossible cache rules or an empty default model
is one ``ConfigError`` naming the provider and the field — ``zhin: error:``, exit 3, the config's file:line when a
plugin registers it — not a ``KeyError`` traceback from the first command that renders or lists it.

Also: a ``ProviderSpec(...)`` missing an argument names ``ProviderSpec``; ``RunContext.open`` takes a ``str`` cwd.
Negative controls: a well-formed plugin provider registers and lists; every built-in spec passes the same checks.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES

from zhin_cli.core.errors import ConfigError
from zhin_cli.pipeline.providers import PROVIDERS, ProviderSpec, register_provider
from zhin_cli.pipeline.providers.capabilities import CacheRules
from zhin_cli.wire import WIRES

GOOD = ProviderSpec(name="w", display="X", wire="openai-chat", default_model="m", mid_conversation_system="none")


@pytest.fixture(autouse=True)
def nothing_left_registered() -> Any:
    yield
    leaked = [name for name in ("w", "") if PROVIDERS.remove(name) is not None]  # removed: no cascade into others
    assert leaked == []


@pytest.mark.parametrize(("change", "field", "said"), [
    ({"wire": "nosuchwire"}, "wire", "'nosuchwire' is not a registered wire format (known: anthropic-messages"),
    ({"wire": "openai_chat"}, "wire", "'openai_chat' is not a registered wire format"),
    ({"mid_conversation_system": "user"}, "mid_conversation_system", "must be system, developer or none, got 'user'"),
    ({"cache": CacheRules(min_tokens=-1)}, "cache.min_tokens", "must be an integer ≥ 0, got -1"),
    ({"cache": CacheRules(step_tokens=0)}, "cache.step_tokens", "must be an integer ≥ 1, got 0"),
    ({"cache": CacheRules(lifetime_seconds=-5)}, "cache.lifetime_seconds", "must be an integer ≥ 0, got -5"),
    ({"cache": CacheRules(mechanism="sometimes")}, "cache.mechanism", "must be automatic, explicit or none"),  # type: ignore[arg-type]
    ({"cache": None}, "cache", "must be CacheRules"),
    ({"default_model": ""}, "default_model", "must be a non-empty string (or None: any model), got ''"),
    ({"default_model": 3}, "default_model", "must be a non-empty string (or None: any model), got 3"),
    ({"name": ""}, "name", "must be a non-empty string"),
])
def test_a_bad_field_is_one_config_error_naming_provider_and_field(change: dict[str, Any], field: str, said: str) -> None:
    bad = replace(GOOD, **change)
    with pytest.raises(ConfigError) as raised:
        register_provider(bad)
    name = change.get("name", "w")
    assert str(raised.value).startswith(f"provider {name!r}: {field} "), raised.value
    assert said in str(raised.value)
    assert name not in PROVIDERS  # nothing registered


def test_a_good_spec_registers() -> None:
    """Negative control: the same spec with sane fields is accepted (None: a provider serving any model)."""
    for spec in (GOOD, replace(GOOD, default_model=None, cache=CacheRules(min_tokens=0, step_tokens=1, lifetime_seconds=0))):
        try:
            assert register_provider(spec) is spec and PROVIDERS["w"] is spec
        finally:
            PROVIDERS.remove("w")


def test_every_builtin_spec_passes_the_checks() -> None:
    """The built-ins register at import without the wire check (the provider table stays light for completion):
    here they get every check, the wire's included."""
    from zhin_cli.pipeline.providers.spec import check_spec

    for spec in PROVIDERS.values():
        check_spec(spec)
        assert spec.wire in WIRES


PLUGIN = '''from zhin_cli.api import ProviderSpec, register_provider
SPEC = ProviderSpec(name="w", display="X", wire={wire!r}, default_model="m", mid_conversation_system="none")
def register(plugin):
    register_provider(SPEC)
'''


def project(tmp_path: Path, wire: str) -> Path:
    (tmp_path / "pp.py").write_text(PLUGIN.format(wire=wire), encoding="utf-8")
    (tmp_path / "b.yaml").write_text("# a plugin provider\nplugins: [pp.py]\n", encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("args", [("providers", "--config", "b.yaml"),
                                  ("trace", str(FIXTURES / "private-chat.jsonl"), "-p", "w", "--config", "b.yaml")])
def test_a_plugin_provider_with_a_wrong_wire_is_one_error_line(tmp_path: Path, zhin: Any, args: tuple[str, ...]) -> None:
    result = zhin(*args, cwd=project(tmp_path, "openai_chat"))
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr and "KeyError" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("zhin: error: ") and "b.yaml:2" in lines[0]  # the plugin's line in the config
    assert "plugin 'pp.py'" in lines[0] and "provider 'w': wire 'openai_chat' is not a registered wire format" in lines[0]


def test_a_plugin_provider_with_a_registered_wire_lists(tmp_path: Path, zhin: Any) -> None:
    """Negative control: the same plugin on a registered wire format is listed."""
    result = zhin("providers", "--config", "b.yaml", "--json", cwd=project(tmp_path, "openai-chat"))
    assert result.returncode == 0, result.stderr
    listed = {row["name"]: row for row in json.loads(result.stdout)["providers"]}
    assert listed["w"]["wire"] == "openai-chat"


def test_a_missing_argument_names_provider_spec() -> None:
    with pytest.raises(TypeError, match=r"^ProviderSpec\.__init__\(\) missing 1 required positional argument: 'wire'"):
        ProviderSpec(name="w", mid_conversation_system="none")  # type: ignore[call-arg]
    assert ProviderSpec(name="w", wire="openai-chat", mid_conversation_system="none").name == "w"  # control


def test_run_context_takes_a_str_cwd(tmp_path: Path) -> None:
    from zhin_cli.pipeline.context import RunContext

    for cwd in (str(tmp_path), tmp_path):  # a str (was AttributeError) and a Path (control)
        with RunContext.open(None, cwd=cwd) as context:
            assert context.cwd == tmp_path and isinstance(context.cwd, Path)
