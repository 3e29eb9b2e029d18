"""The ordered process pool (zhin_cli/core/parallel.py, issue 16 item 10): input order out, the CLI's errors,
signals left to the parent, and no plugin code a sequential run would not have run.

Work functions are module-level (a pool pickles them by reference). Times are only used to make workers finish
out of order; nothing here measures speed (that is benchmarks/parallel.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import pytest
from conftest import default_sigint, stop_process

from zhin_cli.core.errors import EXIT_USAGE, ConfigError, InputError, UsageError, ZhinError
from zhin_cli.core.parallel import (
    JOBS_HELP,
    MAX_JOBS,
    _context,
    _worker_started,
    check_jobs,
    default_jobs,
    ordered_map,
)
from zhin_cli.core.trust import UntrustedPlugins

ITEMS = list(range(6))


def slow_first(item: int) -> tuple[int, int]:
    """The earlier the item, the later it finishes: a pool's completion order is the reverse of the input."""
    time.sleep(0.05 * (len(ITEMS) - item))
    return item, os.getpid()


def fail_at(item: int) -> int:
    if item == 1:
        time.sleep(0.3)  # fails last in time, first in input order
        raise InputError("bad row in session one", where="one.jsonl:7")
    if item == 4:
        raise ConfigError("broken config of session four", where="zhin.yaml:3")
    return item


class OddError(ZhinError):
    """A subclass whose constructor does not take (message, where): it must still come back whole."""

    exit_code = EXIT_USAGE

    def __init__(self, count: int) -> None:
        super().__init__(f"{count} odd things", where="x.yaml:1")
        self.count = count


def raise_odd(item: int) -> int:
    raise OddError(item)


def double(item: int) -> int:
    return 2 * item


def die(item: int) -> int:
    if item == 2:
        os._exit(9)  # what the OOM killer leaves behind: no exception, no result
    return item


def handlers(item: int) -> tuple[object, object]:
    return signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)


def test_results_come_in_input_order_whatever_order_workers_finish() -> None:
    sequential = list(ordered_map(slow_first, ITEMS, jobs=1))
    pooled = list(ordered_map(slow_first, ITEMS, jobs=3))
    assert [item for item, _ in pooled] == [item for item, _ in sequential] == ITEMS
    assert {pid for _, pid in sequential} == {os.getpid()}  # -j 1: in this process, no pool
    assert os.getpid() not in {pid for _, pid in pooled} and len({pid for _, pid in pooled}) > 1


def test_negative_control_completion_order_is_shuffled_and_the_check_catches_it() -> None:
    # what a pool gives without ordered_map's reordering: the same results, in another order
    with ProcessPoolExecutor(max_workers=3, mp_context=_context()) as pool:
        completed = [f.result()[0] for f in as_completed([pool.submit(slow_first, i) for i in ITEMS])]
    assert sorted(completed) == ITEMS and completed != ITEMS


def test_done_is_called_in_order_for_the_progress_bar() -> None:
    calls: list[tuple[int, int]] = []
    list(ordered_map(slow_first, ITEMS, jobs=3, done=lambda n, total: calls.append((n, total))))
    assert calls == [(n, len(ITEMS)) for n in range(1, len(ITEMS) + 1)]


@pytest.mark.parametrize("jobs", [1, 3])
def test_the_first_error_in_input_order_is_raised_as_itself(jobs: int) -> None:
    with pytest.raises(InputError) as caught:
        list(ordered_map(fail_at, ITEMS, jobs=jobs))
    assert str(caught.value) == "one.jsonl:7: bad row in session one"
    assert caught.value.message == "bad row in session one" and caught.value.where == "one.jsonl:7"


def test_a_subclass_with_its_own_constructor_comes_back_whole() -> None:
    with pytest.raises(OddError) as caught:
        list(ordered_map(raise_odd, [3, 4], jobs=2))
    assert str(caught.value) == "x.yaml:1: 3 odd things" and caught.value.count == 3
    assert caught.value.exit_code == EXIT_USAGE


