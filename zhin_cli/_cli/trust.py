"""``zhin trust``: let a zhin.yaml's (or an eval case file's) plugins run (library: ``zhin_cli.core.trust``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from zhin_cli._cli import app, handles_errors, stdout_console
from zhin_cli.core.errors import UsageError
from zhin_cli.core.terminaltext import terminal_safe


def plugin_specs(path: Path) -> list[str]:
    """The plugins a zhin.yaml or an eval case file names (validated first: a broken file is its one-line error)."""
    from zhin_cli.core.readers import read_yaml_file
    from zhin_cli.pipeline.config import parse_config

    data, lines = read_yaml_file(path)
    if isinstance(data, dict) and "cases" in data:
        from zhin_cli.tools.eval.cases import load_case_file

        specs: list[str] = []
        for case in load_case_file(path):
            specs += list((case.data.get("config") or {}).get("plugins") or [])
            for step in case.data.get("timeline") or []:
                load = step.get("plugin", {}).get("load") if isinstance(step.get("plugin"), dict) else None
                if isinstance(load, str):
                    specs.append(load)
        return list(dict.fromkeys(specs))
    return list(parse_config(data, path, lines).plugins)


def _files(paths: list[Path]) -> list[Path]:
    from zhin_cli.pipeline.config import find_config

    if not paths:
        found = find_config(Path.cwd())
        if found is None:
            raise UsageError("no zhin.yaml found from here upward; name the file to trust")
        return [found]
    files: list[Path] = []
    for path in paths:
        if path.is_dir():  # a folder of eval cases
            from zhin_cli.tools.eval.cases import find_case_files

            files += find_case_files([path])
        else:
            files.append(path)
    return files


@app.command("trust")
@handles_errors
def trust_command(
    paths: Annotated[list[Path] | None, typer.Argument(
        help="zhin.yaml or eval case files (a folder: its case files). Default: the zhin.yaml found upward.")] = None,
    list_trusted: Annotated[bool, typer.Option("--list", help="Show every trusted file and whether it changed since.")] = False,
    revoke: Annotated[bool, typer.Option("--revoke", help="Forget the files instead (their plugins stop running).")] = False,
) -> None:
    """Let a config's plugins run: record its path and the SHA-256 of it and of every plugin file it names.

    zhin.yaml `plugins:` and eval case plugins are Python. They run only from a config named with --config (or ZHIN_CONFIG), with `zhin --allow-plugins …` (ZHIN_ALLOW_PLUGINS=1), or from a file trusted here. An installed plugin package the config names (entry:NAME) is recorded with its version. A zhin.yaml found upward or a case file that is not trusted, or that changed since (the file, one of its plugin files, or a plugin package's version), stops the command with one line (exit 3) before any plugin code runs. Review the file and its plugins first. Plugin code of a git ref (--base/--head) runs only with `zhin --allow-ref-plugins …`: on a pull request, the pull request's code.

    The record is kept in $XDG_CONFIG_HOME/zhin/trusted.json (default ~/.config/zhin/trusted.json), never in the checkout.

    Exit status: 0 done, 2 usage (nothing to revoke, no zhin.yaml found), 3 the file cannot be read or is not a valid config, 4 not a valid case file.
    """
    from zhin_cli.core import trust

    out = stdout_console()
    if list_trusted:
        if paths or revoke:
            raise UsageError("--list takes no files and no --revoke")
        entries = trust.read_store()
        if not entries:
            out.print(terminal_safe(f"nothing trusted ({trust.store_path()})"), markup=False, soft_wrap=True)
        for name, entry in sorted(entries.items()):
            path = Path(name)
            why = trust.status(path) if path.is_file() else "missing"
            state = "ok" if why is None else ("missing" if why == "missing" else f"changed ({why})")
            plugins = ", ".join(entry.get("specs") or []) or "no plugins"
            out.print(terminal_safe(f"{state:<8} {name}  [{plugins}]"), markup=False, soft_wrap=True)
        return
    files = _files(paths or [])
    if revoke:
        for file in files:
            if not trust.revoke(file):
                raise UsageError(f"not trusted: {file}")
            out.print(terminal_safe(f"revoked {file.resolve()}"), markup=False, soft_wrap=True)
        return
    for file in files:
        specs = plugin_specs(file)
        entry = trust.record(file, specs)
        named = f"with its plugins: {', '.join(specs)}" if specs else "(it names no plugins)"
        out.print(terminal_safe(f"trusted {file.resolve()} (sha256 {entry['sha256'][:12]}) {named}"), markup=False, soft_wrap=True)
