"""A provider a zhin.yaml's own plugin registers can be named in that zhin.yaml and in the eval cases run under it
(issue 32, two review findings).

1. ``provider: acme`` and ``providers: {acme: …}`` beside ``plugins: [acme_provider.py]``: the names are checked once
   the config's plugins ran (``Config.registry``), not against the built-in providers when the file is read.
2. ``zhin eval`` case listing ``providers: [acme]`` (the case itself, or one of its assertions), run under a project
   config whose plugin registers acme without ``-p acme``: the providers are checked while the config's plugins are
   loaded (``prepare``), and released after.

Negative controls: a provider nobody registers is still refused with its ``file:line`` (exit 3 for zhin.yaml, exit 4
for a case file), a config without plugins is still refused when it is read, a bad override of the plugin's
provider is refused at its line, and nothing stays registered after any test.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT

from zhin_cli.core.errors import ConfigError
from zhin_cli.pipeline.config import load_config
from zhin_cli.pipeline.prices import PRICE_ROWS
from zhin_cli.pipeline.providers import PROVIDERS, resolve_profile
from zhin_cli.tools.eval.cases import CaseError, load_cases
from zhin_cli.tools.eval.runner import EvalOptions, prepare, run_eval

PLUGIN = ROOT / "tests" / "plugins" / "acme_provider.py"
SESSION = FIXTURES / "private-chat.jsonl"


@pytest.fixture(autouse=True)
def nothing_left_registered() -> object:
    yield
    assert "acme" not in PROVIDERS and "acme" not in PRICE_ROWS  # every load released the plugin


def project(folder: Path, body: str) -> Path:
    """A prompt repo: the acme plugin file beside a zhin.yaml of ``body``."""
    shutil.copy(PLUGIN, folder / "acme_provider.py")
    path = folder / "zhin.yaml"
    path.write_text(textwrap.dedent(body).lstrip("\n"), encoding="utf-8")
    return path


def refused(path: Path) -> ConfigError:
    """The error loading ``path`` and running its plugins raises (the plugins released again)."""
    with pytest.raises(ConfigError) as caught:
        _, generations = load_config(path).registry()
        for generation in generations:
            generation.release()
    return caught.value


# --- 1. zhin.yaml names its plugin's provider ---------------------------------------------------------------------


def test_zhin_yaml_names_its_plugins_provider_and_overrides_it(tmp_path: Path) -> None:
    path = project(tmp_path, """
        plugins: [acme_provider.py]
        provider: acme
        providers: {acme: {prefill: false}}
    """)
    config = load_config(path)
    assert config.provider == "acme"
    _, generations = config.registry()
    try:
        assert resolve_profile("acme", "acme-1", config.provider_overrides["acme"]).prefill is False
        assert PROVIDERS["acme"].prefill is True  # the override is what changed it (acme's own default)
    finally:
        for generation in generations:
            generation.release()


@pytest.mark.parametrize(("body", "line", "message"), [
    ("plugins: [acme_provider.py]\nprovider: nobody\n", 2, "unknown provider 'nobody' (known: "),
    ("plugins: [acme_provider.py]\nproviders:\n  acme: {}\n  nobody: {prefill: false}\n", 4,
     "unknown provider 'nobody' under providers (known: "),
    ("plugins: [acme_provider.py]\nproviders:\n  acme:\n    prefill: 3\n", 3, "prefill must be true or false, got 3"),
])
def test_a_name_no_plugin_registers_is_refused_at_its_line(tmp_path: Path, body: str, line: int, message: str) -> None:
    error = refused(project(tmp_path, body))
    assert error.where == f"{tmp_path / 'zhin.yaml'}:{line}"
    assert message in error.message
    if "known: " in message:
        assert "acme" in error.message  # the names known once the plugins ran: the plugin's included


@pytest.mark.parametrize("body", ["provider: acme\n", "providers: {acme: {prefill: false}}\n"])
def test_without_plugins_the_name_is_refused_when_the_file_is_read(tmp_path: Path, body: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(project(tmp_path, body))  # no plugin can register it: refused before anything runs
    assert caught.value.where == f"{tmp_path / 'zhin.yaml'}:1"
    assert "unknown provider 'acme'" in caught.value.message


def test_trace_runs_under_the_plugins_provider_named_in_zhin_yaml(tmp_path: Path, zhin) -> None:  # type: ignore[no-untyped-def]
    project(tmp_path, "plugins: [acme_provider.py]\nprovider: acme\nproviders: {acme: {prefill: false}}\n")
    result = zhin("trace", SESSION, "--json", "--config", "zhin.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    request = json.loads(result.stdout)["requests"][0]
    assert (request["provider"], request["model"]) == ("acme", "acme-1")


def test_trace_refuses_a_provider_nobody_registers_with_its_line(tmp_path: Path, zhin) -> None:  # type: ignore[no-untyped-def]
    project(tmp_path, "plugins: [acme_provider.py]\nprovider: nobody\n")
    result = zhin("trace", SESSION, "--json", "--config", "zhin.yaml", cwd=tmp_path)
    assert result.returncode == 3
    assert result.stderr.startswith("zhin: error: zhin.yaml:2: unknown provider 'nobody' (known: ")
    assert len(result.stderr.splitlines()) == 1 and result.stdout == ""


# --- 2. an eval case names the project config's plugin provider -----------------------------------------------------

CASE = """\
version: 1
cases:
  - id: acme.hello
    providers: [{providers}]
    timeline:
      - user: {{from: "10002", text: hi}}
      - assistant: {{text: hello}}
    assertions:
      - {{type: verdict, accepted: true, providers: [{asserted}]}}
