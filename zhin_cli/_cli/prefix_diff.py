"""``zhin prefix-diff``: every prompt-cache break, across turns or between two configurations.

The text output is a picture: one short row per turn (common prefix, cached and new tokens, a bar of the three,
the cause), then each distinct unexpected break once with its excerpts (the divergence marked ``⟦``), why a shared
prefix still cached nothing, and a legend of the causes present. Its layout is computed here rather than by rich's
tables, so identifiers (session and segment ids) are never cropped or folded: the bar shrinks to the terminal width
and a cause that does not fit moves to its own line. ``--jsonl`` streams the ``--json`` pairs as they are made.
"""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from zhin_cli._cli import (
    ConfigOption,
    DbOption,
    PresetOption,
    PricesOption,
    app,
    check_options,
    command_context,
    freeze_loaded,
    handles_errors_like_diff,
    print_json,
    print_sources,
    replay_progress,
    stdout_console,
    write_json_line_safely,
)
from zhin_cli.cache.captures import CaptureDiff, CaptureRequest
from zhin_cli.cache.cost import format_share, format_usd
from zhin_cli.cache.diff import (
    CAUSE_MEANINGS,
    CAUSES,
    DEFAULT_FAIL_ON,
    EXPECTED,
    PairDiff,
    PairGroup,
    SessionDiff,
    group_breaks,
    group_uncached,
    turn_ranges,
)
from zhin_cli.core.errors import EXIT_FOUND, UsageError
from zhin_cli.core.parallel import JOBS_HELP
from zhin_cli.core.terminaltext import MARK, markup_safe, terminal_safe
from zhin_cli.tools.diff.prefix import ConfigDiff, PrefixDiffResult, run_prefix_diff

BAR_MIN, BAR_MAX = 10, 40
BAR_FLOOR = 3  # the fewest bar cells, when a cause needs the room
CACHED, SHARED, NEW = "█", "▒", "░"
# the figures' cache (docs/figures.md): every pair's cached tokens and cost are warm, as trace --all's rows
WARM_COST_HEAD = "warm cost"
WARM_SENSE = "each request after every one before it, as in a replay"


