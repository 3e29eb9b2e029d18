"""Docs stay in step with the code: docs/cli.md is regenerated from --help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_cli_reference_matches_help_output() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_cli_docs.py"), "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_readme_has_the_two_setup_commands_and_ci_runs_the_test_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make demo" in readme and "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
