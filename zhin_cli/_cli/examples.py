"""The examples every ``--help`` ends with, and the conventional metavars, applied where the commands are built.

Kept in one table rather than in each command's docstring so that every command — also one another module adds
later — gets the same "Examples:" block and the same ``SESSION``/``FILE``/``INT`` names without an edit to its
module, and so that one test (tests/test_cli_conventions.py) can run every line: each is a real command that runs,
as written, from the repository root on its own fixtures after ``zhin import fixtures/*.jsonl``. A line may end
with ``# exit N`` (the code it is documented to return there) and may redirect stdout with ``> FILE`` (a later line
of the same command reads it). Nothing here imports more than typer's own core: this module loads on every start.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Callable
from types import SimpleNamespace
from typing import TYPE_CHECKING

from typer._click.core import Command, Context, Parameter
from typer.core import TyperArgument, TyperGroup, TyperOption

if TYPE_CHECKING:
    from typer._click.shell_completion import CompletionItem

GROUP_KEY = "icqq:8596238:group:1048877509"  # the busy group of fixtures/group-busy.jsonl (and the demo database)
PRIVATE_KEY = "icqq:8596238:private:10002"  # fixtures/private-chat.jsonl

# Command path (as typed after ``zhin``) → example lines, in the order a person would try them.
EXAMPLES: dict[str, list[str]] = {
    "": [
        "zhin import fixtures/group-busy.jsonl fixtures/private-chat.jsonl --db demo.sqlite",
        f"zhin trace {GROUP_KEY} --db demo.sqlite --turn 4",
        "zhin prefix-diff fixtures/",
    ],
    "import": [
        "zhin import fixtures/legacy-upstream.jsonl --db other.sqlite",
        "zhin import --replace fixtures/group-busy.jsonl",
        "zhin import --from sillytavern fixtures/st/chat.jsonl --card fixtures/st/card.json --db st.sqlite",
    ],
    "export": [
        f"zhin export {PRIVATE_KEY} -o private.jsonl",
        "zhin export fixtures/legacy-upstream.jsonl",
    ],
    "sessions": [
        "zhin sessions",
        "zhin sessions --json",
    ],
    "completion": [
        "zhin completion bash",
        "zhin completion zsh",
        "zhin completion fish",
    ],
    "eval": [
        "zhin eval eval_cases/adr-1-ten-messages.yaml",
        "zhin eval eval_cases/adr-2-admin-promotion.yaml --provider anthropic --json",
        "zhin --allow-plugins eval eval_cases/ --junit eval-junit.xml",
    ],
    "prefix-diff": [
        "zhin prefix-diff fixtures/private-chat.jsonl",
        "zhin prefix-diff fixtures/ --provider anthropic --json",
        "zhin prefix-diff --all --fail-on system_changed",
    ],
    "providers": [
        "zhin providers",
        "zhin providers --model deepseek-reasoner --json",
    ],
    "request-diff": [
        "zhin trace fixtures/private-chat.jsonl --json > openai.json",
        "zhin trace fixtures/private-chat.jsonl --provider deepseek --json > deepseek.json",
        "zhin request-diff openai.json deepseek.json   # exit 1: they differ",
    ],
    "serve": [
        "zhin serve --port 8080",
        "zhin serve --provider deepseek --capture captured/",
    ],
    "trace": [
        "zhin trace fixtures/private-chat.jsonl",
        f"zhin trace {GROUP_KEY} --turn 4 --show-request",
        "zhin trace fixtures/group-busy.jsonl --all --provider anthropic --json",
    ],
    "trust": [
        "zhin trust eval_cases/adr-8-plugin-segment.yaml",
        "zhin trust --list",
    ],
    "budget": [
        "zhin budget check",
        "zhin budget update",
    ],
    "budget check": [
        "zhin budget check",
        "zhin budget check --json",
    ],
    "budget update": [
        "zhin budget update",
        "zhin budget update --provider openai --provider anthropic",
    ],
    "schema": [
        "zhin schema config",
        "zhin schema eval-case",
    ],
    "schema config": [
        "zhin schema config > zhin.schema.json",
    ],
    "schema eval-case": [
        "zhin schema eval-case > eval-case.schema.json",
    ],
    "facts": [
        f"zhin facts show {GROUP_KEY}",
        "zhin facts prune --dry-run",
    ],
    "facts show": [
        f"zhin facts show {GROUP_KEY}",
        f"zhin facts show {GROUP_KEY} --json",
    ],
    "facts prune": [
        "zhin facts prune --dry-run",
        "zhin facts prune --json",
    ],
    "fixtures": [
        "zhin fixtures synth --messages 200 -o synth.jsonl",
    ],
    "fixtures synth": [
        "zhin fixtures synth --messages 200 -o synth.jsonl",
        "zhin fixtures synth --seed 7 --members 40 --messages 2000 --tool-rate 0.5 -o busy.jsonl",
    ],
    "preset": [
        "zhin preset lint fixtures/presets/st-default.json",
        "zhin preset probe fixtures/presets/community-zh.json --session fixtures/private-chat.jsonl",
    ],
    "preset lint": [
        "zhin preset lint fixtures/presets/st-default.json",
        "zhin preset lint fixtures/presets/community-zh.json --json   # exit 1: it has warnings",
    ],
    "preset probe": [
        "zhin preset probe fixtures/presets/st-default.json --session fixtures/private-chat.jsonl",
        f"zhin preset probe fixtures/presets/community-zh.json --session {GROUP_KEY} --provider anthropic",
    ],
    "preset check-capture": [
        "zhin preset check-capture fixtures/st/captured/ --preset fixtures/st/preset.json --chat fixtures/st/chat.jsonl"
        " --card fixtures/st/card.json --lore fixtures/st/lore.json --persona-description @fixtures/st/persona.txt",
        "zhin preset check-capture fixtures/st/captured/ --preset fixtures/st/preset.json --chat fixtures/st/chat.jsonl"
        " --json   # exit 1: without the card its fields depart",
    ],
    "report": [
        "zhin report html fixtures/group-busy.jsonl -o report.html",
        "zhin report economy fixtures/group-busy.jsonl",
    ],
    "report html": [
        "zhin report html fixtures/group-busy.jsonl -o report.html",
        f"zhin report html {GROUP_KEY} fixtures/private-chat.jsonl --provider anthropic -o report.html",
        "zhin report html fixtures/ --no-economy -o fixtures.html",
    ],
    "view": [
        "zhin view fixtures/group-busy.jsonl",
        f"zhin view {GROUP_KEY} --port 8765 --provider anthropic",
    ],
    "report window": [
        "zhin report window fixtures/group-busy.jsonl",
        "zhin report window fixtures/group-busy.jsonl --provider anthropic --min-context 40 --json",
    ],
    "report economy": [
        "zhin report economy fixtures/group-busy.jsonl",
        "zhin report economy fixtures/private-chat.jsonl --provider openai --json",
    ],
    "stats": [
        "zhin stats cache",
    ],
    "stats cache": [
        "zhin stats cache",
        "zhin stats cache fixtures/private-chat.jsonl --json",
        "zhin stats cache --days 3 --until 2025-10-31",
    ],
}

HELP_OPTION_NAMES = ["-h", "--help"]  # the root's context_settings: every command inherits them

# Lines that run until stopped (a server): the test checks that they parse, it does not start them.
LONG_RUNNING = ("zhin serve", "zhin view")

# Conventional metavars (clig.dev, git, llm): by option name first, then by argument name, then by type.
OPTION_METAVARS: dict[str, str] = {
    "--db": "FILE|URL",
    "--provider": "PROVIDER",
    "--model": "MODEL",
    "--session": "SESSION",
    "--capture": "DIR",
    "--cache-dir": "DIR",
    "--base": "REF",
    "--head": "REF",
    "--timezone": "ZONE",
    "--until": "DATE",
    "--host": "HOST",
    "--encoding": "ENCODING",
    "--fail-on": "CAUSES",
}
ARGUMENT_METAVARS: dict[str, str] = {
    "session": "SESSION",
    "sessions": "SESSION",
    "files": "FILE",
    "file": "FILE",
    "paths": "PATH",
    "shell": "SHELL",
    "a": "FILE",
    "b": "FILE",
}
TYPE_METAVARS: dict[str, str] = {"int": "INT", "float": "NUMBER", "str": "TEXT", "Path": "FILE", "bool": "BOOLEAN"}


def examples_for(path: str) -> list[str]:
    return EXAMPLES.get(path, [])


def epilog(path: str) -> str | None:
    """The "Examples:" block of ``zhin PATH --help`` (one line per example, kept as written: rich markup escaped)."""
    lines = examples_for(path)
    if not lines:
        return None
    return "Examples:\n" + "\n".join(line.replace("[", "\\[") for line in lines)


def _type_name(annotation: object) -> str:
    if typing.get_origin(annotation) is list:
        (annotation,) = typing.get_args(annotation)
    return getattr(annotation, "__name__", "TEXT")


def metavar_for(param: TyperOption | TyperArgument) -> str:
    """``SESSION``, ``FILE``, ``INT``… for a parameter (``""`` for a flag: it takes no value)."""
    if isinstance(param, TyperOption) and param.is_flag:
        return ""
    descriptor = param.type_descriptor
    if descriptor.is_choice and descriptor.choices:
        return "|".join(str(getattr(choice, "value", choice)) for choice in descriptor.choices)
    if isinstance(param, TyperOption):
        for option in param.opts:
            if option in OPTION_METAVARS:
                return OPTION_METAVARS[option]
    elif param.name in ARGUMENT_METAVARS:
        return ARGUMENT_METAVARS[param.name]
    return TYPE_METAVARS.get(_type_name(descriptor.annotation), "TEXT")


class ConventionalArgument(TyperArgument):
    """A typer argument shown by its metavar alone: ``SESSION`` / ``[FILE]...`` in the usage line, no ``<str>``."""

    def _base_name(self) -> str:
        return (self.metavar or self.name or "").removesuffix("...")

    def display_type_rich(self, ctx: Context) -> str | None:
        return None

    def get_error_hint(self) -> str:
        return self._base_name()

    def _usage_display_name(self) -> str:
        name = self._base_name() if self.required else f"[{self._base_name()}]"
        return name + ("..." if self.nargs != 1 else "")


def completion_kind(param: Parameter) -> str | None:
    """What a TAB completes for this parameter: ``provider`` names, ``preset`` files, ``session`` ids/keys/files."""
    if isinstance(param, TyperOption):
        if "--provider" in param.opts:
            return "provider"
        if "--preset" in param.opts:
            return "preset"
        if "--session" in param.opts:
            return "session"
    elif isinstance(param, TyperArgument) and (param.metavar or "").removesuffix("...") == "SESSION":
        return "session"
    return None


def _completer(kind: str) -> Callable[[Context, Parameter, str], list[CompletionItem]]:
    def complete(ctx: Context, param: Parameter, incomplete: str) -> list[CompletionItem]:
        from zhin_cli._cli.data import shell_completer  # only when a TAB asks

        return shell_completer(kind)(ctx, param, incomplete)

    return complete


_LIST_ITEM = re.compile(r"^\s*([-*•]|\d+[.)])\s")


def reflow(help_text: str | None) -> str | None:
    """A docstring's paragraphs as one line each, for the help formatter to wrap to the terminal: typer keeps a
    docstring's line breaks, so a paragraph written at 120 columns came out broken every other line at 100. A blank
    line still separates paragraphs; a list item or an indented line starts a line of its own."""
    if not help_text:
        return help_text
    paragraphs = []
    for paragraph in re.split(r"\n\s*\n", help_text.strip()):
        lines: list[str] = []
        for line in paragraph.splitlines():
            if lines and not _LIST_ITEM.match(line) and not line.startswith("    "):
                lines[-1] = f"{lines[-1].rstrip()} {line.strip()}"
            else:
                lines.append(line.rstrip())
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def apply_conventions(command: Command, path: str, *, subcommands: bool = True) -> None:
    """Give ``command`` (and, for a group, each of its commands unless ``subcommands`` is false — the lazy root
    builds each when it is looked up) its examples, conventional metavars and a help text re-flowed to the width."""
    command.help = reflow(command.help)
    if not command.epilog:
        command.epilog = epilog(path)
    for param in command.params:
        if isinstance(param, TyperArgument):
            if param.metavar is None:
                base = metavar_for(param)
                param.metavar = base + ("..." if param.nargs != 1 else "")
            param.__class__ = ConventionalArgument
        elif isinstance(param, TyperOption) and param.metavar is None:
            param.metavar = metavar_for(param)
        kind = completion_kind(param)
        if kind is not None and getattr(param, "_custom_shell_complete", None) is None:
            param._custom_shell_complete = _completer(kind)
    # click builds -h/--help itself (a flag typer would show as <bool>): build it now, with zhin's names, and
    # give it no metavar like every other flag
    help_option = command.get_help_option(SimpleNamespace(help_option_names=HELP_OPTION_NAMES))  # type: ignore[arg-type]
    if help_option is not None:
        help_option.metavar = ""
    if subcommands and isinstance(command, TyperGroup):
        for name, sub in command.commands.items():
            apply_conventions(sub, f"{path} {name}".strip())
