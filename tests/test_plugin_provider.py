"""Issue 32 "Done when": a provider defined in a plugin FILE through ``zhin_cli.api`` only — an OpenAI-shaped
endpoint with its own name, capabilities and prices (tests/plugins/acme_provider.py) — is accepted by the commands
that take ``--provider``, with no change to zhin: a zhin.yaml naming the plugin (given with ``--config``) is enough.

Negative controls: without the plugin, ``--provider acme`` is exit 2 "unknown provider"; with a zhin.yaml found
upward and not trusted, exit 3 and nothing registered. After every command the provider is gone again (the plugin
was released), so no test sees another's registration.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
from conftest import FIXTURES, ROOT, clean_env
from serve_process import ServeProcess

from zhin_cli.pipeline.prices import PRICE_ROWS
from zhin_cli.pipeline.providers import PROVIDERS

PLUGIN = ROOT / "tests" / "plugins" / "acme_provider.py"
SESSION = FIXTURES / "private-chat.jsonl"
ACME_INPUT, ACME_CACHED = 0.4, 0.04  # the plugin's price row, USD per million tokens


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A prompt repo whose zhin.yaml names the plugin file beside it."""
    shutil.copy(PLUGIN, tmp_path / "acme_provider.py")
    (tmp_path / "zhin.yaml").write_text("plugins: [acme_provider.py]\n", encoding="utf-8")
    return tmp_path


@pytest.fixture(autouse=True)
def nothing_left_registered() -> object:
    yield
    assert "acme" not in PROVIDERS and "acme" not in PRICE_ROWS  # every command released the plugin


def test_the_plugin_imports_only_the_public_api() -> None:
    tree = ast.parse(PLUGIN.read_text(encoding="utf-8"))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert imported == {"zhin_cli.api"}


def test_trace_takes_the_plugin_provider(project: Path, zhin) -> None:  # type: ignore[no-untyped-def]
    result = zhin("trace", SESSION, "--json", "-p", "acme", "--config", "zhin.yaml", cwd=project)
    assert result.returncode == 0, result.stderr
    request = json.loads(result.stdout)["requests"][0]
    assert (request["provider"], request["model"]) == ("acme", "acme-1")  # acme's default model
    assert request["request"]["model"] == "acme-1"
    assert "Model: acme-1 via acme." in request["request"]["messages"][0]["content"]


def test_prefix_diff_bills_at_the_plugins_prices(project: Path, zhin) -> None:  # type: ignore[no-untyped-def]
    result = zhin("prefix-diff", SESSION, "--json", "-p", "acme", "--config", "zhin.yaml", cwd=project)
    assert result.returncode == 0, result.stderr
    session = json.loads(result.stdout)["sessions"][0]
    assert (session["provider"], session["model"]) == ("acme", "acme-1")
    cost = session["summary"]["cost"]
    expected = (cost["uncached_tokens"] * ACME_INPUT + cost["cached_tokens"] * ACME_CACHED) / 1e6
    assert cost["total"] == pytest.approx(expected, rel=1e-3)
    assert cost["cached_tokens"] > 0  # acme's cache rules (256-token minimum) let the prefix hit


def test_report_html_takes_the_plugin_provider(project: Path, zhin) -> None:  # type: ignore[no-untyped-def]
    result = zhin("report", "html", SESSION, "-p", "acme", "--config", "zhin.yaml", "-o", "page.html", cwd=project)
    assert result.returncode == 0, result.stderr
    assert "acme-1" in (project / "page.html").read_text(encoding="utf-8")


def test_report_window_bills_at_the_plugins_prices(project: Path, zhin) -> None:  # type: ignore[no-untyped-def]
    result = zhin("report", "window", SESSION, "-p", "acme", "--config", "zhin.yaml", "--json", "-j", "1", cwd=project)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["provider"], report["model"]) == ("acme", "acme-1")
    assert (report["price"]["input"], report["price"]["cached_input"]) == (ACME_INPUT, ACME_CACHED)


def test_budget_measures_and_checks_the_plugin_provider(project: Path, zhin) -> None:  # type: ignore[no-untyped-def]
    update = zhin("budget", "update", "-p", "acme", "-s", SESSION, "--config", "zhin.yaml", "--file", "budget.yaml",
                  cwd=project)
    assert update.returncode == 0, update.stderr
    assert "provider: acme" in (project / "budget.yaml").read_text(encoding="utf-8")
    check = zhin("budget", "check", "--config", "zhin.yaml", "--file", "budget.yaml", "--json", cwd=project)
    assert check.returncode == 0, check.stderr
    assert '"acme"' in check.stdout


