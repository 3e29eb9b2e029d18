"""``zhin trace``: per request, the segments table, state rendering, headers, cache breakpoints, body.

``--all`` shows one compact row per request (a picture of the whole session: prompt tokens, the cached/new bar,
the largest segments, the state rendering mode, the verdict); ``--detail`` (and any single request) the full tables. A single request's cost is *cold* (the
request alone), ``--all``'s cached tokens and costs *warm* (after every request before it): docs/figures.md.
``--jsonl`` streams one request per line as the replay makes it. Every view names the layout that assembled the
requests (``adr-0041`` or the preset's) and, where the database stored the bot's usage for a request, shows it
beside zhin's figures ("the bot sent …; ADR 0041 would send …"). Identifiers (session and segment ids) are never
cut to fit a terminal: the other columns wrap instead.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TextIO

import typer
from rich.box import HEAVY_HEAD
from rich.cells import cell_len
from rich.table import Table

from zhin_cli._cli import (
    ConfigOption,
    DbOption,
    PresetOption,
    PricesOption,
    app,
    check_options,
    command_context,
    freeze_loaded,
    handles_errors,
    print_json,
    print_sources,
    replay_progress,
    stdout_console,
    write_json_line_safely,
)
from zhin_cli.cache import cached_share
from zhin_cli.cache.captures import CaptureDiff, CaptureRequest
from zhin_cli.cache.cost import Cost, CostTotals, format_share, format_usd
from zhin_cli.cache.diff import turn_ranges
from zhin_cli.core.errors import EXIT_FOUND, UsageError
from zhin_cli.core.terminaltext import markup_safe, terminal_safe, terminal_safe_lines
from zhin_cli.pipeline.assemble import AssembledRequest
from zhin_cli.pipeline.provenance import ADR_LAYOUT, layout_note, layout_phrase
from zhin_cli.store.refs import split_capture_refs
from zhin_cli.tools.trace.trace import (
    WARNING,
    StoredUsage,
    TraceResult,
    TurnRow,
    capture_rows,
    capture_trace_dict,
    open_trace,
    request_record,
    timezone_note,
    trace_captures,
    turn_row,
)

if TYPE_CHECKING:
    from rich.console import Console

CACHED, NEW = "█", "░"  # the bar's characters: they carry the meaning without colour (NO_COLOR, a log file)
ACCEPTED, REJECTED = "✓", "✗"  # the validator's verdict
SEGMENTS_TITLES = ("largest segments (tokens)", "largest segments", "segments")
ELIDED = "…"  # a cell's entries left out for the width
WIDE_BAR, NARROW_BAR = 24, 8  # bar width at full scale (the largest prompt shown), by terminal width
# the figures' cache (docs/figures.md): --all's rows are warm, a single request's cost cold; each names the other
REQUEST_HEAD, WARM_COST_HEAD = "req", "warm cost"
WARM_MEANING = "warm, each request after every one before it (a replay, as prefix-diff counts; the first all new)"
COLD_ELSEWHERE = "cold, a request alone: trace --turn N; timed: report economy"
WARM_AND_TIMED_ELSEWHERE = "warm: trace --all; timed: report economy"
BOT_SENT, BOT_CACHED, NOT_STORED = "bot sent", "bot cached", "-"  # the stored-usage columns, and an empty cell


@app.command("trace")
@handles_errors
def trace_command(
    session: Annotated[str, typer.Argument(help="A session .jsonl file, or a session id / key in the database; or captured request bodies — a capture folder or a JSONL of bodies: a row per request, as the bot sent it (docs/captures.md).")],
    turn: Annotated[int | None, typer.Option("--turn", "-t", help="The N-th request to show (1-based; -1 = last). Default: the last. A greeting has no request: a note, exit 0.")] = None,
    all_turns: Annotated[bool, typer.Option("--all", help="Show every request: one compact row each (--detail: the full tables).")] = False,
    detail: Annotated[bool, typer.Option("--detail", help="With --all: the full per-segment tables of every request instead of one row each (a single request is always shown in full).")] = False,
    provider: Annotated[str | None, typer.Option("--provider", "-p", envvar="ZHIN_PROVIDER", help="Provider profile (see `zhin providers`).")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", envvar="ZHIN_MODEL", help="Model id (default: the model stored with each request, else gpt-4o; with --provider, the provider's default model unless the stored one is the provider's).")] = None,
    timezone: Annotated[str | None, typer.Option("--timezone", envvar="ZHIN_TIMEZONE", help="Instance time zone for header times (default: zhin.yaml's, the session's, the one its data names, TZ, UTC; the output says which).")] = None,
    show_request: Annotated[bool, typer.Option("--show-request", help="Print the request body zhin assembles from the stored rows under the layout named in the output (not the body the bot sent; with the full tables).")] = False,
    validate: Annotated[bool, typer.Option("--validate", help="Exit 1 if the offline validator rejects any shown request (its verdict is always shown).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One versioned JSON document on stdout.")] = False,
    as_jsonl: Annotated[bool, typer.Option("--jsonl", help="One JSON object per request on stdout, each written as the replay makes it (an element of --json's requests).")] = False,
    preset: PresetOption = None,
    db: DbOption = None,
    config: ConfigOption = None,
    prices: PricesOption = None,
) -> None:
    """Replay a stored conversation and show what each request sent to the model, and its input cost when the provider has prices.

