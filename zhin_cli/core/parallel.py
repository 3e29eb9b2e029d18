"""Many sessions on all cores (issue 16 item 10): one ordered process pool for ``prefix-diff``, ``report economy``,
``stats cache`` and ``eval``.

Why processes: replaying a session is pure Python (rendering, tokenizing, diffing), so threads share one core
under the GIL; separate processes use them all. Why this module: four tools need the same four guarantees, and
each is easy to get subtly wrong once per tool:

* **Deterministic output.** Results come back in the order of the input, whatever order the workers finish in,
  so ``-j 8`` prints the same bytes as ``-j 1`` (tests/test_parallel.py checks both, and that a shuffled order is
  caught). ``-j 1`` — and a single item — runs in this process, with no pool at all.
* **Errors are the CLI's errors.** A ``ZhinError`` raised in a worker is raised again here as the same class with
  the same one line (and exit code), so ``zhin: error: …`` reads the same as with ``-j 1``; with several failing
  items, the first *in input order* is the one reported, as sequentially. A worker that dies (killed, out of
  memory) is one ``ZhinError`` line too, never a hang or a traceback.
* **Signals stay the parent's.** Workers ignore SIGINT and take SIGTERM's default, so Ctrl-C or a SIGTERM reaches
  the command's own handlers (exit 130 / 143, cleanup runs) and the workers are stopped, not left running.
* **No new way to run plugin code.** A worker receives only data — session references, option values, a loaded
  ``Config`` carrying its ``PluginSource`` — and builds its pipeline with the same calls as the sequential path
  (``Config.registry()``, which asks ``core.trust.authorize`` before any plugin is imported). The work function
  must be a module-level function of zhin (it is pickled by reference); nothing is imported from a path given at
  run time. A plugin a worker may load is exactly one the sequential run would have loaded.

Workers are forked where the platform allows it (the parent's imported modules are shared copy-on-write: no second
second-long start-up per worker), else spawned.
"""

from __future__ import annotations

import dataclasses
import os
import signal
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from zhin_cli.core.errors import UsageError, ZhinError
from zhin_cli.core.notes import note

if TYPE_CHECKING:  # the pool machinery is imported when a pool is made, not by every command that offers -j
    from concurrent.futures import Future, ProcessPoolExecutor
    from multiprocessing.context import BaseContext

T = TypeVar("T")
R = TypeVar("R")

# More workers than this only add start-up time and memory: the work is CPU-bound (or, for eval's live cases,
# bound by the server's concurrency), and -j 100000 once started 266 processes on 12 sessions (issue 27).
MAX_JOBS = 64
JOBS_HELP = (f"Sessions processed at once, in worker processes (default: the number of cores; 1: in this process; "
             f"at most {MAX_JOBS}).")


def default_jobs() -> int:
    """The cores this process may run on (its CPU affinity where the OS says, else the CPU count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def check_jobs(jobs: int | None) -> int:
    """``-j`` as given (``None``: :func:`default_jobs`, at most :data:`MAX_JOBS`); below 1 or above ``MAX_JOBS``
    is a usage error (exit 2). The pool never starts more workers than it has items either (:func:`ordered_map`)."""
    if jobs is None:
        return min(default_jobs(), MAX_JOBS)
    if jobs < 1:
        raise UsageError(f"-j/--jobs must be at least 1 (got {jobs})")
    if jobs > MAX_JOBS:
        raise UsageError(f"-j/--jobs is at most {MAX_JOBS} (got {jobs})")
    return jobs


@dataclass(frozen=True)
class _Failure:
    """A ``ZhinError`` from a worker, as data: its class, its one line and its attributes."""

    kind: type[ZhinError]
    line: str
    state: dict[str, object] = field(default_factory=dict)

    @classmethod
    def of(cls, error: ZhinError) -> _Failure:
        return cls(type(error), str(error), dict(vars(error)))

    def error(self) -> ZhinError:
        """The same class, the same ``str`` (the CLI's one line) and the same attributes (``message``, ``where``,
        an ``exit_code`` set on the instance), whatever the subclass's ``__init__`` takes."""
        error = self.kind.__new__(self.kind)
        Exception.__init__(error, self.line)
        vars(error).update(self.state)
        return error


@dataclass(frozen=True)
class _Outcome(Generic[R]):
    value: R | None = None
    failure: _Failure | None = None
    notes: tuple[str, ...] = ()  # ZhinNotes the work raised: said again in the parent, so once per command