def test_preset_probe_takes_the_plugin_provider(project: Path, zhin) -> None:  # type: ignore[no-untyped-def]
    preset = ROOT / "fixtures" / "presets" / "st-default.json"
    result = zhin("preset", "probe", preset, "-s", SESSION, "-p", "acme", "--config", "zhin.yaml", "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    assert '"acme' in result.stdout


CASE = """\
version: 1
cases:
  - id: acme.hello
    providers: [acme]
    timeline:
      - user: {from: "10002", text: hi}
      - assistant: {text: hello}
    assertions:
      - {type: verdict, accepted: true}
"""


def test_eval_runs_a_case_under_the_plugin_provider(project: Path, zhin) -> None:  # type: ignore[no-untyped-def]
    (project / "cases").mkdir()
    (project / "cases" / "acme.yaml").write_text(CASE, encoding="utf-8")
    result = zhin("eval", "cases", "-p", "acme", "--config", "zhin.yaml", "--json", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    results = json.loads(result.stdout)
    assert '"acme"' in json.dumps(results) and results["summary"]["failed"] == 0


def test_serve_answers_as_the_plugin_provider(project: Path) -> None:
    env = {**clean_env(), "ZHIN_CONFIG": str(project / "zhin.yaml")}  # a given config, by its environment variable
    server = ServeProcess("-p", "acme", env=env)
    try:
        assert "provider acme" in server.ready_line
        body = {"model": "acme-1", "messages": [{"role": "system", "content": "rules " * 400},
                                                 {"role": "user", "content": "hi"}]}
        first = httpx2.post(f"{server.base_url}/chat/completions", json=body, timeout=30)
        again = httpx2.post(f"{server.base_url}/chat/completions", json=body, timeout=30)
        assert first.status_code == again.status_code == 200, first.text
        cached = again.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached > 0 and cached % 64 == 0  # acme's cache: 256-token minimum, 64-token steps
    finally:
        assert server.stop() == 0
    assert "Traceback" not in server.stderr


def test_view_serves_the_page_of_the_plugin_provider(project: Path) -> None:
    process = subprocess.Popen([sys.executable, "-m", "zhin_cli", "view", str(SESSION), "--no-economy", "-p", "acme",
                                "--config", "zhin.yaml"], cwd=project, env=clean_env(), stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        url = None
        for line in process.stderr:  # notes and the header line, then the URL
            found = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
            if found is not None:
                url = found.group(1)
                break
        assert url is not None
        assert "acme-1" in httpx2.get(url, timeout=60).text
    finally:
        process.terminate()
        try:
            process.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # never leave the server behind, even when the test fails
            process.kill()
            process.communicate()
            raise
    assert process.returncode == 0


def test_report_economy_simulates_the_plugin_provider(project: Path, zhin) -> None:  # type: ignore[no-untyped-def]
    result = zhin("report", "economy", SESSION, "-p", "acme", "--config", "zhin.yaml", "--json", "-j", "1", cwd=project)
    assert result.returncode == 0, result.stderr
    cache = json.loads(result.stdout)["sessions"][0]["cache"]
    assert list(cache) == ["acme"] and cache["acme"]["model"] == "acme-1"
    assert cache["acme"]["lifetime_seconds"] == 900  # acme's cache rules
    assert cache["acme"]["cost"]["price"]["input"] == ACME_INPUT


def test_providers_lists_the_plugin_provider_of_a_given_config(project: Path, zhin) -> None:  # type: ignore[no-untyped-def]
    listed = zhin("providers", "--json", "--config", "zhin.yaml", cwd=project)
    assert listed.returncode == 0, listed.stderr
    acme = [p for p in json.loads(listed.stdout)["providers"] if p["name"] == "acme"]
    assert [(p["display"], p["wire"], p["owner"]) for p in acme] == [("Acme", "openai-chat", "acme_provider.py")]
    table = zhin("providers", "--config", "zhin.yaml", cwd=project)
    assert table.returncode == 0 and "acme" in table.stdout
    # negative control: without --config the found zhin.yaml's plugins do not run, acme is not listed
    plain = zhin("providers", "--json", cwd=project)
    assert plain.returncode == 0 and "acme" not in [p["name"] for p in json.loads(plain.stdout)["providers"]]


def _tab(words: str, cwd: Path, env: dict[str, str]) -> list[str]:
    environment = {**env, "_ZHIN_COMPLETE": "complete_bash", "COMP_WORDS": words,
                   "COMP_CWORD": str(len(words.split()) - 1)}
    proc = subprocess.run([sys.executable, "-m", "zhin_cli"], cwd=cwd, env=environment, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout.split()


def test_completion_offers_the_plugin_provider_of_a_given_config(project: Path) -> None:
    given = {**clean_env(), "ZHIN_CONFIG": str(project / "zhin.yaml")}
    assert "acme" in _tab("zhin trace x --provider a", project, given)
    assert "acme" in _tab("zhin trace x --config zhin.yaml --provider a", project, clean_env())
    # negative control: the same zhin.yaml only found upward runs no plugin on a TAB
    offered = _tab("zhin trace x --provider a", project, clean_env())
    assert "anthropic" in offered and "acme" not in offered


# --- negative controls ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ("trace", SESSION, "--json"),
    ("prefix-diff", SESSION, "--json"),
    ("report", "html", SESSION, "-o", "page.html"),
    ("report", "window", SESSION, "--json"),
    ("eval", "cases"),
])
def test_without_the_plugin_acme_is_an_unknown_provider(tmp_path: Path, zhin, argv: tuple[object, ...]) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "zhin.yaml").write_text("plugins: []\n", encoding="utf-8")
    result = zhin(*argv, "-p", "acme", "--config", "zhin.yaml", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("zhin: error: --provider: unknown provider 'acme' (known: ")
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize(("argv", "status"), [
    (("trace", SESSION, "--json"), 3),
    (("prefix-diff", SESSION, "--json"), 2),  # prefix-diff's trouble is 2, like diff's (docs/safety.md)
    (("report", "html", SESSION, "-o", "page.html"), 3),
])
def test_a_found_untrusted_config_registers_nothing(project: Path, zhin, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                                    argv: tuple[object, ...], status: int) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(project / "user-config"))  # an empty trust store
    module = f"zhin_plugin_acme_provider_{hashlib.sha1(str((project / 'acme_provider.py').resolve()).encode()).hexdigest()[:10]}"
    result = zhin(*argv, "-p", "acme", cwd=project)  # zhin.yaml found upward, not trusted
    assert result.returncode == status, result.stderr
    assert result.stderr.startswith("zhin: error: ") and "not running the plugins" in result.stderr
    assert "acme" not in PROVIDERS
    assert module not in sys.modules  # the plugin file was never imported
