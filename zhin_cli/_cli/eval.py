"""``zhin eval``: run YAML scenarios against the offline validators (or a live model); ``zhin schema eval-case`` and
``zhin schema config``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from zhin_cli._cli import (
    ConfigOption,
    app,
    check_options,
    command_context,
    handles_errors,
    print_json,
    replay_progress,
    stderr_console,
    stdout_console,
)
from zhin_cli.core.errors import EXIT_CANNOT_RUN, EXIT_FOUND, UsageError
from zhin_cli.core.parallel import MAX_JOBS
from zhin_cli.core.terminaltext import terminal_safe

if TYPE_CHECKING:
    from rich.console import Console

    from zhin_cli.tools.eval.compare import Comparison
    from zhin_cli.tools.eval.runner import EvalOptions

schema_app = typer.Typer(help="Print the published JSON Schemas.", no_args_is_help=True)
app.add_typer(schema_app, name="schema")


@schema_app.command("eval-case")
@handles_errors
def schema_eval_case() -> None:
    """The JSON Schema (draft 2020-12) of an eval case file (eval_cases/*.yaml)."""
    from zhin_cli.tools.eval.cases import case_schema

    print_json(case_schema())


@schema_app.command("config")
@handles_errors
def schema_config() -> None:
    """The JSON Schema (draft 2020-12) of zhin.yaml; the loader validates every config with it."""
    from zhin_cli.pipeline.config_schema import config_schema

    print_json(config_schema())


@app.command("eval")
@handles_errors
def eval_command(
    paths: Annotated[list[Path] | None, typer.Argument(help="Case files or folders (default: eval_cases/).")] = None,
    provider: Annotated[list[str] | None, typer.Option("--provider", "-p", help="Run only under these provider profiles (repeatable).")] = None,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", help=f"Cases run at once: worker processes offline, threads for live cases (default: the number of cores; 1: one at a time, in this process; at most {MAX_JOBS}).")] = None,
    repeat: Annotated[int | None, typer.Option("--repeat", help="Live cases: ask the model N times (overrides the case's repeat).")] = None,
    junit: Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One versioned JSON document on stdout.")] = False,
    live: Annotated[bool, typer.Option("--live", help="Run live cases against an OpenAI-compatible model (OPENAI_BASE_URL, OPENAI_API_KEY).")] = False,
    model: Annotated[str | None, typer.Option("--model", "-m", envvar="ZHIN_EVAL_MODEL", help="Live model id.")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Live: neither read nor write the response cache.")] = False,
    cache_dir: Annotated[Path | None, typer.Option("--cache-dir", envvar="ZHIN_EVAL_CACHE_DIR", help="Live: the response cache folder (default: the user cache directory, $XDG_CACHE_HOME/zhin/eval-cache or ~/.cache/zhin/eval-cache, never the checkout).")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Live: seed of the first repeat (repeat k uses seed+k).")] = 0,
    base: Annotated[str | None, typer.Option("--base", help="Before/after: the base configuration, a zhin.yaml or a git ref (with --head).")] = None,
    head: Annotated[str | None, typer.Option("--head", help="Before/after: the head configuration, a zhin.yaml or a git ref (with --base).")] = None,
    config: ConfigOption = None,
) -> None:
    """Run eval scenarios: assemble each scripted conversation per provider and check the assertions.

    Every case file is validated against the published schema (`zhin schema eval-case`) before anything runs.
    Offline, cases that need a live model are skipped with the reason, never passed. A case marked
    `expect: fail` is a negative control: it passes only when one of its assertions fails.

    Cases without their own `config:` run under the project's zhin.yaml (found upward, or --config). With
    --base X --head Y they run under both (each a zhin.yaml or a git ref, whose plugin code is used too) and
    the report shows, per case, the pass/fail change, request- and header-token deltas, prefix breaks and
    validator verdicts that changed; `zhin eval compare A.json B.json` compares two saved --json results.

    Exit status: 0 all passed (before/after: no regression), 1 a case failed or errored (before/after: a case
    regressed), 2 usage, 3 could not run (live model unreachable), 4 invalid case file or config.

    Live answers read from the response cache are counted in the report ("k of n live answers from cache");
    the cache is never the checkout's unless --cache-dir names it. Credentials in OPENAI_BASE_URL are never
    shown or stored (shown as ***).
    """
    if paths and paths[0] == Path("compare") and not Path("compare").exists():
        compare_saved(paths[1:], as_json)
        return
    from zhin_cli.tools.eval.report import print_summary, publish_github, write_junit
    from zhin_cli.tools.eval.runner import EvalOptions, run_eval

    options = EvalOptions(providers=provider or [], jobs=jobs, repeat=repeat, live=live, model=model, use_cache=not no_cache, seed=seed,
                          cache_dir=cache_dir)
    if base is not None or head is not None:
        if base is None or head is None or config is not None:
            raise UsageError("before/after needs both --base and --head (and no --config)")
        before_after(paths or [Path("eval_cases")], options, base, head, as_json)
        return
    from zhin_cli.pipeline.config import load_config

    for name in options.providers:  # a plugin's provider: the config and its plugins load first, for the whole run
        check_options(name)
    context = command_context()
    options.project_config = context.config if context is not None else load_config(config, cwd=Path.cwd())
    with replay_progress("eval") as progress:
        run = run_eval(paths or [Path("eval_cases")], options, progress=progress)
    if junit is not None:
        write_junit(run, junit)
    err = stderr_console()
    publish_github(run)
    if as_json:
        print_json(run.as_dict())
    else:
        print_summary(stdout_console(), run)
        if junit is not None:
            err.print(terminal_safe(f"JUnit XML: {junit}"), markup=False)
    raise typer.Exit(run.exit_code)


def before_after(paths: list[Path], options: EvalOptions, base: str, head: str, as_json: bool) -> None:
    """The same cases under two configurations (eval:chat 前后对比)."""
    from zhin_cli.pipeline.configsource import load_config_source
    from zhin_cli.tools.eval.compare import compare_results
    from zhin_cli.tools.eval.runner import run_eval

    runs = []
    labels = []
    for side in (base, head):
        with load_config_source(side, cwd=Path.cwd()) as source:  # the tree (plugin code) lives while the side runs
            options.project_config = source.config
            with replay_progress(f"eval {source.label}") as progress:
                runs.append(run_eval(paths, options, progress=progress))
            labels.append(source.label)
    comparison = compare_results(runs[0].as_dict(), runs[1].as_dict(), labels[0], labels[1])
    show_comparison(comparison, as_json)
    if any(run.exit_code == EXIT_CANNOT_RUN for run in runs):
        raise typer.Exit(EXIT_CANNOT_RUN)
    raise typer.Exit(EXIT_FOUND if comparison.regressions else 0)


def compare_saved(files: list[Path], as_json: bool) -> None:
    from zhin_cli.tools.eval.compare import compare_results, load_result

    if len(files) != 2:
        raise UsageError("usage: zhin eval compare BASE.json HEAD.json (two saved `zhin eval --json` results)")
    comparison = compare_results(load_result(files[0]), load_result(files[1]), str(files[0]), str(files[1]))
    show_comparison(comparison, as_json)
    raise typer.Exit(EXIT_FOUND if comparison.regressions else 0)


def show_comparison(comparison: Comparison, as_json: bool) -> None:
    if as_json:
        print_json(comparison.as_dict())
        return
    print_comparison(stdout_console(), comparison)


def print_comparison(console: Console, comparison: Comparison) -> None:
    """The title on its own line (wrapped between words, never inside one), a row per case that changed — no table
    at all when none did — and the counts."""
    from rich.table import Table

    from zhin_cli.core.terminaltext import markup_safe
    from zhin_cli.tools.eval.compare import comparison_rows

    console.print(terminal_safe(f"eval before/after: {comparison.base_label} → {comparison.head_label}"), markup=False,
                  overflow="fold")
    styles = {"regressed": "red", "fixed": "green", "added": "cyan", "removed": "yellow"}
    rows = comparison_rows(comparison)
    if rows:
        table = Table("case", "base → head", "change", "Δ request tokens", "Δ header tokens", "notes")
        for row in rows:
            style = styles.get(row.change)
            table.add_row(markup_safe(row.case), row.verdicts, f"[{style}]{row.change}[/]" if style else row.change,
                          row.request_tokens, row.header_tokens, markup_safe(row.notes))
        console.print(table)
    else:
        console.print("no case changed: nothing to show case by case", markup=False)
    summary = comparison.as_dict()["summary"]
    console.print(", ".join(f"{count} {change}" for change, count in summary.items()) +
                  f" · {len(comparison.regressions)} regression(s)")
