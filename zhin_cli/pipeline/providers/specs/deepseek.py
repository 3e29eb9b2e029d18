"""DeepSeek: OpenAI-shaped, with its own validator, and the R1-era ordering rules for the models that had them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from zhin_cli.pipeline.providers.capabilities import CacheRules, Capabilities, ProviderSpec

# Models with the R1-era ``deepseek-reasoner`` ordering rules (Jan–Apr 2025, docs/spec/providers.md §4.1): one
# leading system message, user and assistant alternating from a user turn, no trailing assistant. Today's
# ``deepseek-reasoner`` alias is V4 thinking mode, where they are not known to apply, so it is not listed;
# ``deepseek-reasoner-r1`` is our name for the R1-era endpoint. The validator reads the same tuple.
R1_ERA_MODELS: tuple[str, ...] = ("deepseek-reasoner-r1",)
R1_ERA_RULES: dict[str, Any] = {"alternation": "merge", "system_only_at_start": True, "prefill": False}
_configured_r1_models: tuple[str, ...] = ()


def set_r1_era_models(models: Iterable[str]) -> None:
    """Add model ids (beyond ``R1_ERA_MODELS``) that get the R1-era rules — the deepseek profile's rendering and
    the validator's ordering checks (validate/deepseek.py) — e.g. from ``zhin.yaml``."""
    global _configured_r1_models
    _configured_r1_models = tuple(models)


def is_r1_era(model: str) -> bool:
    return model in R1_ERA_MODELS or model in _configured_r1_models


@dataclass(frozen=True)
class _DeepSeekCapabilities(Capabilities):
    """The DeepSeek profile: a model the validator checks with the R1-era rules (``is_r1_era``: ``R1_ERA_MODELS``
    and the ids added with ``set_r1_era_models``) is rendered with them — one list decides both, when the profile
    is resolved for the model (``zhin.yaml`` overrides apply after)."""

    def for_model(self, model: str) -> Capabilities:
        profile = super().for_model(model)
        return replace(profile, **R1_ERA_RULES) if is_r1_era(model) else profile

    def resolution_key(self, model: str) -> tuple[object, ...]:
        return (is_r1_era(model),)  # set_r1_era_models changes what for_model answers


SPECS: tuple[ProviderSpec, ...] = (
    _DeepSeekCapabilities(
        name="deepseek",
        wire="openai-chat",
        validator="deepseek-chat",
        mid_conversation_system="none",
        cache=CacheRules(mechanism="automatic", min_tokens=64, step_tokens=64, lifetime_seconds=3600),
        # ST's DeepSeek source runs semi_tools post-processing: no name, example turns say "Name: " in the text
        example_names=False,
        description="DeepSeek: state changes downgraded to user messages by default",
        display="DeepSeek",
        default_model="deepseek-chat",  # 64-token units: the economy case's documented rules
        model_prefixes=("deepseek-",),
        economy=True,
    ),
)
