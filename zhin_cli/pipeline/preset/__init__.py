"""Stage 6 — the message skeleton (preset-message-skeleton; docs/spec/sillytavern.md).

A preset declares what the final ``messages[]`` looks like; the runtime only fills its holes. The
built-in default preset is the ADR 0041 (+0045) layout: system prompt (segments 1–4) → history →
current input, with the runtime tail (scene line, kind 5) after the current message's text.
SillyTavern chat-completion presets are imported as they are found in the wild (``importer``), their
macros expanded at assembly time (``macros``), their regex scripts run on the history (``regex``), and
ST's squash and post-processing applied as separate layers (``shaping``). The assembler calls
``arrange`` and never arranges messages itself; the renderers consume the ``Layout``.

Modules: ``model`` (data), ``importer``, ``macros``, ``regex``, ``skeleton`` (holes, injections),
``shaping`` (squash, post-processing), ``lint`` (diagnostics and probe).
"""

from __future__ import annotations

from zhin_cli.pipeline.preset.layout import (
    SYSTEM_SEGMENT,
    TAIL_SEGMENT,
    TAIL_SEPARATOR,
    Item,
    Layout,
    PresetMessage,
    default_layout,
)
from zhin_cli.pipeline.preset.model import Diagnostic, Preset

__all__ = [
    "SYSTEM_SEGMENT", "TAIL_SEGMENT", "TAIL_SEPARATOR", "Diagnostic", "Item", "Layout", "Preset", "PresetMessage",
    "default_layout",
]
