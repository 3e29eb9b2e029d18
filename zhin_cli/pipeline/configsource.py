"""A config named on the command line: a ``zhin.yaml`` file, or the config of a git ref.

``load_config_source("zhin.yaml", cwd=...)`` loads that file. ``load_config_source("main", cwd=...)``
resolves ``main`` in the git repository containing ``cwd``, extracts that commit's tree into a temporary
directory (``git archive``), finds ``zhin.yaml`` there exactly as ``find_config`` would from ``cwd`` (same
path relative to the repository top level, upward but never above the tree's root) and loads it, so
``file.py:func`` plugins resolve inside the extracted tree: the ref's config with the ref's plugin code.
``module:func`` plugins are imported from the running environment, not from the ref. A ref's plugins run only
with ``zhin --allow-ref-plugins`` (``zhin_cli.core.trust``), and its plugin files must resolve inside the tree.

The temporary tree must outlive ``Config.registry()`` (plugin files are read then); ``close()`` (or leaving
the ``with`` block) deletes it, and so does an interrupt (SIGINT, or SIGTERM once the CLI turns it into an
exception) at any point: the tree is owned by a finalizer from the moment it exists, and is removed when the
exception leaves (or, at the latest, when the interpreter exits). Anything that is neither a file nor a ref is a
one-line ``UsageError``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO

from zhin_cli.core.errors import ConfigError, UsageError, ZhinError
from zhin_cli.core.trust import PluginSource
from zhin_cli.pipeline.config import CONFIG_NAME, Config, load_config


@dataclass
class ConfigSource:
    """A loaded config and what output should call it (``zhin.yaml``, ``main (3f2a1c9)``)."""

    config: Config
    label: str
    commit: str | None = None  # full hash when the source is a git ref
    tempdir: Path | None = None  # the extracted tree; removed by close()
    _finalizer: weakref.finalize[[str, bool], ConfigSource] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.tempdir is not None:
            self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.tempdir), True)

    def close(self) -> None:
        """Delete the extracted tree, if any. Safe to call more than once."""
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self) -> ConfigSource:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def load_config_source(value: str, *, cwd: Path) -> ConfigSource:
    """``value`` is a config file path (relative to ``cwd``) or a git ref of the repository containing ``cwd``."""
    candidate = cwd / value if value else None
    if candidate is not None and candidate.is_file():
        if _names_a_ref(value, cwd):
            # A file in the checkout never stands in for a ref: a pull request that adds a file named `HEAD` or
            # `main` would otherwise turn `--head HEAD` into "a config you named" and run its plugins without
            # --allow-ref-plugins. Refuse like git does ("ambiguous argument … both revision and filename").
            raise UsageError(f"{value!r} is both a file and a git ref of {cwd}: write ./{value} for the file, or remove "
                             f"or rename the file to use the ref")
        return ConfigSource(config=load_config(candidate), label=value)
    if not value or value.startswith("-") or any(c in value for c in "\0\r\n"):  # never an option to git
        raise UsageError(f"{value!r} is neither a config file nor a git ref of {cwd}")

    repo = _Repo.at(cwd, value)
    commit = repo.resolve(value)
    if commit is None:
        raise UsageError(f"{value!r} is neither a config file nor a git ref of {repo.name}")
    short = repo.short(commit)
    with _signals_deferred():  # the tree never exists without the finalizer that removes it
        source = ConfigSource(config=Config(), label=f"{value} ({short})", commit=commit,
                              tempdir=Path(tempfile.mkdtemp(prefix="zhin-ref-")))
    try:
        tempdir = source.tempdir
        assert tempdir is not None
        repo.extract(commit, tempdir, value)
        path = _find_in_tree(tempdir, repo.prefix)
        if path is None:
            source.label = f"{value} ({short}, no {CONFIG_NAME})"
        else:
            source.config = _load_in_tree(path, tempdir, value)
            source.config.source = PluginSource("ref", path, tempdir, value, f"git ref {value!r} ({short})")
    except BaseException:  # an error, Ctrl-C, SIGTERM (raised by the CLI's handler): no tree is left behind
        source.close()
        raise
    return source


def _names_a_ref(value: str, cwd: Path) -> bool:
    """Whether ``value`` also resolves as a git ref or commit of the repository at ``cwd`` (False outside one, and
    for values written as paths: ``./x``, ``/x``, ``../x`` are never refs)."""
    if value.startswith(("-", ".", "/")) or any(c in value for c in "\0\r\n"):
        return False
    try:
        repo = _Repo.at(cwd, value)
    except UsageError:  # not a repository, or git missing: nothing to confuse the file with
        return False
    return repo.resolve(value) is not None


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """SIGINT/SIGTERM held back (delivered right after) while a temporary tree and its finalizer are created."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


# --- git -----------------------------------------------------------------------------------------------


def _first_line(text: str) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line.removeprefix("fatal: ").removeprefix("error: ")