Cached tokens and costs of one request are cold (the request alone); of --all, warm (each request after every one before it, as prefix-diff counts them): docs/figures.md.

    Exit status: 0 ok, 1 a request was rejected (with --validate), 2 usage, 3 cannot run (bad input, database).
    """
    if turn is not None and all_turns:
        raise UsageError("use either --turn or --all")
    if as_json and as_jsonl:
        raise UsageError("use either --json or --jsonl")
    check_options(provider, timezone)
    captured, _ = split_capture_refs([session], Path.cwd())
    if captured:  # the bot's own bodies: every request, a row each
        refused = [name for name, given in (("--turn", turn is not None), ("--detail", detail),
                                            ("--show-request", show_request), ("--validate", validate),
                                            ("--preset", preset is not None), ("--model", model is not None)) if given]
        if refused:
            raise UsageError(f"{', '.join(refused)}: not for captured bodies (trace shows each captured request as sent)")
        trace_captured(captured[0], provider=provider, config=config, prices=prices, as_json=as_json, as_jsonl=as_jsonl)
        return
    compact = all_turns and not (detail or show_request or as_json or as_jsonl)  # --all's picture: a row per turn
    out = sys.stdout  # bound before the progress bar starts: rich's live display redirects sys.stdout to stderr
    with replay_progress("replaying") as progress, open_trace(
            session, db=db, config_path=config, provider=provider, model=model, timezone=timezone, preset=preset,
            turn=turn, all_turns=all_turns, cwd=Path.cwd(), after_load=freeze_loaded, progress=progress,
            prices_file=prices, context=command_context(db=db, prices_file=prices)) as run:
        result = run.result
        rows: list[TurnRow] = []
        if as_jsonl:
            for note in result.notes:  # stdout holds requests only
                print(terminal_safe(note_line(note)), file=sys.stderr)
            rejected = False
            for request, _, cost in run.costed():
                rejected |= not request.verdict.ok
                write_line(out, request_record(request, result.layout, run.stored_usage(request.turn), cost, result.cache_model))
            for note in run.pricing.notes:  # a price note is known once the request that needs it is made
                print(f"zhin: note: {terminal_safe(note)}", file=sys.stderr)
        else:
            for request, outcome, cost in run.costed():
                stored = run.stored_usage(request.turn)
                if compact:  # a small row per turn is kept, not the requests
                    rows.append(turn_row(request, outcome.read, cost, stored))
                else:
                    result.requests.append(request)
                    result.costs.append(cost)
                    result.stored.append(stored)
            rejected = any(not row.accepted for row in rows) or any(not r.verdict.ok for r in result.requests)
    if not (as_json or as_jsonl):  # once the replay succeeded: an error stays one line on stderr
        for note in run.pricing.notes:  # never a silent price: a model billed at its provider's default row
            typer.echo(f"zhin: note: {terminal_safe(note)}", err=True)
        print_sources(result.config_path, result.db)
    if as_json:
        result.notes.extend(run.pricing.notes)  # in the document: a price note is never silent
        print_json(result.as_dict())
    elif compact:
        print_rows(stdout_console(), result, rows)
    elif not as_jsonl:
        console = stdout_console()
        print_heading(console, result)
        for request, cost, stored in zip(result.requests, result.costs, result.stored, strict=True):
            print_request(console, request, show_request, cost, layout=result.layout, stored=stored)
    if validate and rejected:
        raise typer.Exit(EXIT_FOUND)


def trace_captured(path: Path, *, provider: str | None, config: Path | None, prices: Path | None, as_json: bool,
                   as_jsonl: bool) -> None:
    """``trace FOLDER`` / ``trace BODIES.jsonl``: each captured request in its conversation, as sent."""
    out = sys.stdout
    diff = trace_captures(path, config_path=config, provider=provider, prices_file=prices, cwd=Path.cwd(),
                          context=command_context(prices_file=prices))
    notes = [*diff.notes, *(n for s in diff.sessions[:1] for n in s.notes)]
    if as_json:
        print_json(capture_trace_dict(diff))
        return
    for note in notes:
        print(f"zhin: note: {terminal_safe(note)}", file=sys.stderr)
    if as_jsonl:
        for row in capture_rows(diff):
            write_line(out, row.as_dict())
        return
    print_capture_rows(stdout_console(), diff)


def print_capture_rows(console: Console, diff: CaptureDiff) -> None:
    """One block per conversation: a row per request — capture number, prompt tokens (the simulator's, and the
    provider's real count where recorded), cached tokens (the simulator's, one cache across conversations, and the
    provider's real read where recorded; ``≠``: they disagree, ``≈``: they agree within one cache block), the
    cached/new bar, and what broke against the conversation's previous request."""
    rows = capture_rows(diff)
    console.print(f"[bold]{markup_safe(diff.source)}[/] · {len(rows)} captured requests in {len(diff.sessions)} "
                  "conversation(s): the bodies the bot sent", soft_wrap=True)
    scale = max(row.request.prompt_tokens for row in rows)
    width = max(len("capture"), *(len(str(row.request.number)) for row in rows))
    columns = _real_columns(diff)
    for session in diff.sessions:
        mine = [row for row in rows if row.request.conversation == session.session_id]
        console.print(f"[bold]{markup_safe(session.session_id)}[/] · {markup_safe(session.provider)} · "
                      f"{markup_safe(session.model)} · {len(mine)} requests", soft_wrap=True)
        head = (f"  {'capture'.ljust(width)} {'prompt':>7}" + (f" {'real':>7}" if columns.prompt else "")
                + f" {'cached':>7}" + (f" {'real':>7}" if columns.cached else ""))
        console.print(f"[dim]{head} {'tokens'.ljust(WIDE_BAR)}  cause[/]", soft_wrap=True)
        for row in mine:
            request = row.request
            cached, new = token_cells(request.prompt_tokens, request.cached_tokens, scale, WIDE_BAR)
            bar = CACHED * cached + NEW * new
            cause = "first" if row.pair is None else row.pair.cause + (f" ({row.pair.detail})" if row.pair.detail else "")
            console.print(f"  {str(request.number).ljust(width)} {request.prompt_tokens:>7,}{columns.prompt_cell(request)}"
                          f" {request.cached_tokens:>7,}{columns.cached_cell(request)} {bar.ljust(WIDE_BAR)}  "
                          f"{markup_safe(cause)}", soft_wrap=True)
    _print_real_verdict(console, diff)
    console.print(f"[dim]tokens: {CACHED} cached  {NEW} new (the simulator, one cache across conversations)[/]", soft_wrap=True)


@dataclass(frozen=True)
class _RealColumns:
    """Which of the provider's real figures a capture set recorded: a column each, only when some request has it."""

    prompt: bool
    cached: bool

    def prompt_cell(self, request: CaptureRequest) -> str:
        if not self.prompt:
            return ""
        value = request.real.prompt_tokens if request.real is not None else None
        return " " + (NOT_STORED if value is None else f"{value:,}").rjust(7)

    def cached_cell(self, request: CaptureRequest) -> str:
        if not self.cached:
            return ""
        value = request.real.cached_tokens if request.real is not None else None
        if value is None or request.real is None:
            return " " + NOT_STORED.rjust(7)
        agrees = request.real.agrees(request.cached_tokens)
        mark = "≠" if agrees is False else "" if value == request.cached_tokens else "≈"
        return " " + f"{mark}{value:,}".rjust(7)


def _real_columns(diff: CaptureDiff) -> _RealColumns:
    reals = [r.real for r in diff.requests if r.real is not None]
    return _RealColumns(any(r.prompt_tokens is not None for r in reals), any(r.cached_tokens is not None for r in reals))


def _print_real_verdict(console: Console, diff: CaptureDiff) -> None:
    """The real cache reads against the simulator's; a recorded usage without a cache read is said, never read as 0."""
    if uncounted := diff.without_cached:
        console.print(f"its recorded usage does not report cached tokens ({len(uncounted)} of {len(diff.requests)} "
                      "requests): the real prompt tokens are shown beside the simulator's, the cached tokens are the "
                      "simulator's", soft_wrap=True)
    if not diff.recorded:
        return
    wrong = diff.disagreements
    verdict = "all agree" if not wrong else f"{len(wrong)} disagree (captures {turn_ranges(r.number for r in wrong)})"
    near = sum(1 for r in diff.recorded if r.real is not None and r.real.agrees(r.cached_tokens) and r.real.difference(r.cached_tokens))
    close = f"; {near} within one cache block or the tokenizers' slack (≈)" if near else ""
    console.print(f"real cached tokens beside the simulator's: {verdict}{close}", soft_wrap=True)


def write_line(out: TextIO, record: object) -> None:
    """One request (``request_record``) as one JSON line, flushed: a reader (``| head -1``, a log shipper) has it
    at once."""
    write_json_line_safely(record, out)


def print_heading(console: Console, result: TraceResult) -> None:
    # soft_wrap: the session id is never broken or cropped to fit the terminal
    # wrapped by rich between words, never by the terminal inside one (issue 31 §3)
    console.print(f"[bold]{markup_safe(result.session_id)}[/] · {markup_safe(result.source)} · {result.heading_count()}")
    console.print(markup_safe(layout_note(result.layout)))
    console.print(markup_safe(timezone_note(result.timezone, result.timezone_source)))
    for note in result.notes:
        console.print(markup_safe(note_line(note)))


def note_line(note: str) -> str:
    """A note of the result as printed: a warning says ``warning: …`` (never ``note: warning: …``), the rest ``note: …``."""
    return note if note.startswith(WARNING) else f"note: {note}"


def bar_cells(row: TurnRow, scale: int, width: int) -> tuple[int, int]:
    """``row``'s prompt drawn ``width`` characters wide at full ``scale`` (tokens): (cached characters, new ones).
    Length is proportional to the prompt tokens; a prompt shows at least one character."""
    return token_cells(row.prompt_tokens, row.cached_tokens, scale, width)


def token_cells(prompt_tokens: int, cached_tokens: int, scale: int, width: int) -> tuple[int, int]:
    """``bar_cells`` of a prompt of ``prompt_tokens`` with ``cached_tokens`` cached."""
    if scale <= 0 or prompt_tokens <= 0:
        return 0, 0
    total = max(1, round(prompt_tokens * width / scale))
    cached = min(total, round(cached_tokens * width / scale))
    return cached, total - cached


def wrap_entries(entries: list[str], room: int) -> list[str]:
    """``entries`` joined by ", " into lines of at most ``room`` terminal cells, breaking only between entries (an
    entry longer than ``room`` gets a line of its own, whole: an identifier is never cut)."""
    lines: list[str] = []
    for index, entry in enumerate(entries):
        piece = entry if index == len(entries) - 1 else entry + ","
        if lines and cell_len(lines[-1]) + 1 + cell_len(piece) <= room:
            lines[-1] += " " + piece
        else:
            lines.append(piece)
    return lines


def fit_entries(entries: list[str], room: int) -> str:
    """The first of ``entries`` that fit whole in ``room`` terminal cells, joined by ", ", then ``…`` when some are
    left out (``--detail`` shows them all): a row stays one line and an entry is shown whole or not at all."""
    shown = ""
    for index, entry in enumerate(entries):
        joined = f"{shown}, {entry}" if shown else entry
        more = index < len(entries) - 1
        if cell_len(joined) + (len(ELIDED) + 2 if more else 0) > room:
            cut = f"{shown}, {ELIDED}" if shown else ELIDED
            return cut if cell_len(cut) <= room else ""
        shown = joined
    return shown


def print_rows(console: Console, result: TraceResult, rows: list[TurnRow]) -> None:
    """The compact view of ``--all``: one row per turn — turn, prompt tokens, cached tokens (zhin's), what the bot
    sent and had cached (its stored usage, when the database has it), the cached/new bar, state rendering, verdict,
    then the largest segments — and a legend.

    Laid out here rather than by a rich Table: the fixed columns come first and keep their width, and the segments,
    last, wrap between entries onto lines aligned under their column (or, on a terminal too narrow for that, onto
    indented lines of their own); so no id is ever cut or folded, and 10⁴ rows cost a string join."""
    print_heading(console, result)
    if not rows:
        return
    scale = max(row.prompt_tokens for row in rows)
    entries = [[f"{terminal_safe(segment)} {tokens:,}" for segment, tokens in row.top_segments] for row in rows]
    numbers = max(len("prompt"), len(f"{scale:,}"))
    turn_width = max(len(REQUEST_HEAD), len(str(max(row.turn for row in rows))))
    state_width = max(len("state"), *(len(row.state_rendering) for row in rows))
    verdict_width = len("ok")
    priced = any(row.cost is not None for row in rows)  # a provider without prices: no cost column
    costs = [format_usd(row.cost.usd if row.cost else None) for row in rows] if priced else []
    cost_width = max(len(WARM_COST_HEAD), *(len(c) for c in costs)) + 1 if priced else 0  # with its gap
    fixed = turn_width + 2 * numbers + cost_width + state_width + verdict_width + 6  # six one-space gaps, the bar's included
    bot = [stored_cells(row.stored) for row in rows] if any(row.stored for row in rows) else []  # no usage: no columns
    bot_width = max(len(BOT_CACHED), *(len(cell) for cells in bot for cell in cells)) if bot else 0
    hidden = bool(bot) and fixed + 2 * (bot_width + 1) + NARROW_BAR > console.width  # the row would not fit: left out
    if hidden:
        bot = []
    fixed += 2 * (bot_width + 1) if bot else 0  # the two columns with their gaps
    widest_line = max((cell_len(", ".join(names)) for names in entries), default=0)
    bar_width = max(NARROW_BAR, min(WIDE_BAR, console.width - fixed - widest_line))
    left = fixed + bar_width
    room = console.width - left - verdict_width  # the segments start after the verdict's column
    cost_head = f"{WARM_COST_HEAD:>{cost_width - 1}} " if priced else ""
    bot_head = f"{BOT_SENT:>{bot_width}} {BOT_CACHED:>{bot_width}} " if bot else ""
    header = (f"{REQUEST_HEAD:>{turn_width}} {'prompt':>{numbers}} {'cached':>{numbers}} {bot_head}{cost_head}{'cache':<{bar_width}} "
              f"{'state':<{state_width}} {'ok':<{verdict_width}}")
    # the column needs room for one entry whole (with ", …" when more follow): else it would hold only "…"
    first = min((cell_len(names[0]) + (len(ELIDED) + 2 if len(names) > 1 else 0) for names in entries if names), default=0)
    title = next((name for name in SEGMENTS_TITLES if cell_len(name) <= room and first <= room), "")
    segments_at = left + verdict_width + max(cell_len(SEGMENTS_TITLES[-1]), first)  # the width that shows the column
    if not title:  # no room for a segment's name: no column (a headerless one would hold only "…"); --detail has them
        room = 0
    # each line as (text, style) parts: plain text where nothing is drawn in colour, styled Text on a terminal;
    # one line per row at any width (the segments cell keeps the entries that fit, issue 31 §3)
    lines: list[list[tuple[str, str]]] = [[(f"{header} {title}".rstrip(), "bold")]]
    for number, (row, names) in enumerate(zip(rows, entries, strict=True)):
        cached_cells, new_cells = bar_cells(row, scale, bar_width)
        cost = f"{costs[number]:>{cost_width - 1}} " if priced else ""
        sent = "".join(f"{cell:>{bot_width}} " for cell in bot[number]) if bot else ""
        line = [(f"{row.turn:>{turn_width}} {row.prompt_tokens:>{numbers},} {row.cached_tokens:>{numbers},} {sent}{cost}", ""),
                (CACHED * cached_cells, "green"), (NEW * new_cells, "yellow"),
                (f"{' ' * (bar_width - cached_cells - new_cells)} {row.state_rendering:<{state_width}} ", ""),
                (ACCEPTED, "") if row.accepted else (REJECTED, "red")]
        segments = fit_entries(names, room) if room else ""
        if segments:
            line.append((" " * verdict_width + segments, ""))
        lines.append(line)
        if not row.accepted:
            lines.append([(" " * (turn_width + 1) + f"{REJECTED} {terminal_safe(row.verdict)}", "red")])
    if console.color_system is None:  # piped: no style is drawn, so the text is written as it is (10⁴ rows at once)
        console.file.write("".join("".join(text for text, _ in line) + "\n" for line in lines))
    else:  # soft_wrap: the layout above already fits the width; nothing is cropped or re-wrapped
        from rich.text import Text

        console.print(Text("\n").join(Text.assemble(*line) for line in lines), soft_wrap=True)
    prompt, cached = sum(row.prompt_tokens for row in rows), sum(row.cached_tokens for row in rows)
    share = cached_share((row.prompt_tokens, row.cached_tokens) for row in rows[1:])
    print_warnings(console, rows)
    console.print(f"{REQUEST_HEAD}: request; prompt, cached: the request zhin assembles from the stored rows "
                  f"({layout_phrase(result.layout)}) · cached{', warm cost' if priced else ''}: {WARM_MEANING} "
                  f"({COLD_ELSEWHERE}) · {CACHED} cached  {NEW} new · bar length ∝ prompt tokens, full width "
                  f"{scale:,} · {ACCEPTED} accepted / {REJECTED} rejected by the offline validator")
    if bot:
        console.print(f"{BOT_SENT}, {BOT_CACHED}: the prompt and cached tokens the bot's provider reported for that "
                      f"request (the usage stored with its reply, as stats cache reads it; {NOT_STORED} none stored)")
    if not title:
        console.print(f"{SEGMENTS_TITLES[0]}: --detail, or at least {segments_at} columns")
    if hidden:
        console.print(f"{BOT_SENT}, {BOT_CACHED}: --detail, or at least {fixed + 2 * (bot_width + 1) + NARROW_BAR} columns")
    billed = CostTotals.of(row.cost for row in rows if row.cost is not None)
    total = (f" · warm input cost {format_usd(billed.usd)} ({format_usd(billed.per_request)} per request)"
             if billed.requests else "")
    console.print(f"{len(rows)} requests: {cached:,} of {prompt:,} prompt tokens cached warm · warm cached share "
                  f"{format_share(share)} (requests after the first, as prefix-diff){total}{stored_total(rows)} · "
                  "--detail for every request's segment table")


def stored_cells(stored: StoredUsage | None) -> tuple[str, str]:
    """A row's bot columns: the prompt and cached tokens its stored usage reports (``NOT_STORED``: none)."""
    if stored is None:
        return NOT_STORED, NOT_STORED
    return tuple(NOT_STORED if value is None else f"{value:,}"  # type: ignore[return-value]
                 for value in (stored.prompt_tokens, stored.cached_tokens))


def stored_total(rows: list[TurnRow]) -> str:
    """The summary's part for the bot's stored usage, over the rows that report both figures ("" when none)."""
    reported = [row.stored for row in rows if row.stored and None not in (row.stored.prompt_tokens, row.stored.cached_tokens)]
    if not reported:
        return ""
    sent = sum(stored.prompt_tokens or 0 for stored in reported)
    cached = sum(stored.cached_tokens or 0 for stored in reported)
    return f" · the bot's stored usage: {cached:,} of {sent:,} prompt tokens cached ({len(reported)} requests)"


def print_warnings(console: Console, rows: list[TurnRow]) -> None:
    """Each distinct warning of the rows once, with the turns it concerns."""
    turns: dict[str, list[int]] = {}
    for row in rows:
        for warning in dict.fromkeys(row.warnings):
            turns.setdefault(warning, []).append(row.turn)
    for warning, where in turns.items():
        label = "request" if len(where) == 1 else "requests"
        console.print(f"[yellow]warning:[/] ({label} {turn_ranges(where)}) {markup_safe(warning)}")


def print_request(console: Console, request: AssembledRequest, show_request: bool, cost: Cost | None = None, *,
                  layout: str = ADR_LAYOUT, stored: StoredUsage | None = None) -> None:
    cells = [[segment.id, segment.kind, f"{segment.weight:g}", "" if segment.messages is None else f"{segment.messages:,}",
              f"{segment.chars:,}", f"{segment.tokens:,}", f"{segment.trimmed:,}" if segment.trimmed else ""]
             for segment in request.segments]
    headers = ["segment", "kind", "weight", "msgs", "chars", "tokens", "trimmed"]
    natural = [max(len(header), *(len(row[i]) for row in cells)) if cells else len(header) for i, header in enumerate(headers)]
    boxed = sum(natural) + 3 * len(headers) + 1 <= console.width
    unboxed = sum(natural) + len(headers) - 1  # the cells the table needs with every column
    narrow = unboxed > console.width
    if narrow:  # the weight column gives way (--json and a wider terminal show it): ids and kinds stay whole
        del headers[2], natural[2]
        cells = [row[:2] + row[3:] for row in cells]
    # A boxed table where it fits; else no box and one space between columns: the segment ids, the kinds and the
    # numbers keep their full width (never cut nor folded).
    table = Table(title=f"request {request.turn} · {markup_safe(request.provider)} · {markup_safe(request.model)} · {request.prompt_tokens:,} prompt tokens ({request.encoding})",
                  title_justify="left", box=HEAVY_HEAD if boxed else None, pad_edge=boxed, collapse_padding=not boxed)
    table.add_column("segment", no_wrap=True, min_width=natural[0])
    table.add_column("kind", no_wrap=True, min_width=natural[1])
    for index, column in enumerate(headers[2:], start=2):
        table.add_column(column, justify="right", no_wrap=True, min_width=natural[index])
    for row in cells:
        table.add_row(*(markup_safe(cell) for cell in row))
    console.print(table)
    if narrow:
        console.print(f"weight: --json, or a terminal of at least {unboxed} columns")
    breakpoints = ", ".join(
        f"{markup_safe(b.label)} @ message {b.message_index}" + ("" if b.explicit else " (implicit)") for b in request.cache_breakpoints
    )
    console.print(f"state changes rendered as: [bold]{request.state_rendering}[/]   "
                  f"headers: {request.full_headers} full, {request.short_headers} short   "
                  f"window: {request.window.messages} messages ({request.window.dropped} before it)")
    console.print(f"cache breakpoints: {breakpoints or 'none'}")
    if cost is not None:
        console.print(f"input cost (cold: this request alone): {format_usd(cost.usd)} ({cost.uncached_tokens:,} uncached, "
                      f"{cost.cached_tokens:,} cached, {cost.cache_write_tokens:,} written to the cache) · "
                      f"{WARM_AND_TIMED_ELSEWHERE}")
    if stored is not None:
        console.print(markup_safe(stored.sentence(layout, request.prompt_tokens)))
    verdict = request.verdict
    if verdict.ok:
        console.print("validator: [green]accepted[/]")
    else:
        console.print(f"validator: [red]{verdict.status}[/] {markup_safe(verdict.message)}")
    for warning in request.warnings:
        console.print(f"[yellow]warning:[/] {markup_safe(warning)}")
    if show_request:
        console.print(f"request body ({markup_safe(layout_note(layout))}):")
        body = terminal_safe_lines(json.dumps(request.request, ensure_ascii=False, indent=2))
        if console.is_terminal:
            from rich.syntax import Syntax  # pygments: only for a highlighted body on a terminal

            console.print(Syntax(body, "json", word_wrap=True))
        else:  # piped: the exact text, never cropped to a terminal width
            console.file.write(body + "\n")
    console.print()
