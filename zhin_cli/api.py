"""zhin's public API: everything a plugin or a library user imports, in one module (docs/api.md).

``from zhin_cli.api import TextSegment, register_source, Pipeline`` keeps working while zhin's internal modules
move: a name listed in ``__all__`` is removed only with a new :data:`API_VERSION` (tests/test_api.py holds the
list). Importing this module is cheap: each name is imported from its home module the first time it is read, so a
segment plugin does not load the eval runner or the server.

A plugin is a function ``register(plugin)`` named in ``zhin.yaml`` (``plugins: [my_plugin.py]``, ``module:function``
or ``entry:<name>`` for an installed package's ``[project.entry-points."zhin"]``). ``plugin`` is a :data:`Plugin`;
whatever the plugin registers while it loads — segments through ``plugin.register``, and anything through the
``register_*`` functions and decorators below — is owned by it and removed when it is released.

No zhin_cli module imports this one (tests/test_api.py): it sits above the layers, like the command line.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

API_VERSION = 1

# name → home module (the attribute has the same name unless written "module:attr").
_HOMES: dict[str, str] = {
    # errors
    "ZhinError": "zhin_cli.core.errors", "ConfigError": "zhin_cli.core.errors", "InputError": "zhin_cli.core.errors",
    "UsageError": "zhin_cli.core.errors",
    # the registry type and its one rule
    "Registry": "zhin_cli.core.registry", "DuplicateName": "zhin_cli.core.registry",
    # sessions
    "Session": "zhin_cli.core.model", "Actor": "zhin_cli.core.model", "UserMessage": "zhin_cli.core.model",
    "AssistantMessage": "zhin_cli.core.model", "ToolCall": "zhin_cli.core.model",
    "ToolResultMessage": "zhin_cli.core.model", "EventMessage": "zhin_cli.core.model",
    "SummaryMessage": "zhin_cli.core.model", "SceneFacts": "zhin_cli.core.model", "BotFacts": "zhin_cli.core.model",
    "Summary": "zhin_cli.core.model",
    "load_session": "zhin_cli.store", "SessionSource": "zhin_cli.store", "register_source": "zhin_cli.store",
    "SOURCES": "zhin_cli.store", "line_type": "zhin_cli.store.jsonl", "LINE_TYPES": "zhin_cli.store.jsonl",
    # segments and the plugin object
    "PromptSegment": "zhin_cli.pipeline.segments", "TextSegment": "zhin_cli.pipeline.segments",
    "SegmentInput": "zhin_cli.pipeline.segments", "RuntimeView": "zhin_cli.pipeline.segments",
    "SessionView": "zhin_cli.pipeline.segments", "Retention": "zhin_cli.pipeline.segments",
    "KINDS": "zhin_cli.pipeline.segments", "Plugin": "zhin_cli.pipeline.segments:Generation",
    # the pipeline
    "Pipeline": "zhin_cli.pipeline.facade", "AssembledRequest": "zhin_cli.pipeline.assemble",
    "Config": "zhin_cli.pipeline.config", "load_config": "zhin_cli.pipeline.config",
    "PriceTable": "zhin_cli.pipeline.prices", "Price": "zhin_cli.pipeline.prices",
    "load_prices": "zhin_cli.pipeline.prices", "RunContext": "zhin_cli.pipeline.context",
    # providers, renderers, validators, wire formats
    "Capabilities": "zhin_cli.pipeline.providers", "CacheRules": "zhin_cli.pipeline.providers",
    "RenderedRequest": "zhin_cli.pipeline.providers", "RenderedPart": "zhin_cli.pipeline.providers",
    "PROFILES": "zhin_cli.pipeline.providers", "register_profile": "zhin_cli.pipeline.providers",
    "ProviderSpec": "zhin_cli.pipeline.providers", "PROVIDERS": "zhin_cli.pipeline.providers",
    "register_provider": "zhin_cli.pipeline.providers", "provider": "zhin_cli.pipeline.providers",
    "provider_names": "zhin_cli.pipeline.providers", "for_wire": "zhin_cli.pipeline.providers",
    "register_prices": "zhin_cli.pipeline.prices", "PRICE_ROWS": "zhin_cli.pipeline.prices",
    "RENDERERS": "zhin_cli.pipeline.providers", "register_renderer": "zhin_cli.pipeline.providers",
    "Verdict": "zhin_cli.pipeline.validate", "VALIDATORS": "zhin_cli.pipeline.validate",
    "register_validator": "zhin_cli.pipeline.validate",
    "WireFormat": "zhin_cli.wire", "Block": "zhin_cli.wire", "WIRES": "zhin_cli.wire", "register_wire": "zhin_cli.wire",
    # SillyTavern macros
    "macro": "zhin_cli.pipeline.preset.macros", "Arity": "zhin_cli.pipeline.preset.macros",
    "MACROS": "zhin_cli.pipeline.preset.macros",
    # usage, eval, serve, economy
    "NormalizedUsage": "zhin_cli.cache.usage", "usage_kind": "zhin_cli.cache.usage",
    "USAGE_KINDS": "zhin_cli.cache.usage",
    "assertion": "zhin_cli.tools.eval.registry", "transform": "zhin_cli.tools.eval.registry",
    "ASSERTIONS": "zhin_cli.tools.eval.registry", "TRANSFORMS": "zhin_cli.tools.eval.registry",
    "step": "zhin_cli.tools.eval.timeline", "STEPS": "zhin_cli.tools.eval.timeline",
    "Outcome": "zhin_cli.tools.eval.registry", "ProviderRun": "zhin_cli.tools.eval.registry",
    "EvalOptions": "zhin_cli.tools.eval.runner", "run_eval": "zhin_cli.tools.eval.runner",
    "Dialect": "zhin_cli.tools.serve.server", "register_dialect": "zhin_cli.tools.serve.server", "DIALECTS": "zhin_cli.tools.serve.server",
    "ProviderCase": "zhin_cli.tools.report.economy", "register_case": "zhin_cli.tools.report.economy", "CASES": "zhin_cli.tools.report.economy",
}

__all__ = [  # the stable names: removing one needs a new API_VERSION (tests/test_api.py keeps the list)
    "API_VERSION", "ZhinError", "ConfigError", "InputError", "UsageError", "Registry", "DuplicateName", "Session",
    "Actor", "UserMessage", "AssistantMessage", "ToolCall", "ToolResultMessage", "EventMessage", "SummaryMessage",
    "SceneFacts", "BotFacts", "Summary", "load_session", "SessionSource", "register_source", "SOURCES", "line_type",
    "LINE_TYPES", "PromptSegment", "TextSegment", "SegmentInput", "RuntimeView", "SessionView", "Retention", "KINDS",
    "Plugin", "Pipeline", "AssembledRequest", "Config", "load_config", "PriceTable", "Price", "load_prices",
    "RunContext", "Capabilities", "CacheRules", "RenderedRequest", "RenderedPart", "PROFILES", "register_profile",
    "ProviderSpec", "PROVIDERS", "register_provider", "provider", "provider_names", "for_wire", "register_prices",
    "PRICE_ROWS", "RENDERERS", "register_renderer", "Verdict", "VALIDATORS", "register_validator", "WireFormat",
    "Block", "WIRES", "register_wire", "macro", "Arity", "MACROS", "NormalizedUsage", "usage_kind", "USAGE_KINDS",
    "assertion", "transform", "ASSERTIONS", "TRANSFORMS", "step", "STEPS", "Dialect", "register_dialect", "DIALECTS",
    "ProviderCase", "register_case", "CASES", "Outcome", "ProviderRun", "EvalOptions", "run_eval",
]

if TYPE_CHECKING:  # what type checkers and editors see; at run time each name is imported on first use
    from zhin_cli.cache.usage import USAGE_KINDS, NormalizedUsage, usage_kind
    from zhin_cli.core.errors import ConfigError, InputError, UsageError, ZhinError
    from zhin_cli.core.model import (
        Actor,
        AssistantMessage,
        BotFacts,
        EventMessage,
        SceneFacts,
        Session,
        Summary,
        SummaryMessage,
        ToolCall,
        ToolResultMessage,
        UserMessage,
    )
    from zhin_cli.core.registry import DuplicateName, Registry
    from zhin_cli.pipeline.assemble import AssembledRequest
    from zhin_cli.pipeline.config import Config, load_config
    from zhin_cli.pipeline.context import RunContext
    from zhin_cli.pipeline.facade import Pipeline
    from zhin_cli.pipeline.preset.macros import MACROS, Arity, macro
    from zhin_cli.pipeline.prices import PRICE_ROWS, Price, PriceTable, load_prices, register_prices
    from zhin_cli.pipeline.providers import (
        PROFILES,
        PROVIDERS,
        RENDERERS,
        CacheRules,
        Capabilities,
        ProviderSpec,
        RenderedPart,
        RenderedRequest,
        for_wire,
        provider,
        provider_names,
        register_profile,
        register_provider,
        register_renderer,
    )
    from zhin_cli.pipeline.segments import KINDS, PromptSegment, Retention, RuntimeView, SegmentInput, SessionView, TextSegment
    from zhin_cli.pipeline.segments import Generation as Plugin
    from zhin_cli.pipeline.validate import VALIDATORS, Verdict, register_validator
    from zhin_cli.store import SOURCES, SessionSource, load_session, register_source
    from zhin_cli.store.jsonl import LINE_TYPES, line_type
    from zhin_cli.tools.eval.registry import ASSERTIONS, TRANSFORMS, Outcome, ProviderRun, assertion, transform
    from zhin_cli.tools.eval.runner import EvalOptions, run_eval
    from zhin_cli.tools.eval.timeline import STEPS, step
    from zhin_cli.tools.report.economy import CASES, ProviderCase, register_case
    from zhin_cli.tools.serve.server import DIALECTS, Dialect, register_dialect
    from zhin_cli.wire import WIRES, Block, WireFormat, register_wire


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, _, attr = home.partition(":")
    value = getattr(importlib.import_module(module), attr or name)
    globals()[name] = value  # the next read is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