@app.command("prefix-diff")
@handles_errors_like_diff
def prefix_diff_command(
    sessions: Annotated[list[str] | None, typer.Argument(help="Sessions: .jsonl files, folders of them, or session ids / keys in the database; or captured request bodies — a capture folder (NNNNN-<route>.json, `zhin serve --capture`) or a JSONL of bodies (docs/captures.md).")] = None,
    provider: Annotated[str | None, typer.Option("--provider", "-p", envvar="ZHIN_PROVIDER", help="Provider profile (see `zhin providers`).")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", envvar="ZHIN_MODEL", help="Model id (default: the model stored with each turn). Not for captured bodies (each names its own).")] = None,
    base: Annotated[str | None, typer.Option("--base", help="Compare two prompt configurations: a zhin.yaml file or a git ref (main, HEAD~1, a commit).")] = None,
    head: Annotated[str | None, typer.Option("--head", help="The configuration to compare against --base (file or git ref).")] = None,
    all_sessions: Annotated[bool, typer.Option("--all", help="Every session in the database.")] = False,
    fail_on: Annotated[str | None, typer.Option("--fail-on", help=f"Comma-separated causes that count as a break (default: all but {', '.join(sorted(EXPECTED))}). Causes: {', '.join(CAUSES)}.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One versioned JSON document on stdout.")] = False,
    as_jsonl: Annotated[bool, typer.Option("--jsonl", help="One JSON object per line, streamed: each pair of turns (with --base/--head: each session), as in --json.")] = False,
    preset: PresetOption = None,
    db: DbOption = None,
    config: ConfigOption = None,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", help=JOBS_HELP)] = None,
    prices: PricesOption = None,
) -> None:
    """Diff consecutive requests byte by byte: where the cached prefix breaks, why, what still hits, and what each request's input costs (when its provider has prices).

Cached tokens and costs are warm: each request after every one before it, as in a replay (docs/figures.md).

    Exit status like diff: 0 no unexpected break, 1 an unexpected break, 2 trouble.
    """
    if as_json and as_jsonl:
        raise UsageError("--json and --jsonl: choose one")
    check_options(provider)
    chosen = [c.strip() for c in fail_on.split(",") if c.strip()] if fail_on is not None else list(DEFAULT_FAIL_ON)
    text = not (as_json or as_jsonl)
    with replay_progress("diffing") as progress:
        result = run_prefix_diff(sessions or [], cwd=Path.cwd(), db=db, config_path=config, provider=provider, model=model,
                                 base=base, head=head, all_sessions=all_sessions, fail_on=chosen, preset=preset,
                                 after_load=freeze_loaded, progress=progress, jobs=jobs,
                                 on_pair=(lambda session, pair: _write_line(session.pair_dict(pair))) if as_jsonl else None,
                                 on_comparison=(lambda comparison: _write_line(comparison.as_dict(chosen))) if as_jsonl else None,
                                 prices_file=prices, context=command_context(db=db, prices_file=prices))
    if as_json:
        print_json(result.as_dict())
    elif text:
        for note in result.notes:  # a model billed at its provider's default row: never silent
            typer.echo(f"zhin: note: {terminal_safe(note)}", err=True)
        _print_header(result)  # once the run succeeded: an error stays the one line on stderr
        print_result(stdout_console(), result)
    _publish(result)
    if result.unexpected:
        raise typer.Exit(EXIT_FOUND)


def _write_line(data: object) -> None:
    """One JSONL line, flushed at once: a reader sees each pair as it is made (``| head -1`` ends the run)."""
    write_json_line_safely(data, sys.stdout)


def _print_header(result: PrefixDiffResult) -> None:
    """The one header line (stderr): the config and database read. With --base/--head, stdout's first line names
    the two configurations (``base … → head …``): stderr names only a database read, never that line again."""
    if result.mode == "turns":
        print_sources(result.config_path, result.db)
    elif result.db is not None:
        print_sources(None, result.db, config_label=COMPARED_CONFIGS)


COMPARED_CONFIGS = "--base and --head (named on stdout)"


def _publish(result: PrefixDiffResult) -> None:
    from zhin_cli.core import ghactions

    if ghactions.enabled():
        from zhin_cli.tools.diff.prefix import github_annotations, github_summary

        ghactions.publish(github_annotations(result), github_summary(result))


# --- the text picture ------------------------------------------------------------------------------


def print_result(console: Console, result: PrefixDiffResult) -> None:
    if result.mode == "turns":
        for session in result.sessions:
            _print_session(console, session, result.fail_on)
        for capture in result.captures:
            _print_capture_usage(console, capture)
        causes = {p.cause for s in result.sessions for p in s.pairs}
    else:
        say(console, f"base [bold]{markup_safe(result.base_label or '')}[/] → head [bold]{markup_safe(result.head_label or '')}[/]")
        for comparison in result.comparisons:
            _print_comparison(console, comparison, result.fail_on)
        # no per-turn rows here: the legend explains the causes of the head's breaks that were listed
        causes = {p.cause for c in result.comparisons if c.head_stability for p in c.head_stability.unexpected(result.fail_on)}
    _print_legend(console, causes, result.fail_on, bars=result.mode == "turns")
    say(console, f"{result.unexpected} unexpected break(s) (fail on: {', '.join(result.fail_on) or 'nothing'})")


def say(console: Console, markup: str) -> None:
    """Print ``markup`` wrapped at spaces to the console's width, never inside a word: an identifier longer than a
    line stays whole on a line of its own (rich would fold it, or crop it)."""
    text = Text.from_markup(markup)
    plain, width = text.plain, console.width
    offsets, start = [], 0
    for word in re.finditer(r"\S+", plain):
        if word.end() - start > width and word.start() > start:
            offsets.append(word.start())
            start = word.start()
    for line in text.divide(offsets):
        line.rstrip()
        console.print(line, soft_wrap=True)


def _cause_label(pair: PairDiff) -> tuple[str, str]:
    """The cause and what it names (a segment, a detail): kept apart so a narrow row can put the second part on
    its own line."""
    if pair.cause in ("system_changed", "messages_changed") and pair.segment:
        return pair.cause, f"in {pair.segment}"
    if pair.cause in ("window_shift", "tools_changed", "model_changed") and pair.detail:
        return pair.cause, f"({pair.detail})"
    return pair.cause, ""


def _bar(pair: PairDiff, scale: int, width: int) -> str:
    """Cached, shared-but-not-cached and not-shared tokens of the request, to the session's largest request."""
    if scale <= 0:
        return " " * width
    cached = round(pair.cached_tokens / scale * width)
    shared = round(max(pair.common_prefix_tokens, pair.cached_tokens) / scale * width)
    total = max(round(pair.prompt_tokens / scale * width), 1 if pair.prompt_tokens else 0)
    shared, total = min(max(shared, cached), width), min(max(total, shared), width)
    cells = (f"[green]{CACHED * cached}[/]" if cached else "") + (f"[yellow]{SHARED * (shared - cached)}[/]" if shared > cached else "")
    cells += f"[dim]{NEW * (total - shared)}[/]" if total > shared else ""
    return cells + " " * (width - total)


def _real_cell(pair: PairDiff) -> str:
    """The provider's real cache read beside the simulator's (``≠``: they disagree), ``-`` where not recorded."""
    if pair.real is None or pair.real.cached_tokens is None:
        return "-"
    return f"{'≠' if not pair.real.agrees(pair.cached_tokens) else ''}{pair.real.cached_tokens:,}"


def _print_rows(console: Console, pairs: list[PairDiff], fail_on: list[str], *, captured: bool = False) -> None:
    if not pairs:
        console.print("  one request: nothing to compare")
        return
    width = console.width
    priced = any(p.cost is not None for p in pairs)  # a provider without prices: no cost column
    real = any(p.real is not None for p in pairs)  # captured bodies with recorded usage: the real read beside
    cells = [(f"{p.from_turn}→{p.to_turn}", f"{p.common_prefix_tokens:,}", f"{p.cached_tokens:,}",
              *([_real_cell(p)] if real else []),
              f"{p.prompt_tokens - p.cached_tokens:,}", *([format_usd(p.cost.usd if p.cost else None)] if priced else []))
             for p in pairs]
    heads = ("capture" if captured else "req", "common", "cached", *(("real",) if real else ()), "new",
             *((WARM_COST_HEAD,) if priced else ()))
    widths = [max(len(h), *(len(row[i]) for row in cells)) for i, h in enumerate(heads)]
    fixed = 2 + sum(widths) + len(widths)  # mark, columns and the space after each
    labels = [_cause_label(p) for p in pairs]
    longest = max(len(cause) + len(rest) + 1 for cause, rest in labels)
    bar_width = max(BAR_MIN, min(BAR_MAX, width - fixed - 2 - longest))
    # a narrow terminal: the bar gives up cells before a cause runs past the width (the terminal would cut it)
    bar_width = min(bar_width, max(BAR_FLOOR, width - fixed - 2 - max(len(cause) for cause, _ in labels)))
    scale = max(p.prompt_tokens for p in pairs)
    head = "  " + " ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(heads, widths, strict=True)))
    console.print(f"[dim]{head} {'tokens'.ljust(bar_width)}  cause[/]", soft_wrap=True)
    column = fixed + bar_width + 2  # where the cause starts
    for pair, row, (cause, rest) in zip(pairs, cells, labels, strict=True):
        unexpected = pair.cause in fail_on
        mark = "[red]✗[/] " if unexpected else "  "
        columns = " ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        style = "red" if unexpected else ("yellow" if pair.cause == "window_shift" else "")
        line = f"{mark}{columns} {_bar(pair, scale, bar_width)}  " + (f"[{style}]{cause}[/]" if style else cause)
        if not rest:
            console.print(line, soft_wrap=True)
        elif column + len(cause) + 1 + len(rest) <= width:
            console.print(f"{line} {markup_safe(rest)}", soft_wrap=True)
        else:  # what it names (a segment id) stays whole: on the next line, under the cause
            console.print(line, soft_wrap=True)
            console.print(" " * min(column, max(0, width - len(rest))) + markup_safe(rest), soft_wrap=True)


def _excerpts(console: Console, first: PairDiff | Mapping[str, object], indent: str = "    ") -> None:
    if isinstance(first, PairDiff):
        before, after, mark = first.before, first.after, first.excerpt_mark
    else:
        index = first.get("excerpt_index", 0)  # (the comparison's first_divergence: str excerpts, an int index)
        before, after, mark = str(first["before"]), str(first["after"]), index if isinstance(index, int) else 0
    for name, text in (("before:", before), ("after: ", after)):  # data, not markup: a Text, so no byte is read as a tag
        console.print(Text.assemble(f"{indent}{name} …", terminal_safe(text[:mark]), (MARK, "reverse"), terminal_safe(text[mark:]), "…"),
                      soft_wrap=True)


def _turns(group: PairGroup, unit: str = "request") -> str:
    turns = group.turns
    return f"{unit}{'s' if len(turns) > 1 else ''} {turn_ranges(turns)}"


def _print_breaks(console: Console, pairs: list[PairDiff], unit: str = "request") -> None:
    """Each distinct unexpected break once: ``15 × system_changed in core.clock (turns 3–17; first shown)``
    (``unit``: ``capture`` for captured bodies, whose numbers are capture numbers)."""
    for group in group_breaks(pairs):
        first = group.first
        count = f"{len(group.pairs)} × " if len(group.pairs) > 1 else ""
        where = f" in {first.segment}" if first.segment else ""
        shown = "; first shown" if len(group.pairs) > 1 else ""
        detail = f" ({first.detail})" if first.detail else ""
        say(console, f"[red]✗ {count}{first.cause}{markup_safe(where)}[/] ({_turns(group, unit)}{shown}): {unit} "
                      f"{first.from_turn}→{first.to_turn} differs at byte {first.common_prefix_bytes:,}{markup_safe(detail)}")
        _excerpts(console, first)


def _print_uncached(console: Console, pairs: list[PairDiff], unit: str = "request") -> None:
    """Why a shared prefix cached nothing, once per reason."""
    for group in group_uncached(pairs):
        count = f"{len(group.pairs)} × " if len(group.pairs) > 1 else ""
        shown = "; first shown" if len(group.pairs) > 1 else ""
        say(console, f"[yellow]0 cached:[/] {count}a prefix is shared but nothing is cached ({_turns(group, unit)}{shown}): "
                      f"{markup_safe(group.first.uncached_reason)}")


def _print_session(console: Console, session: SessionDiff, fail_on: list[str]) -> None:
    count = f"{session.turns} requests (captures {turn_ranges([session.pairs[0].from_turn, *(p.to_turn for p in session.pairs)])})" \
        if session.captured and session.pairs else f"{session.turns:,} request{'s' if session.turns != 1 else ''}"
    say(console, f"[bold]{markup_safe(session.session_id)}[/] · {markup_safe(session.provider)} · {markup_safe(session.model)} · "
                  f"{markup_safe(count)}")
    if session.layout is not None:  # the bot's real bodies are diffed from a capture folder (docs/captures.md)
        from zhin_cli.pipeline.provenance import layout_note

        say(console, markup_safe(layout_note(session.layout)))
    _print_rows(console, session.pairs, fail_on, captured=session.captured)
    unit = "capture" if session.captured else "request"
    _print_breaks(console, session.unexpected(fail_on), unit)
    _print_uncached(console, session.pairs, unit)
    for hint in session.hints.values():
        if hint.kind == "tail_limit":
            say(console, f"[yellow]hint:[/] the window's tail limit moved the history on consecutive requests "
                          f"({len(hint.turns)} time(s)): each move is a cache miss; lower window.cut_to so the window "
                          "moves once per window.max_messages - cut_to messages (hysteresis), or compact")
            continue
        say(console, f"[yellow]hint:[/] segment {markup_safe(hint.segment)} changes between requests ({hint.kind}) "
                      f"in {len(hint.turns)} request(s): it breaks the cached prefix every time")
    summary = session.summary()
    causes = ", ".join(f"{k} {v}" for k, v in summary["causes"].items())
    cost = ""
    if session.costs is not None:
        cost = (f"; warm input cost {format_usd(session.costs.usd)} for {session.costs.requests} requests "
                f"({format_usd(session.costs.per_request)} per request)")
    say(console, f"{summary['pairs']} pairs: {causes or 'none'}; cache hits {summary['cache_hits']}/{summary['pairs']}, "
                  f"cached share {format_share(summary['cached_share'])}{cost}; warm: {WARM_SENSE} (cold: trace --turn N; "
                  "timed: report economy)")
    console.print()


def _print_capture_usage(console: Console, capture: CaptureDiff) -> None:
    """A capture set's cache across conversations, and the real cache reads against the simulator's."""
    for request in capture.first_requests:
        real = request.real.cached_tokens if request.real is not None else None
        if request.cached_tokens or real:
            shown = f" (real {real:,})" if real is not None else ""
            say(console, f"capture {request.number}, the first of {markup_safe(request.conversation)}: cached "
                          f"{request.cached_tokens:,} of {request.prompt_tokens:,}{shown}: the prefix an earlier "
                          "conversation left in the provider's cache (the same system prompt, tools and routing key)")
    recorded, uncounted = capture.recorded, capture.without_cached
    name = markup_safe(terminal_safe(capture.source))
    if uncounted:
        _print_without_cached(console, name, capture, uncounted)
    if not recorded:
        if not uncounted:
            say(console, f"{name}: no usage recorded (no exchange files, no zhin-serve.log): the cached tokens are the "
                         "simulator's")
        console.print()
        return
    sources = ", ".join(sorted({r.real.source for r in recorded if r.real is not None}))
    wrong = capture.disagreements
    verdict = "all agree with the simulator" if not wrong else f"[red]✗ {len(wrong)} disagree with the simulator[/]"
    say(console, f"{name}: real cached tokens recorded for {len(recorded)} of {len(capture.requests)} requests "
                  f"({markup_safe(sources)}): {verdict}{_near_words(recorded)}")
    for request in wrong:
        read = request.real.cached_tokens if request.real is not None else None
        say(console, f"[red]✗[/] capture {request.number}: the provider read {read or 0:,} cached tokens, the simulator "
                      f"{request.cached_tokens:,} (of {request.prompt_tokens:,}; difference {_signed(request)})")
    console.print()


def _signed(request: CaptureRequest) -> str:
    difference = request.real.difference(request.cached_tokens) if request.real is not None else None
    return "unknown" if difference is None else f"{difference:+,}"


def _near_words(recorded: list[CaptureRequest]) -> str:
    """Agreeing reads that are not equal: how many, and the largest difference (agreement allows one cache block)."""
    near = [r for r in recorded if r.real is not None and r.real.agrees(r.cached_tokens) and r.real.difference(r.cached_tokens)]
    if not near:
        return ""
    largest = max(near, key=lambda r: abs(r.real.difference(r.cached_tokens) or 0) if r.real is not None else 0)
    return (f" ({len(near)} within one cache block or the tokenizers' slack, not equal: the largest difference "
            f"{_signed(largest)} at capture {largest.number})")


def _print_without_cached(console: Console, name: str, capture: CaptureDiff, uncounted: list[CaptureRequest]) -> None:
    """Usage recorded without a cache read (llama.cpp, many OpenAI-compatible servers): said, never read as 0."""
    real = sum(r.real.prompt_tokens or 0 for r in uncounted if r.real is not None)
    simulated = sum(r.prompt_tokens for r in uncounted)
    sources = ", ".join(sorted({r.real.source for r in uncounted if r.real is not None}))
    say(console, f"{name}: its recorded usage does not report cached tokens ({len(uncounted)} of "
                 f"{len(capture.requests)} requests, {markup_safe(sources)}): real prompt tokens {real:,}, the "
                 f"simulator's {simulated:,} (per request: trace {name} --all); the cached tokens are the simulator's")


def _print_legend(console: Console, causes: set[str], fail_on: list[str], *, bars: bool) -> None:
    if not causes:
        return
    if bars:
        say(console, f"[dim]tokens:[/] [green]{CACHED}[/] cached (warm)  [yellow]{SHARED}[/] shared with the previous "
            f"request, not cached  [dim]{NEW}[/] not shared")
    shown = [cause for cause in CAUSES if cause in causes]
    name_width = max(len(cause) for cause in shown)
    status_width = max(len("✗ unexpected") if cause in fail_on else len("expected") for cause in shown)
    for cause in shown:
        unexpected = cause in fail_on
        status = ("[red]✗ unexpected[/]" if unexpected else "expected") + " " * (status_width - (12 if unexpected else 8))
        prefix = 2 + name_width + 2 + status_width + 2
        # the meaning wraps in its own column (a hanging indent), at spaces
        lines = textwrap.wrap(CAUSE_MEANINGS[cause], max(20, console.width - prefix)) or [""]
        console.print(f"  {cause.ljust(name_width)}  {status}  {markup_safe(lines[0])}", soft_wrap=True)
        for line in lines[1:]:
            console.print(" " * prefix + markup_safe(line), soft_wrap=True)


def _print_comparison(console: Console, comparison: ConfigDiff, fail_on: list[str]) -> None:
    say(console, f"[bold]{markup_safe(comparison.session_id)}[/]: {len(comparison.differing_turns)}/{comparison.turns} requests differ")
    if comparison.segments:
        rows = [(delta.id, delta.kind, delta.status, f"{delta.chars:+,}", f"{delta.tokens:+,}") for delta in comparison.segments.values()]
        heads = ("segment", "kind", "status", "Δ chars", "Δ tokens")
        widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(heads)]
        for row in (heads, *rows):
            line = "  " + "  ".join(c.rjust(w) if i >= 3 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
            console.print(f"[dim]{markup_safe(line)}[/]" if row is heads else markup_safe(line), soft_wrap=True)
    if comparison.first_divergence:
        first = comparison.first_divergence
        segment = f" ({first['segment']})" if first.get("segment") else ""
        say(console, f"first divergence: request {first['turn']}, byte {first['offset']:,}{markup_safe(segment)}")
        _excerpts(console, first, "  ")
    if comparison.head_stability:
        unexpected = comparison.head_stability.unexpected(fail_on)
        verdict = "[green]stable across requests[/]" if not unexpected else f"[red]{len(unexpected)} unexpected break(s) across requests[/]"
        console.print(f"head configuration: {verdict}")
        _print_breaks(console, unexpected)
        for hint in comparison.head_stability.hints.values():
            say(console, f"[yellow]hint:[/] segment {markup_safe(hint.segment)} changes between requests ({hint.kind})")
    console.print()
