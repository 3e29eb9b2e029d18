"""One run context per command (issue 32 Build 5): ``report html --window`` reads its config, its prices and each
session once — the page and the window sweep share them — instead of ``run_window`` reading them all again.

Counted by wrapping the three loaders; the negative control runs the same command with the sweep handed no
context (what ``build_report`` did before), and the counts double.
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
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

        monkeypatch.setattr(module, name, counted)
        if name == "load_config":  # the context module holds its own reference
            monkeypatch.setattr(zhin_cli.pipeline.context, name, counted)
    return counts


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
