"""A plugin that registers one ``platform`` segment (ADR 0041 acceptance 8): tool guidance for its weather tool."""

from __future__ import annotations

from zhin_cli.pipeline.segments import Generation, TextSegment

GUIDANCE = "Weather plugin: answer weather questions with the weather tool; say which city the forecast is for."


def register(generation: Generation) -> None:
    generation.register(TextSegment("plugin.weather.guidance", "platform", GUIDANCE, weight=10))
