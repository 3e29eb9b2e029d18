"""``zhin providers``: the capability table, as the assembler will use it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer

from zhin_cli._cli import app, handles_errors, open_command_context, print_json, print_records, stdout_console
from zhin_cli.core.terminaltext import terminal_safe
from zhin_cli.pipeline.providers import PROVIDERS, Capabilities, provider_names, resolve_profile


def profile_dict(profile: Capabilities) -> dict[str, object]:
    """One provider as ``--json`` shows it: every field of its spec but the model rules, and who registered it
    (``builtin``, or a plugin). Fields are only ever added (``version: 1``)."""
    data = dataclasses.asdict(profile)
    data.pop("model_rules")
    data["owner"] = PROVIDERS.owners.get(profile.name, "builtin")
    return data


@app.command("providers")
@handles_errors
def providers_command(
    model: Annotated[str | None, typer.Option("--model", "-m", help="Show each profile as resolved for this model id.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout.")] = False,
    config: Annotated[Path | None, typer.Option("--config", "-c", envvar="ZHIN_CONFIG", help="A zhin.yaml whose plugins add providers: they are listed too (owner: the plugin).")] = None,
) -> None:
    """List the provider profiles: wire format, validator, how state changes are sent, cache rules."""
    if config is not None:  # a config the user named: its plugins run, their providers are listed
        open_command_context(config)
    profiles = [resolve_profile(name, model) if model else PROVIDERS[name] for name in provider_names()]
    if as_json:
        print_json({"version": 1, "model": model, "providers": [profile_dict(p) for p in profiles]})
        return
    rows: list[list[str]] = []
    for p in profiles:
        quirks = [name for name, on in (("held during tool loops", p.hold_during_tool_loop), ("one call per message", p.single_tool_call),
                                         ("9-char tool ids", p.tool_call_id == "alnum9"), ("system only first", p.system_only_at_start),
                                         ("no null content", p.null_content == "empty")) if on]
        cache = ("none" if p.cache.mechanism == "none" else
                 f"{p.cache.mechanism} ≥{p.cache.min_tokens}/{p.cache.step_tokens}, lifetime {p.cache.lifetime_seconds:,} s")
        default = p.default_model or "any (serves any model)"
        rows.append([terminal_safe(cell) for cell in (
            p.name, PROVIDERS.owners.get(p.name, "builtin"), default, p.wire, p.validator, p.mid_conversation_system,
            p.wire_model.system_place or f"{p.system_prompt_role} message", p.alternation, cache, ", ".join(quirks))])
    print_records(stdout_console(), ["provider", "owner", "default model", "wire", "validator", "state changes",
                                     "system prompt", "same-role turns", "cache", "quirks"], rows)
