"""Which model a request names when a provider is chosen without one (issue 31, finding 2).

A stored reply keeps the model that answered it (``gpt-4o``); replaying it for another provider (``--provider
deepseek``) with that model would name a pair that cannot exist ("Model: gpt-4o via deepseek" in the system
prompt, no price row). So a provider named without a model keeps the stored model only when the model is that
provider's — its name starts with one of the provider's known prefixes, or is its default, or (a provider whose spec
names no prefixes) the built-in price table has a row for it (or a row it extends with ``-``) — and otherwise uses the provider's default model, said once as a
``ZhinNote`` (``zhin: note: …`` on the CLI's stderr). Gateways and local servers (``openai-compatible``, ``vllm``,
``ollama``, ``llama-cpp``, any provider whose spec names no ``default_model``) serve any vendor's model: every model
is theirs. The defaults and prefixes are fields of each provider's spec (``pipeline/providers/specs/``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zhin_cli.core.notes import note
from zhin_cli.pipeline.prices import builtin_prices, price_key
from zhin_cli.pipeline.providers.spec import PROVIDERS

FALLBACK_MODEL = "gpt-4o"  # no provider named and nothing stored: the assembler's historical default


@dataclass(frozen=True)
class ProviderModels:
    """A provider's default model and the prefixes its model names start with."""

    default: str
    prefixes: tuple[str, ...]


def known_models(provider: str) -> ProviderModels | None:
    """The provider's default model and model prefixes (``ProviderSpec.default_model`` / ``model_prefixes``); None
    when its models are not known (a gateway, a local server, a name no spec has): it serves any model."""
    spec = PROVIDERS.get(provider)
    if spec is None or spec.default_model is None:
        return None
    return ProviderModels(spec.default_model, spec.model_prefixes)


def default_model(provider: str) -> str:
    """The model a request for ``provider`` names when neither the user nor the stored reply names one of its own."""
    known = known_models(provider)
    return known.default if known is not None else FALLBACK_MODEL


def belongs(provider: str, model: str) -> bool:
    """Whether ``provider`` serves ``model``: a provider whose models are not known serves any."""
    known = known_models(provider)
    if known is None:
        return True
    if model.startswith(known.prefixes):
        return True
    # a spec that names its prefixes is not widened by a price list it shares (openai-reasoning bills at openai's
    # rows, gpt-4o among them, yet gpt-4o is no reasoning model): only its default and its own rows count then
    names = [known.default, *_priced_models(provider, shared=not known.prefixes)]
    return any(model == name or model.startswith(name + "-") for name in names)


def _priced_models(provider: str, *, shared: bool = True) -> list[str]:
    """The model names with a price row for ``provider``: its spec's own rows, and (``shared``) the shipped table's
    rows it is billed at."""
    rows = builtin_prices().providers.get(price_key(provider)) if shared else None
    spec = PROVIDERS.get(provider)
    own = spec.prices.get("models") if spec is not None and spec.prices is not None else None
    return [*(rows.models if rows is not None else ()), *(own if isinstance(own, dict) else ())]


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