def test_a_dead_worker_is_one_error_line_not_a_hang() -> None:
    with pytest.raises(ZhinError, match="a worker process died"):
        list(ordered_map(die, ITEMS, jobs=2))
    assert list(ordered_map(die, [0, 1, 3], jobs=2)) == [0, 1, 3]  # negative control: nobody dies


def test_workers_leave_signals_to_the_parent() -> None:
    # this process handles both signals, as zhin does — whatever it inherited (`make test &` ignores SIGINT): a
    # worker that kept the parent's SIGINT would then differ from one that ignores it
    saved = signal.signal(signal.SIGINT, signal.default_int_handler), signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        pooled = list(ordered_map(handlers, [0, 1], jobs=2))
        sequential = list(ordered_map(handlers, [0], jobs=1))
    finally:
        signal.signal(signal.SIGINT, saved[0])
        signal.signal(signal.SIGTERM, saved[1])
    assert pooled == [(signal.SIG_IGN, signal.SIG_DFL)] * 2
    assert sequential == [(signal.default_int_handler,) * 2]  # negative control: the parent keeps its own
    assert _worker_started is not None


def test_jobs_default_to_the_cores_and_below_one_is_usage() -> None:
    assert check_jobs(None) == default_jobs() >= 1
    assert check_jobs(3) == 3
    with pytest.raises(UsageError, match="at least 1"):
        check_jobs(0)


def test_jobs_above_the_documented_maximum_is_usage_and_the_maximum_itself_is_taken() -> None:
    """Issue 27 item 11: ``-j 100000`` on 12 sessions started 266 processes."""
    assert MAX_JOBS == 64 and f"at most {MAX_JOBS}" in JOBS_HELP  # the number --help documents
    assert check_jobs(MAX_JOBS) == MAX_JOBS  # negative control: the maximum itself is allowed
    for jobs in (MAX_JOBS + 1, 100_000):
        with pytest.raises(UsageError, match=rf"^-j/--jobs is at most {MAX_JOBS} \(got {jobs}\)$"):
            check_jobs(jobs)


