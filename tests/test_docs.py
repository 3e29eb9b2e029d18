"""Docs stay in step with the code: docs/cli.md is regenerated from --help."""

from __future__ import annotations

import re
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


def test_every_command_is_in_the_reference() -> None:
    import importlib.util

    import typer

    from zhin_cli._cli import app

    def walk(command: object, prefix: str) -> list[str]:
        children = getattr(command, "commands", None)
        if not children:
            return [prefix]
        return [name for key, child in children.items() for name in walk(child, f"{prefix} {key}".strip())]

    spec = importlib.util.spec_from_file_location("gen_cli_docs", ROOT / "scripts" / "gen_cli_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    registered = set(walk(typer.main.get_command(app), ""))
    assert registered - set(module.COMMANDS) == set()


def _python_blocks(markdown: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown, flags=re.S)


def test_readme_library_example_runs_as_pasted() -> None:
    """docs/architecture.md's "As a library" block (README's until issue 31) runs from the repository root in a fresh interpreter and prints the figures
    the CLI reports for the same request (trace --json of the same turn: prompt tokens, window messages)."""
    import json

    blocks = _python_blocks((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert blocks, "docs/architecture.md has no python block"
    run = subprocess.run([sys.executable, "-c", blocks[0]], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    traced = subprocess.run(
        [sys.executable, "-m", "zhin_cli", "trace", "fixtures/group-busy.jsonl", "--provider", "anthropic",
         "--preset", "fixtures/presets/st-default.json", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert traced.returncode == 0, traced.stderr
    request = json.loads(traced.stdout)["requests"][0]
    assert run.stdout.split() == [str(request["prompt_tokens"]), str(request["window"]["messages"])]


def test_python_block_finder_sees_blocks() -> None:
    """Negative control for the example test: the finder is not vacuous."""
    assert _python_blocks("x\n```python\nprint(1)\n```\n") == ["print(1)\n"]
    assert _python_blocks("```bash\nls\n```") == []
