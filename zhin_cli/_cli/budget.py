"""``zhin budget check`` / ``update``: the fixed prompt cost per provider profile (library: ``zhin_cli.tools.budget.budget``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from zhin_cli._cli import (
    ConfigOption,
    DbOption,
    app,
    check_options,
    command_context,
    handles_errors,
    print_json,
    stdout_console,
)
from zhin_cli._cli.tables import figures_table, fits
from zhin_cli.core.errors import EXIT_FOUND, UsageError, ZhinError
from zhin_cli.core.terminaltext import markup_safe, terminal_safe
from zhin_cli.pipeline.context import RunContext
from zhin_cli.tools.budget.budget import (
    DEFAULT_BUDGET_FILE,
    Budget,
    BudgetReport,
    ProfileBudget,
    check_budget,
    load_budget,
    update_budget,
)

if TYPE_CHECKING:
    from rich.console import Console

budget_app = typer.Typer(help="The fixed prompt cost (system segments, tool schemas) against a committed budget.",
                         no_args_is_help=True)
app.add_typer(budget_app, name="budget")

FileOption = Annotated[Path, typer.Option("--file", "-f", help="The budget file.")]


BUDGET_HEADERS = ("provider", "model", "part", "budget", "measured", "Δ tokens", "status")


def budget_rows(report: BudgetReport) -> list[list[str]]:
    """One row of cells per part and profile, escaped for the terminal (ids come from the budget file)."""
    rows = []
    for result in report.results:
        delta = result.as_dict()["delta"]
        rows.append([terminal_safe(cell) for cell in (
            result.provider, result.model or "", result.part, "—" if result.budget is None else f"{result.budget:,}",
            "—" if result.measured is None else f"{result.measured:,}", "" if delta is None else f"{delta:+,d}",
            result.status)])
    return rows


def print_budget_table(console: Console, rows: list[list[str]], title: str) -> None:
    """A table when it fits (boxed, else unboxed as report window's); narrower, one table per profile under a
    ``provider model`` line: a part's id and its figures are never cut."""
    if fits(BUDGET_HEADERS, rows, console.width):
        console.print(figures_table(BUDGET_HEADERS, rows, console.width, title=title, numeric=(3, 4, 5)))
        return
    console.print(title, markup=False, soft_wrap=True)
    profiles: dict[tuple[str, str], list[list[str]]] = {}
    for row in rows:
        profiles.setdefault((row[0], row[1]), []).append(row[2:])
    for (provider, model), parts in profiles.items():
        console.print(f"{provider} {model}".rstrip(), markup=False, soft_wrap=True)
        console.print(figures_table(BUDGET_HEADERS[2:], parts, console.width, numeric=(1, 2, 3)))


def print_report(report: BudgetReport) -> None:
    console = stdout_console()
    print_budget_table(console, budget_rows(report), terminal_safe(f"fixed prompt cost · {report.path}"))
    for result in report.results:
        problem = result.problem()
        if problem is not None:
            label = "over budget:" if result.status == "over" else "new part:"
            console.print(f"[red]{label}[/] {markup_safe(problem)}")
    if any(r.status == "under" for r in report.results) and not report.failed:
        console.print("some parts are under budget: `zhin budget update` locks the saving in")


def publish_budget(report: BudgetReport, budget: Budget, context: RunContext) -> None:
    from zhin_cli.core import ghactions
    from zhin_cli.tools.budget.budget import budget_annotations, budget_summary, part_sources

    if ghactions.enabled():  # where the parts come from is looked up only when someone will read it
        try:
            sources = part_sources(report, context=context)  # the check's config: not read again
        except ZhinError:  # the annotations' decoration must not change the gate's verdict: the parts are still annotated
            sources = {}
        ghactions.publish(budget_annotations(report, budget, sources), budget_summary(report))


@budget_app.command("check")
@handles_errors
def check_command(
    file: FileOption = Path(DEFAULT_BUDGET_FILE),
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout.")] = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Measure the fixed prompt cost and fail if a part grew past its budget.

    Exit status: 0 within budget, 1 a part is over budget or new, 2 usage, 3 bad budget file, session or config.
    """
    budget = load_budget(file)
    context = command_context(db=db) or RunContext.load(config, cwd=Path.cwd(), db=db)  # read once for every profile
    report = check_budget(budget, context=context)
    publish_budget(report, budget, context)
    if as_json:
        print_json(report.as_dict())
    else:
        print_report(report)
    if report.failed:
        raise typer.Exit(EXIT_FOUND)


@budget_app.command("update")
@handles_errors
def update_command(
    file: FileOption = Path(DEFAULT_BUDGET_FILE),
    sessions: Annotated[list[str] | None, typer.Option("--session", "-s", help="Reference session (file relative to the budget file, or id); replaces the file's list.")] = None,
    providers: Annotated[list[str] | None, typer.Option("--provider", "-p", help="Provider profile to budget (repeatable); replaces the file's list.")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model for the given --provider profiles.")] = None,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Rewrite the budget file from what is measured now (a deliberate change, reviewed in the diff)."""
    for provider in providers or []:
        check_options(provider)
    if file.exists():
        budget = load_budget(file)
    elif sessions and providers:
        budget = Budget(file, [], [])
    else:
        raise UsageError(f"{file} does not exist: create it with --session S and --provider P")
    if sessions:
        budget.sessions = list(sessions)
    if providers:
        budget.profiles = [ProfileBudget(p, model, {}) for p in providers]
    update_budget(budget, db=db, config_path=config, cwd=Path.cwd(), context=command_context(db=db))
    typer.echo(terminal_safe(f"wrote {file}: {len(budget.profiles)} profile(s) measured on {len(budget.sessions)} session(s)"),
               err=True)
