"""A provider zhin does not ship, defined by a plugin through ``zhin_cli.api`` only (issue 32 "Done when").

Acme serves an OpenAI-shaped Chat Completions endpoint with its own name, capabilities and prices. Naming this file
in a zhin.yaml (``plugins: [acme_provider.py]``) is all it takes for ``--provider acme`` to work in every command
(tests/test_plugin_provider.py); nothing in zhin changes.
"""

from zhin_cli.api import CacheRules, ProviderSpec, register_provider

PRICES = {
    "default": "acme-1",
    "models": {"acme-1": {"input": 0.4, "cached_input": 0.04, "source": "Acme's price page (a test fixture)",
                          "read_on": "2026-12-03"}},
}
ACME = ProviderSpec(
    name="acme",
    display="Acme",
    wire="openai-chat",
    mid_conversation_system="none",  # state changes go into the next user turn
    cache=CacheRules(mechanism="automatic", min_tokens=256, step_tokens=64, lifetime_seconds=900),
    description="Acme's OpenAI-compatible endpoint: automatic prompt cache from 256 tokens",
    default_model="acme-1",
    model_prefixes=("acme-",),
    economy=True,
    prices=PRICES,  # its rows, as one provider of prices.json
)


def register(plugin):
    register_provider(ACME)
