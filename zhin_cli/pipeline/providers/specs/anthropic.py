"""Anthropic Messages: the provider, and the model tables its profile, renderer and validator share
(docs/spec/providers.md §2): which models take mid-conversation system messages, which refuse prefill, the minimum
cacheable prefix by model."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase

from zhin_cli.pipeline.providers.capabilities import CacheRules, Capabilities, ProviderSpec

WIRE = "anthropic-messages"
MAX_BREAKPOINTS = 4
# Models documented to accept mid-conversation system messages (providers.md §2.1): data, not code. One list for the
# profile, the renderer and the validator (validate/anthropic.py reads it): fnmatch patterns against the lower-cased
# model id. (The renderer had regex prefixes of its own, so a dated or longer id — claude-opus-4-8-20260528,
# claude-opus-4-80 — was sent mid-conversation system messages that the validator, and the API, refuse.)
MID_SYSTEM_MODELS: tuple[str, ...] = ("claude-opus-4-8", "claude-fable-5*", "claude-mythos-5*")


def accepts_mid_system(model: str) -> bool:
    """Whether ``model`` takes ``role: "system"`` inside ``messages``; everything else answers "role 'system' is not
    supported on this model"."""
    lowered = model.lower()
    return any(fnmatchcase(lowered, pattern) for pattern in MID_SYSTEM_MODELS)


# Prefill (a trailing assistant message) is rejected from this Claude version on (§2.3 [R]:
# "Claude 4.6 and later models reject a trailing assistant message"). The version comes from the model
# id via _VERSION_PATTERNS; an id without a recognisable version is treated as accepting prefill
# (reject only on evidence). Resulting family table:
#
#   model id                                               version   trailing assistant
#   claude-3-haiku-…, claude-3-5-sonnet-…, claude-3-7-…    3.x       accepted
#   claude-opus-4-20250514, claude-sonnet-4-…              4.0       accepted
#   claude-opus-4-1, claude-sonnet-4-5, claude-haiku-4-5   4.1–4.5   accepted
#   claude-opus-4-6, claude-sonnet-4-6, claude-opus-4-7,   4.6–4.8   rejected
#   claude-opus-4-8
#   claude-sonnet-5, claude-opus-5-5, claude-fable-5-1,    5.x       rejected
#   claude-mythos-5, …
#   claude-mythos-preview, anything unparsable             unknown   accepted
PREFILL_REJECTED_FROM: tuple[int, int] = (4, 6)
_VERSION_PATTERNS: tuple[re.Pattern[str], ...] = (
    # current ids: family first, then major[-minor]; a dated suffix (-20250514) is not a minor version
    re.compile(r"claude-(?:opus|sonnet|haiku|fable|mythos)-(\d+)(?:[-.](\d{1,2})(?!\d))?(?!\d)"),
    # Claude 3.x ids: version first (claude-3-5-sonnet-20241022, claude-3-opus-20240229)
    re.compile(r"claude-(\d+)(?:[-.](\d))?-(?:opus|sonnet|haiku)"),
)


def claude_version(model: str) -> tuple[int, int] | None:
    """(major, minor) parsed from a Claude model id, or None when the id carries no version."""
    lowered = model.lower()
    for pattern in _VERSION_PATTERNS:
        match = pattern.search(lowered)
        if match:
            return int(match.group(1)), int(match.group(2) or 0)
    return None


def rejects_prefill(model: str) -> bool:
    """Whether ``model`` refuses a trailing assistant message (prefill): the profile's ``prefill`` and the
    validator's 400 both follow it."""
    version = claude_version(model)
    return version is not None and version >= PREFILL_REJECTED_FROM


# Minimum cacheable prompt length by model, where it is not the profile's 1,024 (providers.md §2.5, newest docs text
# seen): 512 for Opus 5 / Fable 5 / Mythos 5 and their 5.x versions; 2,048 for Mythos Preview and Opus 4.7; 4,096 for
# Opus 4.6, Opus 4.5 and Haiku 4.5. First match wins.
CACHE_MINIMUMS: tuple[tuple[str, int], ...] = (
    (r"^claude-mythos-preview", 2048),
    (r"^claude-(opus|fable|mythos)-5", 512),
    (r"^claude-opus-4-7", 2048),
    (r"^claude-(opus-4-6|opus-4-5|haiku-4-5)", 4096),
)


@dataclass(frozen=True)
class _AnthropicCapabilities(Capabilities):
    """The Anthropic profile: ``prefill`` follows the model's Claude version (``rejects_prefill``'s table,
    §2.3), decided here once when the profile is resolved for a model — before ``zhin.yaml`` overrides, which
    ``resolve_profile`` applies after — so the renderer, like every other, reads only ``profile.prefill``."""

    def for_model(self, model: str) -> Capabilities:
        profile = super().for_model(model)
        if accepts_mid_system(model):
            profile = replace(profile, mid_conversation_system="system")
        return replace(profile, prefill=False) if rejects_prefill(model) else profile


SPECS: tuple[ProviderSpec, ...] = (
    _AnthropicCapabilities(
        name="anthropic",
        wire=WIRE,
        validator="anthropic-messages",
        mid_conversation_system="none",
        mid_system_models=MID_SYSTEM_MODELS,
        cache=CacheRules(mechanism="explicit", min_tokens=1024, step_tokens=1, max_breakpoints=MAX_BREAKPOINTS),
        # the minimum cacheable prefix by model (providers.md §2.5): below it nothing is cached, no error
        model_rules=tuple((pattern, {"cache": CacheRules(mechanism="explicit", min_tokens=minimum, step_tokens=1,
                                                         max_breakpoints=MAX_BREAKPOINTS)})
                          for pattern, minimum in CACHE_MINIMUMS),
        description="Anthropic Messages: top-level system, tool_result first, state changes as user text "
        "(role system only where allow-listed models accept it)",
        display="Anthropic",
        default_model="claude-sonnet-5",
        model_prefixes=("claude-",),
        economy=True,
        economy_min_tokens=1024,  # Claude Sonnet 5's minimum cacheable prefix (providers.md §2.5)
        wire_default=True,
    ),
)
