"""A plugin's data source serves the command line: the config's plugins run before the session is read, when they
may run (a config the user named, or a found one that is trusted) — issue 32, "the other registries can be extended
from outside". Without the plugin the same argument is read as a JSONL file and refused."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

PLUGIN = Path(__file__).resolve().parent / "plugins" / "csv_source.py"
CHAT = "1700000000000,10002,Alice,hello\n1700000005000,bot,bot,hi Alice\n"

Zhin = Callable[..., CompletedProcess[str]]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    shutil.copyfile(PLUGIN, tmp_path / "csv_source.py")
    (tmp_path / "zhin.yaml").write_text("plugins: ['csv_source.py:register']\n", encoding="utf-8")
    (tmp_path / "chat.csv").write_text(CHAT, encoding="utf-8")
    return tmp_path


def _last_user_text(stdout: str) -> str:
    document = json.loads(stdout)
    return json.dumps(document["requests"][-1]["request"]["messages"], ensure_ascii=False)


def test_a_given_configs_source_reads_the_sessions_argument(folder: Path, zhin: Zhin) -> None:
    result = zhin("trace", "chat.csv", "--config", "zhin.yaml", "--json", cwd=folder)
    assert result.returncode == 0, result.stderr
    assert "user_id:10002;name:Alice" in _last_user_text(result.stdout)


def test_a_trusted_found_configs_source_reads_it_too(folder: Path, zhin: Zhin) -> None:
    result = zhin("--allow-plugins", "trace", "chat.csv", "--json", cwd=folder)
    assert result.returncode == 0, result.stderr
    assert "name:Alice" in _last_user_text(result.stdout)


def test_negative_control_an_untrusted_found_config_runs_nothing(folder: Path, zhin: Zhin) -> None:
    (folder / "csv_source.py").write_text(PLUGIN.read_text(encoding="utf-8") + "\nPath('ran').touch()\n",
                                          encoding="utf-8")
    result = zhin("trace", "chat.csv", "--json", cwd=folder)
    assert result.returncode == 3, result.stdout
    assert not (folder / "ran").exists()


def test_negative_control_without_the_plugin_the_csv_is_not_a_session(folder: Path, zhin: Zhin) -> None:
    (folder / "zhin.yaml").write_text("plugins: []\n", encoding="utf-8")
    result = zhin("trace", "chat.csv", "--config", "zhin.yaml", "--json", cwd=folder)
    assert result.returncode == 3
    assert "chat.csv" in result.stderr
