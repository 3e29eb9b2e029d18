"""Corpus plugin: imports fine, but has no ``register`` function."""

SEGMENTS: list[str] = []
