"""``zhin report economy``: header tokens, simulated prompt-cache hits and what the input costs (library:
``zhin_cli.tools.report.economy``; costs: ``zhin_cli.cache.cost``, prices: ``zhin_cli.pipeline.prices``)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from zhin_cli._cli import (
    ConfigOption,
    DbOption,
    PresetOption,
    PricesOption,
    check_options,
    command_context,
    database_or_discovered,
    freeze_loaded,
    handles_errors,
    print_json,
    print_sources,
    replay_progress,
    stdout_console,
)
from zhin_cli._cli.report_group import report_app
from zhin_cli.cache import CacheOutcome
from zhin_cli.cache.cost import Cost, format_usd
from zhin_cli.core.errors import UsageError
from zhin_cli.core.parallel import JOBS_HELP
from zhin_cli.core.terminaltext import markup_safe, terminal_safe
from zhin_cli.core.tokens import DEFAULT_ENCODING
from zhin_cli.tools.report.economy import (
    ADR_LABEL,
    BILL_CAVEAT,
    CASES,
    COST_LAYOUTS,
    STYLES,
    BillRow,
    CaptureEconomy,
    EconomyReport,
    SessionBill,
    SessionEconomy,
    SideTotals,
    flat_vs_adr,
    groups_words,
    run_economy,
    written,
)


@report_app.command("economy")
@handles_errors
def economy_command(
    sessions: Annotated[list[str] | None, typer.Argument(help="Sessions: .jsonl files, folders of them, or session ids / keys in the database (none: every session of --db or of the .zhin/data.sqlite found upward); a capture folder or a JSONL of request bodies: what the bot paid per captured request.")] = None,
    provider: Annotated[list[str] | None, typer.Option("--provider", "-p", help=f"Simulate only these providers (repeatable; default: {', '.join(CASES)}).")] = None,
    encoding: Annotated[str, typer.Option("--encoding", help="Tokenizer for every count (o200k_base or cl100k_base).")] = DEFAULT_ENCODING,
    as_json: Annotated[bool, typer.Option("--json", help="One versioned JSON document on stdout.")] = False,
    per_request: Annotated[bool, typer.Option("--per-request", help="With --json: the figures of every request.")] = False,
    db: DbOption = None,
    config: ConfigOption = None,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", help=JOBS_HELP)] = None,
    prices: PricesOption = None,
) -> None:
    """Header tokens, simulated prompt-cache hits and input cost: upstream's sender prefix vs the ADR headers; ADR vs flat layout vs upstream's sliding window; the bot's real bill beside ADR 0041's.

    Header tokens per member message for three styles (upstream's sender prefix on every group message, the ADR's full header on every message, the ADR projection).

    Per provider (OpenAI, Anthropic, DeepSeek), timed as docs/figures.md names it (cold at the first request of each cache group, warm after it): one row per layout — the ADR layout, a flat layout and the ADR layout under upstream's sliding window — with its prompt tokens per request, the later hit rate (the requests after each group's first) and input cost per request (USD); how many requests start cold, the ADR layout's physical limit, and why the flat or the ADR layout costs less.

    Where the session stores the usage its provider reported: per request and in total, what the bot paid (its prompt, cached and cache-written tokens) beside what ADR 0041's simulated request for the same turn would cost, both at the price row of the bot's model (the bot's side includes its own system prompt and tools, which the database does not keep). Definitions: docs/economy.md.
    """
    chosen = [p.strip() for value in provider or [] for p in value.split(",") if p.strip()] or None
    for name in chosen or []:  # a provider of the config's plugins: they load first, for the whole command
        if name not in CASES:
            with contextlib.suppress(UsageError):  # no provider at all: run_economy names what it simulates
                check_options(name)
    # a bar over the sessions on a terminal's stderr (a spinner until the list of sessions is known)
    with replay_progress("sessions simulated", loading="reading the sessions") as progress:
        refs = list(sessions or [])  # none: every session of --db or of the database found upward (as stats cache)
        database = db if refs else database_or_discovered(db)
        report = run_economy(refs, cwd=Path.cwd(), db=database, config_path=config, providers=chosen, encoding=encoding,
                             after_load=freeze_loaded, jobs=jobs, progress=progress, prices_file=prices,
                             context=command_context(db=database, prices_file=prices))
    if as_json:
        print_json(report.as_dict(per_request))
    else:
        for note in report.notes:  # never a silent price: a default row used, a provider without rows
            typer.echo(f"zhin: note: {terminal_safe(note)}", err=True)
        _print(stdout_console(), report)


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def _num(value: float | None) -> str:
    """Tokens per request (a mean): thousands separators as every token count, always one decimal (issue 31 §3)."""
    if value is None:
        return "—"
    return f"{value:,.1f}"


def window_text(window: Mapping[str, object]) -> str:
    """The window settings in words (``report economy --json`` keeps the machine values): no ``None``."""
    parts = []
    messages, cut = window.get("max_messages"), window.get("cut_to")
    if messages is None:
        parts.append("no message limit")
    else:
        parts.append(f"at most {messages} messages, then cut to the newest {window['kept_after_cut']}"
                     + ("" if cut is not None else " (half)"))
    parts.append(f"{window.get('keep_membership_events', 0)} membership events carried over")
    blocks, cut_blocks = window.get("max_blocks"), window.get("cut_blocks_to")
    if blocks is None:
        parts.append("no block limit")
    else:
        parts.append(f"at most {blocks} blocks, then cut to the newest {window['kept_blocks_after_cut']}"
                     + ("" if cut_blocks is not None else " (half)"))
    return "; ".join(parts)


def _print(console: Console, report: EconomyReport) -> None:
    if report.sessions:  # what zhin's side was computed with (captured bodies have only the bot's side)
        console.print(f"tokens: {report.encoding} · window: {markup_safe(window_text(report.window))}")
    for session in report.sessions:
        _print_session(console, session)
    for capture in report.captures:
        _print_capture(console, capture)


def _print_session(console: Console, session: SessionEconomy) -> None:
    console.print(f"[bold]{markup_safe(session.session_id)}[/] · {session.messages} messages · {session.requests} requests")
    headers = session.headers
    table = Table("header style", "tokens", "per message", "vs full", "vs upstream", title="header tokens "
                  f"({headers.messages} messages with a header — members' and the bot's — each counted once)", title_justify="left")
    labels = {"upstream": "upstream [sender:…] on every group message", "full": "ADR full header on every message",
              "adr": "ADR projection (full once, short after)"}
    for style in STYLES:
        total = headers.totals[style]
        table.add_row(markup_safe(labels[style]), f"{total:,}", f"{headers.per_message(style):,.1f}",
                      _pct(total / headers.totals["full"] if headers.totals["full"] else None),
                      _pct(total / headers.totals["upstream"] if headers.totals["upstream"] else None))
    console.print(table)
    fields = headers.detail()["fields"]["adr"]
    console.print("ADR projection, tokens per field: " + ", ".join(f"{k} {v}" for k, v in fields.items()))
    _print_cache(console, session)
    _print_bill(console, session.bill)
    console.print()


LAYOUT_NAMES = {"adr": "ADR", "flat": "flat", "sliding": "sliding"}


def _print_cache(console: Console, session: SessionEconomy) -> None:
    """The timed cache (docs/figures.md), one small table per provider: one row per layout, every cell a few
    characters wide so the tables read whole at 60 columns; the groups line and the flat-vs-ADR reason under each."""
    console.print("simulated prompt cache, timed: cold at the first request of each cache group (a request more "
                  "than the provider's cache lifetime after the one before), warm after it; later hit rate: the share of "
                  "the later requests' prompt tokens the cache reads; "
                  "input cost in USD; sliding = the ADR layout under upstream's window")
    for name, figures in session.cache.items():
        data = figures.as_dict()
        # a line, not the table's title: a title wraps to the table's width
        console.print(markup_safe(f"{name} ({figures.model}, cache lifetime {figures.lifetime_seconds:,} s): "
                                  f"{groups_words(len(figures.requests), figures.groups)}; ADR's physical limit for later requests {_pct(figures.limit(False))}"))
        # no hit rate of the first requests: each starts cold, 0 by construction (the groups line counts them)
        table = Table("layout", "prompt per request", "later hit rate", "cost per request")
        for layout in COST_LAYOUTS:
            totals = figures.costs(layout)
            table.add_row(LAYOUT_NAMES[layout], _num(data[f"{layout}_prompt_tokens_per_request"]),
                          _pct(figures.rate(layout, False)),
                          format_usd(totals.per_request if totals is not None else None))
        for column in table.columns:  # a number is never cut to "$0.00…": the headers wrap first
            column.min_width = max(len(str(cell)) for cell in column.cells)
            column.justify = "left" if column is table.columns[0] else "right"
        console.print(table)
        if reason := flat_vs_adr(figures, session.headers):
            console.print(f"flat vs ADR: {markup_safe(reason)}")
    if any(figures.groups > 1 for figures in session.cache.values()):
        console.print(f"{DIFFERS}: prefix-diff replays every request right after the one before, in one cache that "
                      "never expires, so only its first request is cold (docs/figures.md)")


DIFFERS = "prefix-diff's warm figures differ"


def _side_cell(outcome: CacheOutcome | None, cost: Cost | None, missing: str | None) -> str:
    """``2,583 prompt, 2,432 cached → $0.0004``; the reason instead when there is no figure (never a 0)."""
    if outcome is None:
        return markup_safe(missing or "—")
    tokens = written(outcome)
    written_words = f", {tokens:,} written" if tokens else ""
    usd = f" → {format_usd(cost.usd)}" if cost is not None else ""
    return f"{outcome.prompt_tokens:,} prompt, {outcome.read:,} cached{written_words}{usd}"


def _total_cell(side: SideTotals) -> str:
    written = f", {side.written:,} written" if side.written else ""
    usd = f" → {format_usd(side.cost.usd)}" if side.cost.requests else ""
    return f"{side.prompt:,} prompt, {side.cached:,} cached{written}{usd}"


def _price_words(rows: list[BillRow]) -> str:
    """Which price rows the bill uses, once each: ``openai/gpt-4.1-mini ($0.4 input, $0.1 cached per 1M)``."""
    seen = {(row.price.price.provider, row.price.price.model): row.price.price for row in rows if row.price is not None}
    return "; ".join(f"{p.provider}/{p.model} (${p.input:g} input, ${p.cached_input:g} cached per million tokens)"
                     for p in seen.values()) or "no price row (no cost)"


def _bill_table(bill: SessionBill) -> Table:
    """One row per request: the bot's side, and ADR 0041's beside it unless the bill has none (captured bodies)."""
    prices = markup_safe(_price_words(bill.rows))
    if bill.no_adr is not None:
        table = Table("capture", "file", bill.paid_label, title=f"the bot's bill, input only, at {prices}",
                      title_justify="left")
        for row in bill.rows:
            table.add_row(str(row.capture), markup_safe(Path(row.where or "").name),
                          _side_cell(row.paid, row.cost(row.paid), row.paid_missing))
        return table
    table = Table("request", "row", bill.paid_label, ADR_LABEL, title_justify="left",
                  title=f"the bot's bill beside ADR 0041's, input only, at {prices}")
    for row in bill.rows:
        table.add_row(str(row.turn), str(row.row_id), _side_cell(row.paid, row.cost(row.paid), row.paid_missing),
                      _side_cell(row.adr, row.cost(row.adr), row.adr_missing))
    return table


def _print_bill(console: Console, bill: SessionBill) -> None:
    """The bot's stored usage beside ADR 0041's simulation, per request and in total (docs/economy.md)."""
    if bill.reason:
        console.print(markup_safe(f"{bill.paid_label}: nothing to show — {bill.reason}; the figures above are zhin's "
                                  "simulation only"))
        return
    table = _bill_table(bill)
    paid, adr = bill.totals()
    counted = sum(map(bill.counted, bill.rows))
    alone = bill.no_adr is not None  # the bot's side alone: one total
    table.add_section()
    table.add_row("total", f"{counted} req.", _total_cell(paid), *(() if alone else (_total_cell(adr),)))
    console.print(table)
    if left_out := len(bill.rows) - counted:
        console.print(f"{left_out} request(s) without both prompt and cached tokens recorded are left out of the total" if alone else
                      f"{left_out} request(s) without both figures are left out of both totals")
    console.print(markup_safe(f"{ADR_LABEL}: none — {bill.no_adr}" if alone else f"caveat: {BILL_CAVEAT}"))


def _print_capture(console: Console, capture: CaptureEconomy) -> None:
    console.print(f"[bold]{markup_safe(capture.source)}[/] · captured request bodies · {capture.requests} requests")
    _print_bill(console, capture.bill)
    console.print()


@report_app.command("html")
@handles_errors
def html_command(
    sessions: Annotated[list[str], typer.Argument(metavar="SESSION...", help="Sessions: .jsonl files, folders of them, or session ids / keys in the database; or captured request bodies — a capture folder (NNNNN-<route>.json, `zhin serve --capture`) or a JSONL of bodies, one page per conversation (docs/captures.md).")],
    output: Annotated[Path | None, typer.Option("--output", "-o", metavar="FILE", help="Write the report here (atomically). Default: stdout, when it is not a terminal.")] = None,
    provider: Annotated[str | None, typer.Option("--provider", "-p", envvar="ZHIN_PROVIDER", help="Provider profile (see `zhin providers`).")] = None,
    preset: PresetOption = None,
    economy: Annotated[bool, typer.Option("--economy/--no-economy", help="Include the economy summary (one more replay of each session).")] = True,
    window: Annotated[bool, typer.Option("--window", help="Include report window's frontier chart for the provider (about 20 more replays of each session).")] = False,
    prices: PricesOption = None,
    db: DbOption = None,
    config: ConfigOption = None,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", help=JOBS_HELP)] = None,
) -> None:
    """One self-contained HTML file picturing each session: prompt tokens per turn (cached / new), breaks and their causes, every request's segments, wire messages and diff.

    No network, no external scripts, fonts or stylesheets: it opens from disk or a CI artifact. The numbers are those of `trace --json`, `prefix-diff --json` and `report economy --json`. What the page shows: docs/report.md.

    A capture folder or a JSONL of request bodies (what a bot really sent) is drawn like sessions: one per conversation, a section per captured request, its diff against the conversation's previous request; no economy panel, no validation (docs/captures.md).
    """
    from zhin_cli.core.outputfiles import atomic_output
    from zhin_cli.tools.report.html import build_report

    check_options(provider)
    if output is None and sys.stdout.isatty():
        raise UsageError("the report is an HTML file: pass -o FILE (or redirect stdout)")
    with replay_progress("replaying") as progress:
        report = build_report(sessions, cwd=Path.cwd(), db=db, config_path=config, provider=provider, preset=preset,
                              economy=economy, after_load=freeze_loaded, progress=progress, jobs=jobs, window=window,
                              prices_file=prices, context=command_context(db=db, prices_file=prices))
    page = report.html()
    print_sources(report.config_path, report.db)
    if output is None:
        sys.stdout.write(page)
        return
    with atomic_output(output) as handle:
        handle.write(page)
    turns = sum(len(s.turns) for s in report.sessions)
    typer.echo(terminal_safe(f"wrote {output} ({len(report.sessions)} session(s), {turns} requests, "
                             f"{output.stat().st_size // 1024:,} KiB); open {output.resolve().as_uri()}"), err=True)


# `report window` (the window sweep) lives in its own module; importing it registers it on report_app (it imports
# the group, not this module: no cycle)
from zhin_cli._cli import report_window as _report_window  # noqa: E402,F401
