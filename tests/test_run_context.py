"""One run context per command (issue 32 Build 5): ``report html --window`` reads its config, its prices and each
session once — the page and the window sweep share them — instead of ``run_window`` reading them all again.

Counted by wrapping the three loaders; the negative control runs the same command with the sweep handed no
context (what ``build_report`` did before), and the counts double.
"""

from __future__ import annotations

import shutil
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import FIXTURES, ROOT

import zhin_cli.pipeline.config
import zhin_cli.pipeline.context
import zhin_cli.pipeline.prices
import zhin_cli.store
import zhin_cli.tools.report.window
from zhin_cli.pipeline.context import RunContext

SESSIONS = [FIXTURES / "private-chat.jsonl", FIXTURES / "group-busy.jsonl"]


def _counting(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    counts: Counter[str] = Counter()
    for module, name in ((zhin_cli.pipeline.config, "load_config"), (zhin_cli.pipeline.prices, "load_prices"),
                         (zhin_cli.store, "load_session")):
        real = getattr(module, name)

        def counted(*args: Any, _real: Callable[..., Any] = real, _name: str = name, **kwargs: Any) -> Any:
            counts[_name] += 1
            return _real(*args, **kwargs)

        for holder in [module, *_holders(name, real)]:  # every module imported so far that holds its own reference
            monkeypatch.setattr(holder, name, counted)
    return counts


def _holders(name: str, real: object) -> list[ModuleType]:
    return [module for key, module in list(sys.modules.items())
            if key.startswith("zhin_cli") and module is not None and getattr(module, name, None) is real]


def _report(zhin: Callable[..., Any], tmp_path: Path) -> None:
    # -j 1: the pages are made in this process (with workers, each worker reads its own session: another process)
    result = zhin("report", "html", *SESSIONS, "--window", "-j", "1", "-o", "page.html", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "frontier" in (tmp_path / "page.html").read_text(encoding="utf-8").lower()


def test_report_html_window_reads_config_prices_and_sessions_once(tmp_path: Path, zhin, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "zhin.yaml").write_text("window: {max_messages: 40}\n", encoding="utf-8")
    counts = _counting(monkeypatch)
    _report(zhin, tmp_path)
    assert counts == {"load_config": 1, "load_prices": 1, "load_session": len(SESSIONS)}


def test_negative_control_a_sweep_without_the_context_reads_them_again(tmp_path: Path, zhin,  # type: ignore[no-untyped-def]
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "zhin.yaml").write_text("window: {max_messages: 40}\n", encoding="utf-8")
    real = zhin_cli.tools.report.window.run_window

    def without_context(*args: Any, context: RunContext | None = None, **kwargs: Any) -> Any:
        assert context is not None  # build_report hands its context over …
        return real(*args, cwd=context.cwd, **{k: v for k, v in kwargs.items() if k != "cwd"})  # … dropped here

    monkeypatch.setattr(zhin_cli.tools.report.window, "run_window", without_context)
    counts = _counting(monkeypatch)
    _report(zhin, tmp_path)
    assert counts == {"load_config": 2, "load_prices": 2, "load_session": 2 * len(SESSIONS)}


def test_a_context_loads_each_session_once_and_keeps_its_prices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    counts = _counting(monkeypatch)
    context = RunContext.for_config(zhin_cli.pipeline.config.Config(), cwd=tmp_path)
    ref = str(SESSIONS[0])
    assert context.session(ref) is context.session(ref)
    assert context.prices is context.prices
    assert counts == {"load_session": 1, "load_prices": 1}
    other = RunContext.for_config(zhin_cli.pipeline.config.Config(), cwd=tmp_path)  # negative control
    assert other.session(ref) is not context.session(ref)
    assert counts["load_session"] == 2


def test_with_a_plugin_provider_the_command_context_is_the_one_read(tmp_path: Path, zhin,  # type: ignore[no-untyped-def]
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``--provider acme`` loads the config and its plugin before the check (check_options): report html then builds
    its pages and the sweep on that context, not on a second read of the config."""
    shutil.copy(ROOT / "tests" / "plugins" / "acme_provider.py", tmp_path / "acme_provider.py")
    (tmp_path / "zhin.yaml").write_text("plugins: [acme_provider.py]\n", encoding="utf-8")
    counts = _counting(monkeypatch)
    result = zhin("report", "html", *SESSIONS, "--window", "-j", "1", "-p", "acme", "--config", "zhin.yaml",
                  "-o", "page.html", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert counts == {"load_config": 1, "load_prices": 1, "load_session": len(SESSIONS)}


def test_trace_on_a_context_reads_nothing_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from zhin_cli.tools.trace.trace import trace

    ref = str(SESSIONS[0])
    counts = _counting(monkeypatch)
    context = RunContext.for_config(zhin_cli.pipeline.config.Config(), cwd=tmp_path)
    first = trace(ref, context=context)
    again = trace(ref, turn=1, context=context)
    assert counts == {"load_session": 1, "load_prices": 1}
    assert first.requests[0].turn != again.requests[0].turn
    trace(ref, cwd=tmp_path)  # negative control: the bundle reads the prices and the session again
    assert (counts["load_session"], counts["load_prices"]) == (2, 2)


# --- every command that takes --provider: one config, one price table, each session once -----------------------

PRESET = ROOT / "fixtures" / "presets" / "st-default.json"
CASE = ROOT / "eval_cases" / "adr-1-ten-messages.yaml"
SESSION = str(SESSIONS[0])
# command → (argv after the plugin's "-p acme --config zhin.yaml" is added, its _cli module, the reads expected).
# A plugin's provider makes the command open its run context before anything else (check_options): before the
# context was handed down, each tool read the config (and prefix-diff the prices) a second time.
COMMANDS: dict[str, tuple[tuple[object, ...], str, dict[str, int]]] = {
    "trace": (("trace", SESSION, "--json"), "trace", {"load_config": 1, "load_prices": 1, "load_session": 1}),
    "prefix-diff": (("prefix-diff", SESSION, "--json", "-j", "1"), "prefix_diff",
                    {"load_config": 1, "load_prices": 1, "load_session": 1}),
    "report economy": (("report", "economy", SESSION, "--json", "-j", "1"), "report",
                       {"load_config": 1, "load_prices": 1, "load_session": 1}),
    "budget update": (("budget", "update", "-s", SESSION, "--file", "budget.yaml"), "budget",
                      {"load_config": 1, "load_session": 1}),
    "preset probe": (("preset", "probe", PRESET, "-s", SESSION, "--json"), "preset",
                     {"load_config": 1, "load_session": 1}),
    "eval": (("eval", CASE, "--json", "-j", "1"), "eval", {"load_config": 1}),
}


@pytest.fixture
def plugin_project(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "tests" / "plugins" / "acme_provider.py", tmp_path / "acme_provider.py")
    (tmp_path / "zhin.yaml").write_text("plugins: [acme_provider.py]\n", encoding="utf-8")
    return tmp_path


def _run(zhin: Callable[..., Any], project: Path, command: str) -> None:
    argv, _, _ = COMMANDS[command]
    result = zhin(*argv, "-p", "acme", "--config", "zhin.yaml", cwd=project)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_command_reads_its_config_and_prices_once(plugin_project: Path, zhin, command: str,  # type: ignore[no-untyped-def]
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    counts = _counting(monkeypatch)
    _run(zhin, plugin_project, command)
    assert counts == COMMANDS[command][2]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_negative_control_a_tool_handed_no_context_reads_the_config_again(plugin_project: Path, zhin,  # type: ignore[no-untyped-def]
                                                                          command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    _, module, expected = COMMANDS[command]
    cli = importlib.import_module(f"zhin_cli._cli.{module}")
    monkeypatch.setattr(cli, "command_context", lambda **kwargs: None)  # the CLI keeps its context to itself
    counts = _counting(monkeypatch)
    _run(zhin, plugin_project, command)
    assert counts["load_config"] == expected["load_config"] + 1


def test_budget_check_reads_the_config_and_sessions_once_for_every_profile(tmp_path: Path, zhin,  # type: ignore[no-untyped-def]
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    update = zhin("budget", "update", "-s", SESSION, "-p", "openai", "-p", "anthropic", "--file", "budget.yaml", cwd=tmp_path)
    assert update.returncode == 0, update.stderr
    counts = _counting(monkeypatch)
    check = zhin("budget", "check", "--file", "budget.yaml", "--json", cwd=tmp_path)
    assert check.returncode == 0, check.stderr
    assert counts == {"load_config": 1, "load_session": 1}


def test_negative_control_measuring_each_profile_without_a_context_reads_them_again(tmp_path: Path,
                                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from zhin_cli.tools.budget.budget import measure

    counts = _counting(monkeypatch)
    for name in ("openai", "anthropic"):
        measure([SESSION], name, None, budget_dir=tmp_path, cwd=tmp_path)
    assert counts == {"load_config": 2, "load_session": 2}
    context = RunContext.load(None, cwd=tmp_path)
    for name in ("openai", "anthropic"):
        measure([SESSION], name, None, budget_dir=tmp_path, context=context)
    assert counts == {"load_config": 3, "load_session": 3}  # one more of each for both profiles


def _view(zhin: Callable[..., Any], project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import zhin_cli.tools.report.html

    served: list[object] = []
    monkeypatch.setattr(zhin_cli.tools.report.html, "serve_page", lambda page, **kwargs: served.append(page))  # no server
    result = zhin("view", SESSION, "--no-economy", "-p", "acme", "--config", "zhin.yaml", cwd=project)
    assert result.returncode == 0, result.stderr
    assert len(served) == 1


def test_view_reads_its_config_and_prices_once(plugin_project: Path, zhin, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    counts = _counting(monkeypatch)
    _view(zhin, plugin_project, monkeypatch)
    assert counts == {"load_config": 1, "load_prices": 1, "load_session": 1}


def test_negative_control_view_without_the_context_reads_the_config_again(plugin_project: Path, zhin,  # type: ignore[no-untyped-def]
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import zhin_cli._cli.view

    monkeypatch.setattr(zhin_cli._cli.view, "command_context", lambda **kwargs: None)
    counts = _counting(monkeypatch)
    _view(zhin, plugin_project, monkeypatch)
    assert counts["load_config"] == 2


def _counting_plugin_runs(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    counts: Counter[str] = Counter()
    real = zhin_cli.pipeline.config.Config.registry

    def counted(self: zhin_cli.pipeline.config.Config) -> Any:
        counts["plugins_run"] += 1
        return real(self)

    monkeypatch.setattr(zhin_cli.pipeline.config.Config, "registry", counted)
    return counts


def test_prefix_diff_runs_the_plugins_once(plugin_project: Path, zhin, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """The session's pipeline is opened on the command's context (its plugins already ran), not on its config."""
    counts = _counting_plugin_runs(monkeypatch)
    _run(zhin, plugin_project, "prefix-diff")
    assert counts == {"plugins_run": 1}


def test_negative_control_a_session_job_without_the_context_runs_them_again(plugin_project: Path, zhin,  # type: ignore[no-untyped-def]
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import zhin_cli.tools.diff.prefix

    real = zhin_cli.tools.diff.prefix.run_session_job
    monkeypatch.setattr(zhin_cli.tools.diff.prefix, "run_session_job",
                        lambda job, context=None, **kwargs: real(job, **kwargs))  # the context is dropped
    counts = _counting_plugin_runs(monkeypatch)
    _run(zhin, plugin_project, "prefix-diff")
    assert counts == {"plugins_run": 2}
