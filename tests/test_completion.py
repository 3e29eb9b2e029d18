"""Shell completion (issue 17 §4): provider names for --provider, session ids/keys from the discovered database (and
.jsonl files) for SESSION arguments and --session, .json files for --preset, an install hint in
``zhin completion --help`` — answered by the real CLI, as a shell's TAB runs it, without loading the commands'
libraries (no SQLAlchemy, openai or tiktoken: the quick path must stay well under 0.3 s; benchmarks/startup.py
times it)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ROOT, clean_env, run_zhin

FIXTURES = ROOT / "fixtures"
GROUP_KEY = "icqq:8596238:group:1048877509"
HEAVY = ("sqlalchemy", "openai", "tiktoken", "anthropic", "pydantic")


def tab(words: str, cwd: Path, shell: str = "bash", env: dict[str, str] | None = None,
        modules: bool = False) -> tuple[list[str], set[str]]:
    """What ``zhin`` answers to a TAB after ``words`` (the last word incomplete, or "" after a trailing space), in a
    real process, as the script of ``zhin completion SHELL`` asks it; and the modules it had loaded."""
    environment = dict(env) if env is not None else clean_env()
    environment["_ZHIN_COMPLETE"] = f"complete_{shell}"
    if shell == "bash":
        split = words.split()
        environment["COMP_WORDS"] = words
        environment["COMP_CWORD"] = str(len(split) if words.endswith(" ") else len(split) - 1)
    else:
        environment["_TYPER_COMPLETE_ARGS"] = words
    code = ("import atexit, runpy, sys\n"
            "atexit.register(lambda: sys.stderr.write('\\nloaded: ' + ' '.join(sorted(sys.modules)) + '\\n'))\n"
            "sys.argv = ['zhin']\n"
            "runpy.run_module('zhin_cli', run_name='__main__')\n") if modules else None
    arguments = ["-c", code] if code else ["-m", "zhin_cli"]
    proc = subprocess.run([sys.executable, *arguments], cwd=cwd, env=environment, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    loaded = set(proc.stderr.rpartition("\nloaded: ")[2].split()) if modules else set()
    return proc.stdout.splitlines(), loaded


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A folder with the fixtures imported into ./.zhin/data.sqlite, a subfolder to complete from, and files."""
    result = run_zhin("import", FIXTURES / "group-busy.jsonl", FIXTURES / "private-chat.jsonl", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    sub = tmp_path / "work"
    sub.mkdir()
    (sub / "chat.jsonl").write_text("{}\n", encoding="utf-8")
    (sub / "preset.json").write_text("{}\n", encoding="utf-8")
    (sub / "notes.txt").write_text("", encoding="utf-8")
    (sub / "presets").mkdir()
    return sub


def test_provider_names_complete_without_loading_any_heavy_library(tmp_path: Path) -> None:
    answer, loaded = tab("zhin trace --provider open", tmp_path, modules=True)
    assert answer == ["openai", "openai-compatible", "openai-reasoning"]
    assert "zhin_cli._cli" in loaded  # negative control: the module list was read
    assert sorted(m for m in loaded if m.split(".")[0] in HEAVY) == []
    # the provider table is read (specs as data), nothing else of the pipeline: no renderer, preset or assembler
    assert "zhin_cli.pipeline.providers.spec" in loaded  # negative control: the names came from the registry
    table = ("zhin_cli.pipeline.providers.capabilities", "zhin_cli.pipeline.providers.rendered",
             "zhin_cli.pipeline.providers.spec", "zhin_cli.pipeline.providers.specs")
    others = [m for m in loaded if m.startswith(("zhin_cli.pipeline.", "zhin_cli._cli.trace"))
              and m != "zhin_cli.pipeline.providers" and not m.startswith(table)]
    assert others == []


def test_every_provider_completes_and_nothing_else(tmp_path: Path) -> None:
    from zhin_cli.pipeline.providers import PROFILES

    assert tab("zhin prefix-diff -p ", tmp_path)[0] == sorted(PROFILES)
    assert tab("zhin trace --provider nosuch", tmp_path)[0] == []  # negative control: a prefix nothing has


def test_the_provider_list_is_the_registry() -> None:
    """A provider registered at run time completes; removed, it does not (no hand-kept list to forget)."""
    from dataclasses import replace

    from zhin_cli._cli.data import complete_providers
    from zhin_cli.pipeline.providers import provider, register_provider, unregister_provider

    register_provider(replace(provider("openai-compatible"), name="acme-gateway"), owner="test")
    try:
        assert [item.value for item in complete_providers("acme")] == ["acme-gateway"]
    finally:
        unregister_provider("acme-gateway")
    assert complete_providers("acme") == []  # negative control: gone with the spec
    assert [item.value for item in complete_providers("acme", extra=("acme-plugin",))] == ["acme-plugin"]


def test_session_arguments_complete_the_discovered_database_and_jsonl_files(project: Path) -> None:
    answer, loaded = tab("zhin trace icqq:8596238:g", project, modules=True)
    assert answer == [GROUP_KEY, "icqq:8596238:group:1048877509#1761699600000-1"]  # the parent's database, read only
    assert sorted(m for m in loaded if m.split(".")[0] in HEAVY) == []
    assert tab("zhin trace ", project)[0] == [
        GROUP_KEY, "icqq:8596238:group:1048877509#1761699600000-1", "icqq:8596238:private:10002",
        "icqq:8596238:private:10002#1761800000000-1", "chat.jsonl", "presets/"]  # notes.txt, preset.json: not sessions
    assert tab("zhin stats cache ch", project)[0] == ["chat.jsonl"]
    assert tab("zhin budget update --session icqq:8596238:p", project)[0] == [
        "icqq:8596238:private:10002", "icqq:8596238:private:10002#1761800000000-1"]


def test_sessions_come_from_db_when_given(project: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite"
    assert run_zhin("import", FIXTURES / "legacy-upstream.jsonl", "--db", other, cwd=tmp_path).returncode == 0
    answer = tab(f"zhin trace --db {other} icqq", project)[0]
    assert answer == ["icqq:8596238:group:201193925", "icqq:8596238:group:201193925#1700000000000-1"]


def test_no_database_no_session_ids(tmp_path: Path) -> None:
    """Negative control: with no database upward, only the files complete (and nothing fails)."""
    (tmp_path / "a.jsonl").write_text("{}\n", encoding="utf-8")
    assert tab("zhin trace ", tmp_path)[0] == ["a.jsonl"]


def test_preset_completes_json_files_and_folders_only(project: Path) -> None:
    assert tab("zhin trace x.jsonl --preset ", project)[0] == ["preset.json", "presets/"]
    assert tab(f"zhin trace x.jsonl --preset {FIXTURES}/presets/st", project)[0] == [f"{FIXTURES}/presets/st-default.json"]


def test_command_names_complete_quickly_and_option_names_through_typer(tmp_path: Path) -> None:
    answer, loaded = tab("zhin tr", tmp_path, modules=True)
    assert answer == ["trace", "trust"]
    assert not any(m.startswith("zhin_cli._cli.") and m != "zhin_cli._cli.data" for m in loaded)
    # option names: typer's full completion (the command is loaded), still one answer per line
    assert "--provider" in tab("zhin trace --pro", tmp_path)[0]


def test_after_a_flag_typer_completes_with_the_same_completers(project: Path) -> None:
    """After an option the quick path cannot place (a flag or an option's value?), typer answers — the same
    session list, from the same completer."""
    assert tab("zhin trace --all icqq:8596238:p", project)[0] == [
        "icqq:8596238:private:10002", "icqq:8596238:private:10002#1761800000000-1"]
    assert tab("zhin trace --all x.jsonl --provider deep", project)[0] == ["deepseek"]


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_get_their_own_format(project: Path, shell: str) -> None:
    env = clean_env()
    if shell == "fish":
        env["_TYPER_COMPLETE_FISH_ACTION"] = "get-args"
    answer = tab("zhin trace --provider anth", project, shell=shell, env=env)[0]
    assert answer == (["_arguments '*: :((\"anthropic\"))'"] if shell == "zsh" else ["anthropic"])


def test_session_commands_are_the_commands_with_session_arguments() -> None:
    import typer

    from zhin_cli._cli import app
    from zhin_cli._cli.data import SESSION_COMMANDS

    found: set[str] = set()
    paths: set[str] = set()

    def walk(command: object, path: str) -> None:
        paths.add(path)
        for param in getattr(command, "params", []):
            if param.param_type_name == "argument" and (param.metavar or "").removesuffix("...") == "SESSION":
                found.add(path)
        for name, sub in (getattr(command, "commands", None) or {}).items():
            walk(sub, f"{path} {name}".strip())

    walk(typer.main.get_command(app), "")
    assert found == SESSION_COMMANDS & paths


def test_completion_help_shows_how_to_install(zhin: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    helped = zhin("completion", "--help", env={**clean_env(), "COLUMNS": "200"})
    assert helped.returncode == 0
    for line in ("""echo 'eval "$(zhin completion bash)"' >> ~/.bashrc""",
                 """echo 'eval "$(zhin completion zsh)"' >> ~/.zshrc""",
                 "zhin completion fish > ~/.config/fish/completions/zhin.fish"):
        assert line in helped.stdout
    script = zhin("completion", "bash")
    assert script.returncode == 0 and "_ZHIN_COMPLETE=complete_bash" in script.stdout


def test_the_bash_script_round_trip(project: Path) -> None:
    """The script `zhin completion bash` prints, sourced in a real bash, completes through the real CLI."""
    script = run_zhin("completion", "bash", cwd=project).stdout
    bin_dir = project / "bin"
    bin_dir.mkdir()
    launcher = bin_dir / "zhin"
    launcher.write_text(f"#!/bin/sh\nexec {sys.executable} -m zhin_cli \"$@\"\n", encoding="utf-8")
    launcher.chmod(0o755)
    driver = (f"{script}\nCOMP_WORDS=(zhin trace --provider ant); COMP_CWORD=3\n"
              "_zhin_completion zhin; printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    env = clean_env()
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    result = subprocess.run(["bash", "--norc", "-c", driver], cwd=project, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.stdout.split() == ["anthropic"], result.stderr