def _run(work: Callable[[T], R], item: T) -> _Outcome[R]:
    """In the worker: ``work(item)``, a ``ZhinError`` returned as data (exceptions of other kinds are bugs and
    travel as themselves); its notes travel with the outcome (each worker would otherwise print its own copy)."""
    import warnings

    from zhin_cli.core.notes import ZhinNote

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ZhinNote)
        outcome = _run_work(work, item)
    for warning in caught:
        if not issubclass(warning.category, ZhinNote):  # any other warning: shown here, as before
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
    notes = tuple(dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, ZhinNote)))
    return dataclasses.replace(outcome, notes=notes) if notes else outcome


def _run_work(work: Callable[[T], R], item: T) -> _Outcome[R]:
    try:
        return _Outcome(value=work(item))
    except ZhinError as error:
        failure = _Failure.of(error)
        try:  # attributes that cannot be pickled are left behind; the one line always travels
            import pickle

            pickle.dumps(failure)
        except Exception:  # noqa: BLE001 - any pickling problem
            failure = _Failure(type(error), str(error), {"message": getattr(error, "message", str(error)),
                                                         "where": getattr(error, "where", None)})
        return _Outcome(failure=failure)


def _worker_started(plugins: bool = False, ref_plugins: bool = False) -> None:
    """Signals are the parent's business: it reports them and stops the workers. The command's plugin decisions
    (``--allow-plugins``, ``--allow-ref-plugins``) are the worker's, whatever the start method — no more: the
    worker asks ``core.trust`` like the parent would."""
    from zhin_cli.core.trust import set_allowed

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    set_allowed(plugins=plugins, ref_plugins=ref_plugins)


def _context() -> BaseContext:
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def ordered_map(work: Callable[[T], R], items: Sequence[T], *, jobs: int,
                done: Callable[[int, int], None] | None = None, prepare: Callable[[], object] | None = None) -> Iterator[R]:
    """``work(item)`` for every item, yielded in the order of ``items``; ``jobs`` processes at once (1: here).

    ``work`` must be a module-level function and the items picklable. ``done(n, total)`` is called here after
    the n-th result (in order), for a progress bar. ``prepare`` runs here once before the workers are forked,
    so what it loads is shared by all of them instead of loaded by each (a tokenizer: about a second each)."""
    total = len(items)
    if jobs <= 1 or total <= 1:
        for index, item in enumerate(items, start=1):
            result = work(item)
            if done is not None:
                done(index, total)
            yield result
        return
    from concurrent.futures import ProcessPoolExecutor

    from zhin_cli.core.trust import plugins_allowed, ref_plugins_allowed

    if prepare is not None:
        prepare()
    pool = ProcessPoolExecutor(max_workers=min(jobs, total), mp_context=_context(), initializer=_worker_started,
                               initargs=(plugins_allowed(), ref_plugins_allowed()))
    futures: list[Future[_Outcome[R]]] = []
    try:
        futures = [pool.submit(_run, work, item) for item in items]
        for index, future in enumerate(futures, start=1):
            outcome = _wait(future)
            for said in outcome.notes:
                note(said)  # the parent's registry says each distinct note once
            if outcome.failure is not None:
                raise outcome.failure.error()
            if done is not None:
                done(index, total)
            yield outcome.value  # type: ignore[misc]  # a value is set whenever failure is None
    finally:
        _stop(pool, futures)


def _wait(future: Future[_Outcome[R]]) -> _Outcome[R]:
    """The future's outcome. Waits in short slices: a signal may be delivered to one of the pool's threads, and a
    main thread blocked without a timeout would never run the handler (Ctrl-C would hang until the work ends)."""
    from concurrent.futures.process import BrokenProcessPool

    while True:
        try:
            return future.result(timeout=_POLL_SECONDS)
        except TimeoutError:
            continue
        except BrokenProcessPool:
            raise ZhinError("a worker process died (killed, or out of memory?); try fewer jobs (-j)") from None


_POLL_SECONDS = 0.2


def _stop(pool: ProcessPoolExecutor, futures: Sequence[Future[_Outcome[R]]]) -> None:
    """Shut the pool down; after an error, an interrupt or an early stop, without waiting for the work in flight."""
    # No future is cancelled here, neither by hand nor by shutdown(cancel_futures=True): once its workers are gone
    # the pool's manager thread marks every pending future broken, and on Python 3.11 doing that to a cancelled one
    # raises InvalidStateError in that thread, which prints a traceback after Ctrl-C (the fresh-clone CI run caught
    # it under load). Nothing reads those futures; terminating the workers is what stops the work.
    unfinished = any(not f.done() for f in futures)
    if unfinished:
        terminate = getattr(pool, "terminate_workers", None)  # Python 3.14+
        if terminate is not None:
            terminate()
        else:  # earlier versions have no public call that stops a running worker
            for process in list(getattr(pool, "_processes", {}).values()):
                process.terminate()
    pool.shutdown(wait=True)
