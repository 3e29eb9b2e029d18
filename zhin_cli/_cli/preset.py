"""``zhin preset lint`` and ``zhin preset probe``: import a SillyTavern chat-completion preset and show what it does."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from zhin_cli._cli import (
    ConfigOption,
    DbOption,
    app,
    check_options,
    command_context,
    freeze_loaded,
    handles_errors,
    print_json,
    stdout_console,
)
from zhin_cli.core.errors import EXIT_FOUND
from zhin_cli.core.terminaltext import markup_safe, terminal_safe, terminal_safe_lines

preset_app = typer.Typer(name="preset", help="Import and inspect SillyTavern chat-completion presets.", no_args_is_help=True)
app.add_typer(preset_app, name="preset")

class PostProcessing(StrEnum):
    """ST's Prompt Post-Processing values (``none`` is ST's ""); tools/preset/capture.POST_PROCESSING maps them."""

    none = "none"
    merge = "merge"
    semi = "semi"
    strict = "strict"
    single = "single"


PresetFile = Annotated[Path, typer.Argument(help="A SillyTavern chat-completion preset (.json).")]
STYLES = {"error": "red", "warning": "yellow", "info": "dim"}


@preset_app.command("lint")
@handles_errors
def lint_command(
    file: PresetFile,
    as_json: Annotated[bool, typer.Option("--json", help="One versioned JSON document on stdout.")] = False,
    ignore: Annotated[list[str] | None, typer.Option("--ignore", metavar="CODE", help="Leave out a rule: its code (ZP012) or name (unknown-macro); repeatable. docs/preset-lint.md lists them.")] = None,
) -> None:
    """Check a preset: unknown macros, entries that are never sent, bad depths, cache-breaking macros, unknown keys.

    One finding per line, sorted by line: `FILE:LINE: CODE severity: message`, then the rule's name in brackets
    (as ruff and gcc print theirs).
    Under GitHub Actions each finding is also an annotation at its line, and a table goes to the step summary.

    Exit status: 0 clean (info only), 1 warnings or errors found, 2 usage, 3 the file cannot be read or is not a preset.
    """
    from zhin_cli.core import ghactions
    from zhin_cli.tools.preset.lint import lint

    result = lint(file, ignore=ignore or ())
    if ghactions.enabled():  # built only for a reader: a preset may hold tens of thousands of findings
        ghactions.publish(result.annotations(), result.summary())
    if as_json:
        print_json(result.as_dict())
    else:
        console = stdout_console()
        preset = result.preset
        console.print(f"[bold]{markup_safe(result.file)}[/] · {len(preset.prompts)} prompts · order {markup_safe(preset.order_source)} "
                      f"({sum(e.enabled for e in preset.order)}/{len(preset.order)} enabled) · "
                      f"squash {'on' if preset.squash else 'off'} · post-processing {markup_safe(preset.post_processing or 'none')} · "
                      f"{len(preset.regex_scripts)} regex script(s)", soft_wrap=True)
        for finding in result.findings():
            # one physical line per finding, whatever the terminal width: tools parse it
            console.print(Text(terminal_safe(finding.text()), style=STYLES[finding.severity]), soft_wrap=True)
        counts = result.counts()
        ignored = f" ({len(result.ignored)} rule(s) ignored)" if result.ignored else ""
        console.print(f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} note(s){ignored}")
    if result.failed:
        raise typer.Exit(EXIT_FOUND)


@preset_app.command("probe")
@handles_errors
def probe_command(
    file: PresetFile,
    session: Annotated[str | None, typer.Option("--session", "-s", help="A session .jsonl file, or a session id / key in the database (default: a built-in sample conversation).")] = None,
    provider: Annotated[str | None, typer.Option("--provider", "-p", envvar="ZHIN_PROVIDER", help="Provider profile (see `zhin providers`).")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", envvar="ZHIN_MODEL", help="Model id (default: the stored one, else gpt-4o).")] = None,
    show_request: Annotated[bool, typer.Option("--show-request", help="Also print the wire body zhin assembles from the preset.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One versioned JSON document on stdout.")] = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Show the message skeleton a preset produces for the last request of a session: role, entries/holes, size.

    Exit status: 0 ok, 2 usage, 3 cannot run (bad preset, session or config).
    """
    from zhin_cli.tools.preset.lint import probe

    check_options(provider)
    result = probe(file, session_ref=session, db=db, config_path=config, provider=provider, model=model, cwd=Path.cwd(),
                   after_load=freeze_loaded, context=command_context(db=db))
    if as_json:
        print_json(result.as_dict())
        return
    console = stdout_console()
    table = Table(title=f"{markup_safe(result.file)} · {markup_safe(result.session_id)} turn {result.turn} · {result.provider} · "
                        f"{markup_safe(result.model)}",
                  title_justify="left")
    for column, justify in (("#", "right"), ("role", "left"), ("from", "left"), ("chars", "right"), ("tokens", "right"),
                            ("starts with", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for message in result.messages:
        table.add_row("top" if message.index < 0 else str(message.index), markup_safe(message.role), markup_safe(", ".join(message.labels)),
                      str(message.chars), str(message.tokens), markup_safe(message.preview.replace("\n", "⏎")))
    console.print(table)
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {markup_safe(warning)}")
    if show_request:
        import json

        console.file.write(terminal_safe_lines(json.dumps(result.request, ensure_ascii=False, indent=2)) + "\n")


@preset_app.command("check-capture")
@handles_errors
def check_capture_command(
    folder: Annotated[Path, typer.Argument(help="The folder `zhin serve --capture` wrote while SillyTavern ran the chat.")],
    preset: Annotated[Path, typer.Option("--preset", help="The chat-completion preset ST used (.json, as ST exports it).")],
    chat: Annotated[Path, typer.Option("--chat", help="ST's chat file (.jsonl, as ST exports it).")],
    card: Annotated[list[Path] | None, typer.Option("--card", help="The character card: V1/V2/V3 JSON, or a PNG with the card in its ccv3/chara chunk. Repeatable for a group chat: every member's card.")] = None,
    group: Annotated[Path | None, typer.Option("--group", help="ST's group file (groups/<id>.json) of a group chat: every member's requests are checked, in the group's card mode (swap or join).")] = None,
    lore: Annotated[list[Path] | None, typer.Option("--lore", help="A World Info book (.json, as ST exports it from worlds/); repeatable. A book named as the chat's (chat_metadata.world_info) or the card's (extensions.world) is that one, any other a global book; a single file named as no book is the one book the chat or cards name. The card's embedded character_book is read when no file stands for it. In a group chat a member's book is in that member's requests only.")] = None,
    st_settings: Annotated[Path | None, typer.Option("--st-settings", help="ST's settings.json: its world_info_settings (scan depth, include names, recursion, case, whole words, budget, character strategy) are used. Default: ST's defaults.")] = None,
    scan_depth: Annotated[int | None, typer.Option("--scan-depth", min=0, max=1000, help="World Info scan depth (ST's default 2); overrides --st-settings.")] = None,
    persona: Annotated[str | None, typer.Option("--persona", help="The persona's name (default: the name on the chat's first user message).")] = None,
    persona_description: Annotated[str, typer.Option("--persona-description", help="The persona's description, or @FILE to read it from a file.")] = "",
    post_processing: Annotated[PostProcessing | None, typer.Option("--post-processing", case_sensitive=False, help="ST's Prompt Post-Processing (a connection setting, not in the preset): none, merge, semi, strict or single. Default: what the preset file says.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One versioned JSON document on stdout.")] = False,
) -> None:
    """Check SillyTavern's captured requests against zhin's, turn by turn, with what zhin adds by design removed.

    For each capture: find the turn of the chat it was sent for, assemble zhin's request for that turn with the same preset, card, persona, World Info books and Author's Note (the chat's metadata), take out zhin's own additions (history headers, its system segments, the scene line) by zhin's attribution, and compare the messages byte for byte. A group chat (--group, every member's --card) is checked member by member. Each remaining difference is a departure: turn, message indices, role, the preset entry it came from, the first differing byte, a category where zhin can tell. Chat variables and names behaviour differ by design and are listed apart; sampling keys are ignored (docs/sillytavern.md).

    Exit status: 0 no departure, 1 departures, 2 usage, 3 cannot run (unreadable file, no capture matching a turn).
    """
    from zhin_cli.tools.preset.capture import POST_PROCESSING, check_capture, report_lines

    description = persona_description
    if description.startswith("@"):  # curl's convention: the text of a file
        from zhin_cli.core.errors import InputError
        from zhin_cli.core.readers import read_text_file

        description = read_text_file(Path(description[1:]), InputError, "persona description").removesuffix("\n")
    from dataclasses import replace

    from zhin_cli.pipeline.preset.worldinfo import Settings
    from zhin_cli.tools.preset.capture import read_world_settings

    world_settings = read_world_settings(st_settings) if st_settings is not None else Settings()
    if scan_depth is not None:
        world_settings = replace(world_settings, depth=scan_depth)
    result = check_capture(folder, preset=preset, chat=chat, card=card or [], group=group, lore=lore or [], persona=persona,
                           persona_description=description, world_settings=world_settings,
                           post_processing=None if post_processing is None else POST_PROCESSING[post_processing.value])
    if as_json:
        print_json(result.as_dict())
    else:
        for line in report_lines(result):  # notes quote lorebook comments, capture file names, keys: all input
            typer.echo(terminal_safe(line))
    if result.departures:
        raise typer.Exit(EXIT_FOUND)
