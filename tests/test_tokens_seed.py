"""``tokens.seed_cache`` on a fresh machine (issue 14 §2): many threads and processes seeding the same empty cache
at once all succeed, the files are complete, and no temporary file is left."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import clean_env

from zhin_cli.core import tokens
from zhin_cli.core.tokens import RANK_FILES, seed_cache


def assert_seeded(folder: Path) -> None:
    files = sorted(folder.iterdir())
    assert len(files) == len(RANK_FILES), [p.name for p in files]  # no temporary file left
    assert sorted(hashlib.sha256(p.read_bytes()).hexdigest() for p in files) == sorted(RANK_FILES.values())


def test_sixteen_threads_seeding_an_empty_cache_at_once(tmp_path: Path) -> None:
    for round_ in range(3):
        folder = tmp_path / f"cache{round_}"
        barrier = threading.Barrier(16)
        errors: list[BaseException] = []

        def seed(target: Path = folder, start: threading.Barrier = barrier, failed: list[BaseException] = errors) -> None:
            try:
                start.wait()
                seed_cache(target)
            except BaseException as error:  # noqa: BLE001 — surfaced below
                failed.append(error)

        threads = [threading.Thread(target=seed) for _ in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not errors, errors[:3]
        assert_seeded(folder)


def test_processes_seeding_an_empty_cache_at_once(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    code = "import sys; from pathlib import Path; from zhin_cli.core.tokens import seed_cache; seed_cache(Path(sys.argv[1]))"
    runs = [subprocess.Popen([sys.executable, "-c", code, str(folder)], env=clean_env(), stderr=subprocess.PIPE, text=True)
            for _ in range(4)]
    results = [(run.wait(120), run.stderr.read() if run.stderr else "") for run in runs]
    assert all(code == 0 for code, _ in results), results
    assert_seeded(folder)


def test_a_corrupt_cache_file_is_replaced(tmp_path: Path) -> None:  # the control: seeding does check the content
    seed_cache(tmp_path)
    victim = next(tmp_path.iterdir())
    victim.write_bytes(b"corrupt")
    seed_cache(tmp_path)
    assert_seeded(tmp_path)


def test_the_first_encodings_load_once_under_concurrency(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")  # restored after the test (the loader points it at the cache)
    monkeypatch.setenv("ZHIN_TIKTOKEN_CACHE", str(tmp_path / "fresh"))
    monkeypatch.setattr(tokens, "_ENCODINGS", {})
    barrier = threading.Barrier(16)
    found: list[object] = []
    errors: list[BaseException] = []

    def load() -> None:
        try:
            barrier.wait()
            found.append(tokens._encoding("cl100k_base"))
        except BaseException as error:  # noqa: BLE001 — surfaced below
            errors.append(error)

    threads = [threading.Thread(target=load) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors and len(found) == 16 and len({id(e) for e in found}) == 1
    assert_seeded(tmp_path / "fresh")
