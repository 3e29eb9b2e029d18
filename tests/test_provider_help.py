"""No ``--provider`` help lists provider names by hand (issue 32): a provider added to the registry — built in or
from a plugin — would be missing from such a list. A help either points to ``zhin providers`` or, like ``report
economy``'s defaults, is computed from the registry."""

from __future__ import annotations

import re
from collections.abc import Iterator

import typer

from zhin_cli._cli import app
from zhin_cli.pipeline.providers import provider_names

DERIVED = {("report", "economy")}  # its help lists its default cases, computed from the specs marked economy


def provider_helps() -> Iterator[tuple[tuple[str, ...], str]]:
    """(command path, help) of every ``--provider`` option of the CLI."""

    def walk(command: object, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], str]]:
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, (*path, name))
        for param in getattr(command, "params", []):
            if "--provider" in getattr(param, "opts", []):
                yield path, getattr(param, "help", None) or ""

    return walk(typer.main.get_command(app), ())


def names_listed(help_text: str) -> list[str]:
    """The registered providers a help names (a wire format such as openai-chat is one word, not a provider)."""
    return sorted(set(re.split(r"[^\w-]+", help_text)) & set(provider_names()))


def without_default(help_text: str) -> str:
    """The help without its ``default: …`` clause: the one provider used when none is named (the code's constant,
    ``pipeline.assemble.DEFAULT_PROVIDER``) is a single value, not a list that a new provider would be missing from."""
    return re.sub(r"default: [^;)]*else (\w[\w-]*)", lambda m: m.group(0)[: -len(m.group(1))], help_text)


def test_no_provider_help_lists_providers_by_hand() -> None:
    from zhin_cli.pipeline.assemble import DEFAULT_PROVIDER

    helps = dict(provider_helps())
    assert {("trace",), ("serve",), ("preset", "probe"), ("report", "window")} <= helps.keys()
    listed = {path: names_listed(without_default(text)) for path, text in helps.items()
              if path not in DERIVED and names_listed(without_default(text))}
    assert listed == {}
    # a default the helps name is the code's own
    assert all(f"else {DEFAULT_PROVIDER})" in text for text in helps.values() if re.search(r"default: [^;)]*else ", text))


def test_report_economy_lists_the_defaults_the_registry_gives() -> None:
    from zhin_cli.tools.report.economy import CASES

    help_text = dict(provider_helps())[("report", "economy")]
    assert f"default: {', '.join(CASES)})" in help_text and names_listed(help_text) == sorted(CASES)


def test_the_reader_sees_a_hand_written_list() -> None:
    """Negative control: the help texts this replaced are caught; a wire format's name is not a provider."""
    assert names_listed("Provider whose cache rules and prices apply (openai, anthropic, deepseek).") == [
        "anthropic", "deepseek", "openai"]
    assert names_listed("Provider profile (openai, openai-reasoning, deepseek, …).") == [
        "deepseek", "openai", "openai-reasoning"]
    assert names_listed("any registered provider of the openai-chat wire format (see `zhin providers`)") == []
    # only the single fallback after "else" in a default clause is left out, never a list
    assert names_listed(without_default("any (see `zhin providers`; default: zhin.yaml's provider, else openai).")) == []
    assert names_listed(without_default("(openai, anthropic; default: zhin.yaml's provider, else openai)")) == [
        "anthropic", "openai"]