@dataclass
class _Repo:
    cwd: Path
    name: str  # top level (or git dir of a bare repository): what errors call it
    prefix: str  # cwd relative to the top level, "/"-separated, "" at the top or outside a work tree
    top: Path  # where to run git archive (run in a subdirectory, it would archive only that subdirectory)

    @staticmethod
    def _git(cwd: Path, value: str, *args: str) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                ["git", "-C", str(cwd), *args], capture_output=True, text=True, encoding="utf-8", errors="replace", check=False
            )
        except FileNotFoundError:
            raise UsageError(
                f"{value!r} is not a config file, and git is not installed (needed to read it as a git ref)"
            ) from None
        except OSError as exc:
            raise UsageError(f"{value!r} is not a config file, and git cannot run: {exc}") from None

    @classmethod
    def at(cls, cwd: Path, value: str) -> _Repo:
        git_dir = cls._git(cwd, value, "rev-parse", "--absolute-git-dir")
        if git_dir.returncode != 0:
            why = _first_line(git_dir.stderr) or "not a git repository"
            raise UsageError(f"{value!r} is neither a config file nor a git ref of {cwd} ({why})")
        inside = cls._git(cwd, value, "rev-parse", "--is-inside-work-tree").stdout.strip() == "true"
        if not inside:  # a bare repository, or cwd inside .git: refs still resolve, search from the root
            return cls(cwd=cwd, name=git_dir.stdout.strip(), prefix="", top=cwd)
        top = cls._git(cwd, value, "rev-parse", "--show-toplevel").stdout.strip()
        prefix = cls._git(cwd, value, "rev-parse", "--show-prefix").stdout.strip()
        return cls(cwd=cwd, name=top or str(cwd), prefix=prefix.strip("/"), top=Path(top) if top else cwd)

    def resolve(self, ref: str) -> str | None:
        """The full commit hash ``ref`` names, or None. ``ref`` never starts with ``-`` (checked by the caller)."""
        result = self._git(self.cwd, ref, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        commit = result.stdout.strip()
        if result.returncode != 0 or not commit or not all(c in "0123456789abcdef" for c in commit):
            return None
        return commit

    def short(self, commit: str) -> str:
        result = self._git(self.cwd, commit, "rev-parse", "--short", commit)
        return result.stdout.strip() if result.returncode == 0 and result.stdout.strip() else commit[:7]

    def extract(self, commit: str, dest: Path, value: str) -> None:
        """``git archive <commit>`` streamed into ``dest`` (unsafe members, e.g. links leaving the tree, skipped)."""
        with tempfile.TemporaryFile() as errors:
            try:
                process = subprocess.Popen(
                    ["git", "-C", str(self.top), "archive", "--format=tar", commit], stdout=subprocess.PIPE, stderr=errors
                )
            except OSError as exc:
                raise UsageError(f"{value!r}: git cannot run: {exc}") from None
            assert process.stdout is not None
            try:
                _untar(process.stdout, dest)
                while process.stdout.read(1 << 16):  # the archive's trailing padding
                    pass
            except (tarfile.TarError, OSError) as exc:
                process.kill()
                process.wait()
                raise ZhinError(f"cannot extract {value!r} ({commit[:12]}): {exc}") from None
            except BaseException:  # interrupted: git must not outlive us writing into a pipe nobody reads
                process.kill()
                process.wait()
                raise
            finally:
                process.stdout.close()
            if process.wait() != 0:
                errors.seek(0)
                why = _first_line(errors.read().decode("utf-8", "replace"))
                raise ZhinError(f"cannot extract {value!r} ({commit[:12]}): git archive failed: {why}")


def _untar(stream: IO[bytes], dest: Path) -> None:
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        data_filter = getattr(tarfile, "data_filter", None)
        if data_filter is not None:

            def safe(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
                try:
                    filtered: tarfile.TarInfo | None = data_filter(member, path)
                    return filtered
                except tarfile.FilterError:
                    return None

            tar.extractall(dest, filter=safe)
            return
        for member in tar:  # Python < 3.11.4: plain files and directories with in-tree names only
            parts = Path(member.name).parts
            if (member.isfile() or member.isdir()) and not Path(member.name).is_absolute() and ".." not in parts:
                tar.extract(member, dest)


# --- the extracted tree -----------------------------------------------------------------------------------


def _find_in_tree(root: Path, prefix: str) -> Path | None:
    """``find_config`` from ``root/prefix``, stopping at ``root`` (the folder may not exist in the ref)."""
    parts = [p for p in prefix.split("/") if p]
    for depth in range(len(parts), -1, -1):
        candidate = root.joinpath(*parts[:depth], CONFIG_NAME)
        if candidate.is_file():
            return candidate
    return None


def _load_in_tree(path: Path, root: Path, value: str) -> Config:
    """``load_config``, with errors naming ``<ref>:<path>`` instead of the temporary directory."""
    try:
        return load_config(path)
    except ConfigError as exc:
        where = exc.where
        if where is not None and where.startswith(str(root) + os.sep):
            where = f"{value}:{where[len(str(root)) + 1 :].replace(os.sep, '/')}"
        raise ConfigError(exc.message, where=where) from None