"""


def cases(folder: Path, providers: str = "acme", asserted: str = "acme") -> Path:
    (folder / "cases").mkdir()
    path = folder / "cases" / "z.yaml"
    path.write_text(CASE.format(providers=providers, asserted=asserted), encoding="utf-8")
    return path


def test_prepare_knows_the_project_configs_plugin_provider(tmp_path: Path) -> None:
    config = load_config(project(tmp_path, "plugins: [acme_provider.py]\n"))
    case = load_cases([cases(tmp_path)])[0]
    assert prepare(case, project=config).providers == [("acme", None)]
    assert "acme" not in PROVIDERS  # released after the check


@pytest.mark.parametrize(("providers", "asserted", "line"), [("nobody", "acme", 4), ("acme", "nobody", 9)])
def test_prepare_refuses_a_provider_nobody_registers(tmp_path: Path, providers: str, asserted: str, line: int) -> None:
    config = load_config(project(tmp_path, "plugins: [acme_provider.py]\n"))
    path = cases(tmp_path, providers, asserted)
    with pytest.raises(CaseError) as caught:
        prepare(load_cases([path])[0], project=config)
    assert caught.value.where == f"{path}:{line}"
    assert "unknown provider 'nobody'" in caught.value.message


def test_run_eval_runs_the_case_under_the_plugins_provider(tmp_path: Path) -> None:
    config = load_config(project(tmp_path, "plugins: [acme_provider.py]\n"))
    run = run_eval([cases(tmp_path)], EvalOptions(project_config=config))
    assert [(r.status, r.providers) for r in run.results] == [("passed", ["acme"])], run.results[0].reason
    assert [a.provider for a in run.results[0].assertions] == ["acme"]


def test_eval_cli_runs_the_case_without_naming_the_provider(tmp_path: Path, zhin) -> None:  # type: ignore[no-untyped-def]
    project(tmp_path, "plugins: [acme_provider.py]\n")
    cases(tmp_path)
    result = zhin("eval", "cases", "--config", "zhin.yaml", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert [(c["status"], c["providers"]) for c in document["cases"]] == [("passed", ["acme"])]


def test_eval_cli_refuses_a_case_provider_nobody_registers(tmp_path: Path, zhin) -> None:  # type: ignore[no-untyped-def]
    project(tmp_path, "plugins: [acme_provider.py]\n")
    cases(tmp_path, providers="nobody")
    result = zhin("eval", "cases", "--config", "zhin.yaml", cwd=tmp_path)
    assert result.returncode == 4
    assert result.stderr.startswith("zhin: error: cases/z.yaml:4: unknown provider 'nobody' (known: ")
    assert len(result.stderr.splitlines()) == 1


CASE_WITH_CONFIG = """\
version: 1
cases:
  - id: acme.own-config
    config: {{plugins: [acme_provider.py]}}
    providers: [{providers}]
    timeline:
      - user: {{from: "10002", text: hi}}
      - assistant: {{text: hello}}
    assertions:
      - {{type: verdict, accepted: true}}
"""


@pytest.mark.parametrize(("providers", "refused_at"), [("acme", None), ("nobody", 5)])
def test_a_cases_own_config_plugin_provider_is_known_while_it_is_checked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, providers: str, refused_at: int | None) -> None:
    monkeypatch.setenv("ZHIN_ALLOW_PLUGINS", "1")  # the case file's plugins may run (as after `zhin trust`)
    (tmp_path / "cases").mkdir()
    shutil.copy(PLUGIN, tmp_path / "cases" / "acme_provider.py")
    path = tmp_path / "cases" / "own.yaml"
    path.write_text(CASE_WITH_CONFIG.format(providers=providers), encoding="utf-8")
    case = load_cases([path])[0]
    if refused_at is None:
        assert prepare(case).providers == [("acme", None)]
        return
    with pytest.raises(CaseError) as caught:  # negative control: a name the case's plugin does not register
        prepare(case)
    assert caught.value.where == f"{path}:{refused_at}" and "unknown provider 'nobody'" in caught.value.message
