"""``Pipeline``: the one call a tool or a library user makes to turn a stored session into requests.

Every tool used to wire the stages itself (config → registry → Assembler → replay → release the plugin
generations), five times over, and the ``--preset`` override travelled through a ContextVar. This facade owns
that wiring once::

    with Pipeline.open(config, provider="openai", preset=path) as pipeline:   # plugin generations released on exit
        request = pipeline.request(session, turn=k)                            # costs turn k's window
        for request in pipeline.replay(session):                               # every turn, incrementally
            ...

Turn numbers are those of ``zhin trace``: turn k is the k-th stored assistant message (a stored greeting is
turn 1 and has no request); negative numbers count from the end. ``request(turn=k)`` equals the k-th request
of ``replay`` byte for byte (tests/test_turn_equivalence.py), without assembling the turns before k in full
(docs/design-notes.md, "A request costs its window").

``--preset FILE`` is the ``preset=`` parameter (a path is read with that config's ``preset:`` options), for
each pipeline a tool opens — prefix-diff ``--base/--head`` opens two, both with the same ``preset=``; no
ambient state (it used to travel in a ContextVar, ``config.preset_override``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType

from zhin_cli.core.model import Session
from zhin_cli.pipeline.assemble import AssembledRequest, Assembler, Conversation, TurnPlan
from zhin_cli.pipeline.config import Config, load_config
from zhin_cli.pipeline.preset.model import Preset
from zhin_cli.pipeline.segments import FactsReader, Generation, PromptSegmentRegistry


class Pipeline:
    """One configuration (segments, plugins, provider, model, time zone, preset) ready to assemble requests.

    Open it with ``Pipeline.open``; use it as a context manager (or call ``close``) so the plugins' segment
    generations are released."""

    def __init__(self, assembler: Assembler, generations: list[Generation]) -> None:
        self.assembler = assembler
        self._generations = generations

    @classmethod
    def open(
        cls,
        config: Config | Path | str | None = None,
        *,
        provider: str | None = None,
        model: str | None = None,
        timezone: str | None = None,
        preset: Preset | Path | str | None = None,
        facts: FactsReader | None = None,
        cwd: Path | None = None,
    ) -> Pipeline:
        """``config``: a loaded ``Config``, a ``zhin.yaml`` path (its plugins may run: the caller named it), or
        None for the ``zhin.yaml`` found upward from ``cwd`` (plugins only if trusted), else the defaults.
        ``preset``: a ``Preset``, or a preset file read with the config's ``preset:`` options; None: the config's
        own ``preset:`` (or the built-in ADR 0041 layout)."""
        loaded = config if isinstance(config, Config) else load_config(Path(config) if config is not None else None, cwd=cwd)
        chosen = load_preset_for(loaded, preset)
        registry, generations = loaded.registry()
        try:
            assembler = Assembler(registry, loaded, provider=provider, model=model, timezone=timezone, preset=chosen,
                                  facts=facts)
        except BaseException:
            _release(generations)
            raise
        return cls(assembler, generations)

    # --- lifetime ---------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Release the plugin generations (their segments leave the registry). Idempotent."""
        generations, self._generations = self._generations, []
        _release(generations)

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None) -> None:
        self.close()

    # --- what the pipeline is ---------------------------------------------------------------------------------

    @property
    def config(self) -> Config:
        return self.assembler.config

    @property
    def registry(self) -> PromptSegmentRegistry:
        """The segment registry (eval loads and unloads plugins into it between turns)."""
        return self.assembler.registry

    @property
    def preset(self) -> Preset | None:
        return self.assembler.preset

    def timezone(self, session: Session) -> str:
        """The time zone requests of ``session`` are rendered in (``--timezone``, zhin.yaml, the session's, UTC)."""
        return self.assembler.timezone_of(session)

    def timezone_source(self, session: Session) -> str:
        """Where ``timezone``'s zone came from: ``--timezone``, ``zhin.yaml``, ``session``, ``data``, ``TZ``, ``default``."""
        return self.assembler.timezone_source(session)

    # --- requests ---------------------------------------------------------------------------------------------

    def turns(self, session: Session) -> TurnPlan:
        """The session's turns: how many, which one is the greeting, where each request is made."""
        return self.assembler.plan(session)

    def request(self, session: Session, turn: int = -1) -> AssembledRequest:
        """The request of turn ``turn`` (1-based; negative counts from the end), as ``replay`` gives it."""
        plan = self.turns(session)
        wanted = plan.number(turn)
        return self.assembler.request(session, wanted, plan=plan)

    def replay(self, session: Session, turns: Iterable[int] | None = None) -> Iterator[AssembledRequest]:
        """The requests of ``turns`` (all by default; the greeting has none), in turn order, each as a full
        replay makes it; work is shared between consecutive turns."""
        if turns is None:
            return self.assembler.replay(session)
        plan = self.turns(session)
        return self.assembler.replay(session, only=frozenset(plan.number(t) for t in turns), plan=plan)

    def conversation(self, session: Session) -> Conversation:
        """Step through a conversation one request at a time (eval's turn points, which need not be stored
        assistant messages), with the same sent-prefix carry as ``replay``."""
        return self.assembler.conversation(session)


def load_preset_for(config: Config, preset: Preset | Path | str | None) -> Preset | None:
    """``preset`` as a ``Preset``: a file is read with ``config``'s preset options (zhin.yaml ``preset:``);
    None gives the config's own ``preset:`` (None: the built-in layout)."""
    if isinstance(preset, Preset):
        return preset
    if preset is None:
        return config.preset()
    from zhin_cli.pipeline.preset.importer import load_preset

    return load_preset(Path(preset), config.preset_options)


def _release(generations: list[Generation]) -> None:
    for generation in generations:
        generation.release()
