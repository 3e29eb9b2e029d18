"""``python -m zhin_cli`` in an untrusted folder imports nothing from that folder (issue 14 §5)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _run(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "zhin_cli", "--version"], cwd=folder, capture_output=True, text=True, timeout=60)


def test_a_module_file_in_the_current_folder_is_not_imported(tmp_path: Path) -> None:
    # typer.py: a module even `--version` imports (the commands, and yaml with them, load only when they run)
    for name in ("yaml", "typer"):
        (tmp_path / f"{name}.py").write_text(f'raise SystemExit("planted {name}.py ran")\n')
    result = _run(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "planted" not in result.stdout + result.stderr
    assert result.stdout.startswith("zhin ")


def test_negative_control_the_same_file_on_the_path_does_run(tmp_path: Path) -> None:
    # The planted file is a real hazard: put on sys.path explicitly, Python imports it.
    (tmp_path / "yaml.py").write_text('raise SystemExit("planted yaml.py ran")\n')
    result = subprocess.run([sys.executable, "-c", "import yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert "planted yaml.py ran" in result.stderr
