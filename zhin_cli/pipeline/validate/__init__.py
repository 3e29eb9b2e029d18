"""Stage 8 — offline validators that answer what the real APIs answer (status, error text, error body).

Validators are a registry keyed by name (``openai-chat``, ``anthropic-messages``, ``template:mistral`` …);
a provider profile names the one that speaks for it. The built-in ones are registered here (``BUILTIN``), from
modules that import only ``validate.verdict``; a plugin calls ``register_validator``. Each rule has a failing-input and a passing-input
test. Only rules tagged [V]/[R] in docs/spec/providers.md reject.
"""

from __future__ import annotations

from collections.abc import Callable

from zhin_cli.core.jsontext import JSONObject
from zhin_cli.core.registry import Registry
from zhin_cli.pipeline.validate import anthropic, deepseek, gemini, openai, templates
from zhin_cli.pipeline.validate.verdict import ACCEPTED, Validator, Verdict

__all__ = ["ACCEPTED", "VALIDATORS", "Validator", "Verdict", "register_validator", "validate"]

VALIDATORS: Registry[Validator] = Registry("validator")


def register_validator(name: str, *, replace: bool = False) -> Callable[[Validator], Validator]:
    return VALIDATORS.adding(name, replace=replace)


def validate(name: str, body: JSONObject, model: str) -> Verdict:
    """Run the validator ``name`` (see ``VALIDATORS``) on a wire body for ``model``."""
    if name not in VALIDATORS:
        from zhin_cli.core.errors import ConfigError

        raise ConfigError(f"unknown validator {name!r} (known: {', '.join(sorted(VALIDATORS))})")
    return VALIDATORS[name](body, model)


# The built-in validators, by the name a provider profile gives (``Capabilities.validator``).
BUILTIN: dict[str, Validator] = {
    "openai-chat": openai.validate_chat,
    "deepseek-chat": deepseek.validate_chat,
    "anthropic-messages": anthropic.validate_messages,
    "gemini-generate": gemini.validate_generate,
    **templates.family_validators(),  # template:<family> and served:<family>
}
for _name, _validator in BUILTIN.items():
    VALIDATORS.add(_name, _validator)