def test_the_default_is_the_cores_but_never_past_the_maximum(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("zhin_cli.core.parallel.default_jobs", lambda: 1000)
    assert check_jobs(None) == MAX_JOBS
    monkeypatch.setattr("zhin_cli.core.parallel.default_jobs", lambda: 5)
    assert check_jobs(None) == 5  # negative control: fewer cores than the maximum are all used


def test_the_pool_never_starts_more_workers_than_items(monkeypatch: pytest.MonkeyPatch) -> None:
    import concurrent.futures

    sizes: list[int] = []

    def recording(max_workers: int, **kwargs: Any) -> ProcessPoolExecutor:
        sizes.append(max_workers)
        return ProcessPoolExecutor(max_workers, **kwargs)

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", recording)
    assert list(ordered_map(double, [1, 2, 3], jobs=MAX_JOBS)) == [2, 4, 6]
    assert list(ordered_map(double, [1, 2, 3], jobs=2)) == [2, 4, 6]
    assert sizes == [3, 2]  # three items: three workers, not 64; and -j 2 is two (the control)


NAP = """
import time
def nap(item):
    time.sleep(60)
    return item
"""
INTERRUPTED = """
import sys
from zhin_cli.signals import install_signal_handlers
from zhin_cli.core.parallel import ordered_map
from nap import nap
install_signal_handlers()
try:
    print("started", flush=True)
    list(ordered_map(nap, list(range(4)), jobs=2))
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_workers_and_the_command(tmp_path: Path, signum: int) -> None:
    (tmp_path / "nap.py").write_text(NAP, encoding="utf-8")  # a module: the workers find nap() by its name
    process = subprocess.Popen([sys.executable, "-c", INTERRUPTED], cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                   [str(tmp_path), str(Path(__file__).resolve().parent.parent)])}, preexec_fn=default_sigint)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "started"
        time.sleep(1.0)  # the workers are sleeping in nap()
        started = time.monotonic()
    finally:
        out, err = stop_process(process, signum, timeout=30)  # killed if the signal did not end it
    assert time.monotonic() - started < 20  # not the 60 s the workers would have slept
    assert process.returncode == 130 and "interrupted" in out
    assert "Traceback" not in err and "KeyboardInterrupt" not in err  # no worker printed one either


# --- trust: a worker runs no plugin the sequential run would not ------------------------------------------------

PLUGIN = """
from pathlib import Path
Path(__file__).with_name("plugin-ran").write_text("yes")
def register(generation):
    pass
"""


def registry_of(config_dir: str) -> int:
    from zhin_cli.pipeline.config import load_config

    config = load_config(cwd=Path(config_dir))  # found upward: its plugins run only if trusted
    registry, generations = config.registry()
    for generation in generations:
        generation.release()
    return len(registry)


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_worker_refuses_an_untrusted_found_plugin_like_the_sequential_run(tmp_path: Path, jobs: int,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config-home"))  # an empty trust store
    monkeypatch.delenv("ZHIN_ALLOW_PLUGINS", raising=False)
    monkeypatch.delenv("ZHIN_ALLOW_REF_PLUGINS", raising=False)
    project = tmp_path / "project"
    project.mkdir()
    (project / "zhin.yaml").write_text("plugins:\n  - plugin.py\n", encoding="utf-8")
    (project / "plugin.py").write_text(PLUGIN, encoding="utf-8")
    with pytest.raises(UntrustedPlugins) as caught:
        list(ordered_map(registry_of, [str(project), str(project)], jobs=jobs))
    assert "zhin trust" in str(caught.value) or "trust" in str(caught.value)
    assert not (project / "plugin-ran").exists()


def test_negative_control_a_named_config_runs_its_plugin_in_the_worker(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "zhin.yaml").write_text("plugins:\n  - plugin.py\n", encoding="utf-8")
    (project / "plugin.py").write_text(PLUGIN, encoding="utf-8")
    assert list(ordered_map(named_registry, [str(project / "zhin.yaml")] * 2, jobs=2))
    assert (project / "plugin-ran").exists()


def named_registry(path: str) -> int:
    from zhin_cli.pipeline.config import load_config

    registry, generations = load_config(Path(path)).registry()  # named by the user: its plugins may run
    for generation in generations:
        generation.release()
    return len(registry)


def test_errors_keep_their_exit_code() -> None:
    with pytest.raises(ConfigError) as caught:
        list(ordered_map(fail_at, [4, 5], jobs=2))
    assert caught.value.exit_code == ConfigError.exit_code and "zhin.yaml:3" in str(caught.value)


WARMED: list[str] = []


def warm() -> None:
    WARMED.append("loaded here")


def warmed(item: int) -> list[str]:
    return list(WARMED)


def test_prepare_runs_once_here_and_the_workers_share_what_it_loaded() -> None:
    WARMED.clear()
    try:
        assert list(ordered_map(warmed, [0, 1, 2], jobs=2, prepare=warm)) == [["loaded here"]] * 3
        assert WARMED == ["loaded here"]  # once, in this process, before the workers were forked
    finally:
        WARMED.clear()
    assert list(ordered_map(warmed, [0, 1], jobs=2)) == [[], []]  # negative control: nothing prepared


def allowed_here(item: int) -> tuple[bool, bool]:
    from zhin_cli.core.trust import plugins_allowed, ref_plugins_allowed

    return plugins_allowed(), ref_plugins_allowed()


def test_the_commands_allow_flags_reach_spawned_workers_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A spawned worker shares no memory with the parent: ``--allow-plugins`` travels explicitly (and nothing
    else: the environment is the parent's, the trust store is read again)."""
    import multiprocessing

    from zhin_cli.core import parallel
    from zhin_cli.core.trust import set_allowed

    monkeypatch.delenv("ZHIN_ALLOW_PLUGINS", raising=False)
    monkeypatch.delenv("ZHIN_ALLOW_REF_PLUGINS", raising=False)
    monkeypatch.setattr(parallel, "_context", lambda: multiprocessing.get_context("spawn"))
    try:
        set_allowed(plugins=True)
        assert list(ordered_map(allowed_here, [0, 1], jobs=2)) == [(True, False)] * 2
        set_allowed()
        assert list(ordered_map(allowed_here, [0, 1], jobs=2)) == [(False, False)] * 2  # negative control
    finally:
        set_allowed()
