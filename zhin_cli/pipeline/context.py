"""``RunContext``: what one command resolves once — the config, its plugins, the prices, the provider — and passes
down, instead of each function re-reading the config from a bundle of paths (issue 32 Build 5).

Opening a context loads the config (given, or found upward under the trust rules) and runs its plugins *before*
``--provider`` is checked, so a provider a plugin defines is accepted like a built-in one. The plugins stay loaded
until :meth:`RunContext.close` (the command's end): their providers, sources and price rows stay registered for
everything the command does. ``Pipeline.open`` stays for library users; :meth:`RunContext.pipeline` opens one on
the context's config without loading it again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from zhin_cli.core.model import Session
from zhin_cli.pipeline.config import Config, load_config
from zhin_cli.pipeline.providers import ProviderSpec, provider
from zhin_cli.pipeline.segments import Generation, PromptSegmentRegistry

if TYPE_CHECKING:
    from zhin_cli.pipeline.facade import Pipeline
    from zhin_cli.pipeline.preset.model import Preset
    from zhin_cli.pipeline.prices import PriceTable
    from zhin_cli.pipeline.segments import FactsReader


@dataclass
class RunContext:
    """One command's resolved inputs. Use it as a context manager (or call :meth:`close`) to release the plugins."""

    cwd: Path
    config: Config
    registry: PromptSegmentRegistry | None  # None: the plugins were not run here (``for_config``)
    generations: list[Generation]
    prices_file: Path | None = None
    db: str | None = None
    _prices: PriceTable | None = field(default=None, repr=False)
    _sessions: dict[str, Session] = field(default_factory=dict, repr=False)

    @classmethod
    def open(cls, config: Config | Path | str | None = None, *, cwd: Path | str | None = None,
             provider_name: str | None = None, prices_file: Path | None = None, db: str | None = None) -> RunContext:
        """Load ``config`` (a path the user named, or None: the ``zhin.yaml`` found upward from ``cwd``, whose
        plugins run only if trusted) and run its plugins; then check ``provider_name`` against every provider,
        the plugins' included (``UnknownProvider``, a ``ConfigError``, when none has it)."""
        here = Path(cwd) if cwd else Path.cwd()  # a str cwd too (it is searched upward as a Path)
        loaded = config if isinstance(config, Config) else load_config(Path(config) if config is not None else None, cwd=here)
        registry, generations = loaded.registry()  # plugin code runs here, or the trust check refuses it
        context = cls(here, loaded, registry, generations, prices_file, db)
        try:
            if provider_name:
                provider(provider_name)
        except BaseException:
            context.close()
            raise
        return context

    @classmethod
    def for_config(cls, config: Config, *, cwd: Path, db: str | None = None, prices_file: Path | None = None) -> RunContext:
        """A context on a config already loaded, whose plugins run in each pipeline opened on it (``Pipeline.open``),
        not here: what a tool builds when its caller handed it no context."""
        return cls(cwd, config, None, [], prices_file, db)

    @classmethod
    def load(cls, config_path: Path | None, *, cwd: Path, db: str | None = None,
             prices_file: Path | None = None) -> RunContext:
        """``for_config`` on the config at ``config_path`` (None: the one found upward from ``cwd``): the context a
        tool builds when its caller handed it none — the bundle of paths, resolved once."""
        return cls.for_config(load_config(config_path, cwd=cwd), cwd=cwd, db=db, prices_file=prices_file)

    def use_inputs(self, *, db: str | None = None, prices_file: Path | None = None) -> None:
        """The command's ``--db`` and ``--prices``, known after the context was opened (``--provider`` is checked
        first); before anything was read with them."""
        if self._sessions or (self._prices is not None and prices_file != self.prices_file):
            raise RuntimeError("a run context's inputs change before it reads sessions or prices")
        self.db, self.prices_file = db, prices_file
        if prices_file is not None:
            self._prices = None

    @property
    def prices(self) -> PriceTable:
        """The price table (built-in, plugin rows, zhin.yaml ``prices:``, ``--prices FILE``), read once."""
        if self._prices is None:
            self._prices = self.config.price_table(self.prices_file)
        return self._prices

    def session(self, ref: str) -> Session:
        """The session ``ref`` names (a file, an id or key in ``db``), loaded once per context."""
        session = self._sessions.get(ref)
        if session is None:
            from zhin_cli.store import load_session

            session = self._sessions[ref] = load_session(ref, db=self.db, cwd=self.cwd)
        return session

    def spec(self, name: str | None = None) -> ProviderSpec:
        """The provider ``name`` (default: the config's ``provider:``, else the assembler's default)."""
        from zhin_cli.pipeline.assemble import DEFAULT_PROVIDER

        return provider(name or self.config.provider or DEFAULT_PROVIDER)

    def pipeline(self, *, provider: str | None = None, model: str | None = None, timezone: str | None = None,
                 preset: Preset | Path | str | None = None, facts: FactsReader | None = None) -> Pipeline:
        """A ``Pipeline`` on this context's config and plugins (nothing loaded again; closing it releases nothing
        of the context's). A ``for_config`` context's pipeline runs the config's plugins itself."""
        from zhin_cli.pipeline.assemble import Assembler
        from zhin_cli.pipeline.facade import Pipeline, load_preset_for

        if self.registry is None:
            return Pipeline.open(self.config, provider=provider, model=model, timezone=timezone, preset=preset,
                                 facts=facts, cwd=self.cwd)
        chosen = load_preset_for(self.config, preset)
        assembler = Assembler(self.registry, self.config, provider=provider, model=model, timezone=timezone,
                              preset=chosen, facts=facts)
        return Pipeline(assembler, [])

    def close(self) -> None:
        """Release the plugins (their segments, providers, price rows … leave the registries). Idempotent."""
        generations, self.generations = self.generations, []
        for generation in reversed(generations):
            generation.release()

    def __enter__(self) -> RunContext:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None) -> None:
        self.close()


def plugin_provider_names(config: Path) -> tuple[str, ...]:
    """The providers the plugins of ``config`` (a file the user named: its plugins may run) register, for shell
    completion; the plugins are released before this returns. A config that cannot be read offers none."""
    from zhin_cli.core.errors import ZhinError
    from zhin_cli.pipeline.providers import PROVIDERS

    before = set(PROVIDERS)
    try:
        with RunContext.open(config):
            return tuple(name for name in PROVIDERS if name not in before)
    except ZhinError:
        return ()
