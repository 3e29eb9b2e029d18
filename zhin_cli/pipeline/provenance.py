"""Where a request's parts come from: the file (and line) that defines each segment, for
annotations and reports, and the layout (zhin's ADR 0041 assembly or a preset) that assembled a pipeline's
requests. Shared by ``prefix-diff``, ``trace`` and ``budget`` (moved out of tools/, issue 32)."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zhin_cli.pipeline.facade import Pipeline
from zhin_cli.pipeline.preset.model import Preset


@dataclass(frozen=True)
class SegmentSource:
    """Where a segment's text comes from, for annotations: a file and (where known) a line."""

    file: str | None = None
    line: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line}


def segment_sources(pipeline: Pipeline, segment_ids: Iterable[str | None], preset: Any = None) -> dict[str, SegmentSource]:
    """Where each segment is defined, for GitHub annotations: a ``zhin.yaml`` segment (added, or a built-in's text
    replaced) at its key's line; a plugin's at the plugin file (the line that names its id, if any); a built-in at
    the line of zhin's module that names it; ``tools`` and ``window`` at their ``zhin.yaml`` keys; a preset entry
    (``preset:<id>``) at the preset file. Unknown ids are left out."""
    config = pipeline.config
    registry = pipeline.registry
    by_id = {segment.id: segment for segment in registry.ordered()}
    out: dict[str, SegmentSource] = {}
    for segment_id in dict.fromkeys(i for i in segment_ids if i):
        source = _segment_source(config, registry, by_id, segment_id, preset)
        if source is not None:
            out[segment_id] = source
    return out


def _config_line(config: Any, key: str) -> SegmentSource | None:
    where = config.where(key)
    if where is None:
        return None
    file, _, line = where.rpartition(":")
    return SegmentSource(file, int(line)) if file and line.isdigit() else SegmentSource(where)


def _segment_source(config: Any, registry: Any, by_id: dict[str, Any], segment_id: str, preset: Any) -> SegmentSource | None:
    import inspect
    import sys
    from pathlib import Path

    from zhin_cli.core.trust import plugin_file

    if segment_id == "window":
        return _config_line(config, "window.max_messages") if config.path is not None else None
    if segment_id == "tools":
        return _config_line(config, "tools") if config.path is not None and config.tools else None
    if segment_id.startswith("preset:"):
        path = preset if isinstance(preset, (str, Path)) else config.preset_path
        return SegmentSource(str(path)) if path is not None else None
    if segment_id in config.texts and config.path is not None:
        return _config_line(config, f"segments.texts.{segment_id}")
    if segment_id not in by_id:
        return None
    owner = registry.owner(segment_id)
    if owner == "zhin.yaml":
        index = next((i for i, s in enumerate(config.add_segments) if s.id == segment_id), None)
        return _config_line(config, f"segments.add[{index}]") if index is not None else None
    file: Path | None = None
    if owner == "builtin":
        file = Path(sys.modules["zhin_cli.pipeline.segments.builtin"].__file__ or "")
    else:
        base = config.path.parent if config.path is not None else Path.cwd()
        file = plugin_file(owner, base)
        if file is None:  # module:function
            module_file = getattr(sys.modules.get(owner.partition(":")[0]), "__file__", None)
            file = Path(module_file) if module_file else None
        if file is None:
            try:
                found = inspect.getsourcefile(type(by_id[segment_id]))
            except TypeError:
                found = None
            if not found:
                return None
            file = Path(found)
    return SegmentSource(str(file), _line_naming(file, segment_id))


def _line_naming(file: Any, segment_id: str) -> int | None:
    """The first line of ``file`` that names ``segment_id`` as a string literal."""
    try:
        lines = _source_lines(str(file), os.stat(file).st_mtime_ns)
    except (OSError, UnicodeDecodeError):
        return None
    quoted = (f'"{segment_id}"', f"'{segment_id}'")
    return next((number for number, text in enumerate(lines, start=1) if any(q in text for q in quoted)), None)


@functools.lru_cache(maxsize=64)
def _source_lines(file: str, mtime_ns: int) -> tuple[str, ...]:
    """A source file's lines, read once per version of the file (every session of a run asks for the same few)."""
    return tuple(Path(file).read_text(encoding="utf-8").splitlines())


ADR_LAYOUT = "adr-0041"  # zhin's own assembly (ADR 0041), the layout without a preset


def layout_name(preset: Preset | None) -> str:
    """The layout that produced a pipeline's requests: ``adr-0041`` (the built-in one), else the preset's name."""
    if preset is None or preset.builtin:
        return ADR_LAYOUT
    return preset.name or (preset.path.stem if preset.path is not None else "preset")


def layout_note(layout: str) -> str:
    """What the requests shown are: zhin's assembly, named, never the bot's own body."""
    what = "zhin's ADR 0041 assembly" if layout == ADR_LAYOUT else f"zhin's assembly with preset {layout!r}"
    return f"layout {layout}: {what} of the stored rows, not the body the bot sent"


def layout_phrase(layout: str) -> str:
    """The layout in a sentence: "ADR 0041", or "preset 'NAME'"."""
    return "ADR 0041" if layout == ADR_LAYOUT else f"preset {layout!r}"
