"""Corpus plugin: ``register`` itself fails."""

from typing import Any


def register(generation: Any) -> None:
    raise ValueError("cannot register: missing API key")
