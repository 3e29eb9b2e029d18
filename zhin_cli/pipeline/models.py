"""Which model a request names when a provider is chosen without one (issue 31, finding 2).

A stored reply keeps the model that answered it (``gpt-4o``); replaying it for another provider (``--provider
deepseek``) with that model would name a pair that cannot exist ("Model: gpt-4o via deepseek" in the system
prompt, no price row). So a provider named without a model keeps the stored model only when the model is that
provider's — the built-in price table has a row for it (or a row it extends with ``-``), or its name starts with
one of the provider's known prefixes — and otherwise uses the provider's default model, said once as a
``ZhinNote`` (``zhin: note: …`` on the CLI's stderr). Gateways and local servers (``openai-compatible``, ``vllm``,
``ollama``, ``llama-cpp``, profiles registered at run time) serve any vendor's model: every model is theirs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zhin_cli.core.notes import note
from zhin_cli.pipeline.prices import PRICE_PROVIDERS, builtin_prices

FALLBACK_MODEL = "gpt-4o"  # no provider named and nothing stored: the assembler's historical default


@dataclass(frozen=True)
class ProviderModels:
    """A provider's default model and the prefixes its model names start with."""

    default: str
    prefixes: tuple[str, ...]


# The providers whose model names are known; a default here is the price table's default row where it has one.
KNOWN_MODELS: dict[str, ProviderModels] = {
    "openai": ProviderModels("gpt-4o", ("gpt-", "chatgpt-", "o1", "o3", "o4")),
    "openai-reasoning": ProviderModels("o3", ("o1", "o3", "o4", "gpt-5")),
    "anthropic": ProviderModels("claude-sonnet-5", ("claude-",)),
    "deepseek": ProviderModels("deepseek-chat", ("deepseek-",)),
    "gemini": ProviderModels("gemini-2.5-flash", ("gemini-",)),
}


def default_model(provider: str) -> str:
    """The model a request for ``provider`` names when neither the user nor the stored reply names one of its own."""
    known = KNOWN_MODELS.get(provider)
    return known.default if known is not None else FALLBACK_MODEL


def belongs(provider: str, model: str) -> bool:
    """Whether ``provider`` serves ``model``: a provider whose models are not known serves any."""
    known = KNOWN_MODELS.get(provider)
    if known is None:
        return True
    if model.startswith(known.prefixes):
        return True
    rows = builtin_prices().providers.get(PRICE_PROVIDERS.get(provider, provider))
    return rows is not None and any(model == name or model.startswith(name + "-") for name in rows.models)


@dataclass
class ModelChooser:
    """The model of each request for one provider. ``named``: the provider was chosen (``--provider``, zhin.yaml);
    the default provider keeps every stored model, as before. ``model``: the user's (``--model``, zhin.yaml)."""

    provider: str
    model: str | None = None
    named: bool = False
    _noted: set[str] = field(default_factory=set)

    def for_stored(self, stored: str | None) -> str:
        """The model of a request whose reply was stored with ``stored`` (None: not stored)."""
        if self.model:
            return self.model
        if not self.named:
            return stored or FALLBACK_MODEL
        if stored and belongs(self.provider, stored):
            return stored
        chosen = default_model(self.provider)
        if stored and stored not in self._noted:
            self._noted.add(stored)
            note(f"provider {self.provider} given without a model: the stored model {stored!r} is not "
                 f"{self.provider}'s, so its requests name {chosen}, {self.provider}'s default (--model to choose)")
        return chosen
