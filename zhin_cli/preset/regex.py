"""Preset-bound regex scripts at prompt time (reference/sillytavern.md §5).

Only ``promptOnly`` scripts run while assembling (the others already rewrote the stored text, or only
change the display). They run on history messages before macros and injections; depth 0 is the newest
history message. User messages use placement 1, everything else placement 2. The replacement's
``{{match}}``, ``$n`` and ``$<name>`` insert the match and its groups (with ``trimStrings`` removed from
each group), then the whole replacement is macro-expanded.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from zhin_cli.preset.model import RegexScript

USER_INPUT = 1
AI_OUTPUT = 2
_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL}
_NAMED_GROUP = re.compile(r"\(\?<(?![=!])")  # JS (?<name>…) → Python (?P<name>…)
_REFERENCE = re.compile(r"\{\{match\}\}|\$(\d+)|\$<([^>]+)>|\$&", re.IGNORECASE)


def compile_script(script: RegexScript) -> re.Pattern[str] | None:
    flags = 0
    for flag in script.flags:
        flags |= _FLAGS.get(flag, 0)
    try:
        return re.compile(_NAMED_GROUP.sub("(?P<", script.pattern), flags)
    except (re.error, RecursionError, OverflowError):
        return None


def applies(script: RegexScript, placement: int, depth: int | None) -> bool:
    if script.disabled or not script.prompt_only or placement not in script.placement:
        return False
    if depth is not None:
        if script.min_depth is not None and script.min_depth >= -1 and depth < script.min_depth:
            return False
        if script.max_depth is not None and script.max_depth >= 0 and depth > script.max_depth:
            return False
    return True


def run_script(script: RegexScript, text: str, expand: Callable[[str], str]) -> str:
    pattern = compile_script(script)
    if pattern is None:
        return text

    def group_text(match: re.Match[str], key: int | str) -> str:
        try:
            value = match.group(key) or ""
        except IndexError:
            return ""
        for trim in script.trim_strings:
            value = value.replace(expand(trim), "")
        return value

    def replace(match: re.Match[str]) -> str:
        def reference(ref: re.Match[str]) -> str:
            if ref.group(1) is not None:
                return group_text(match, int(ref.group(1)))
            if ref.group(2) is not None:
                return group_text(match, ref.group(2))
            return group_text(match, 0)

        return expand(_REFERENCE.sub(reference, script.replace))

    count = 0 if "g" in script.flags else 1  # a pattern without the g flag replaces the first match only
    return pattern.sub(replace, text, count=count)


