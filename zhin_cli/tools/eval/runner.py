"""Run cases: prepare every case first (an invalid one stops the run before anything runs, exit 4), then
assemble each case's conversation under each provider profile, apply its assertions, and report.

Offline, a case that needs a live model is *skipped* with the reason, never passed. A case marked
``expect: fail`` (a negative control) passes only when at least one of its assertions fails.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from zhin_cli.core.errors import EXIT_CANNOT_RUN, EXIT_FOUND, EXIT_OK, ConfigError, UsageError, ZhinError
from zhin_cli.core.model import BotFacts, SceneFacts
from zhin_cli.core.parallel import check_jobs, ordered_map
from zhin_cli.core.timezones import valid_timezone
from zhin_cli.core.tokens import counter
from zhin_cli.core.trust import PluginSource, UntrustedPlugins, authorize, inside, plugin_file
from zhin_cli.pipeline.assemble import DEFAULT_PROVIDER, AssembledRequest
from zhin_cli.pipeline.config import Config, load_plugin, parse_config
from zhin_cli.pipeline.facade import Pipeline
from zhin_cli.pipeline.providers import PROVIDERS, resolve_profile, unknown_provider
from zhin_cli.pipeline.segments import Generation, PromptSegmentRegistry, TextSegment
from zhin_cli.pipeline.validate import validate
from zhin_cli.tools.eval.cases import Case, CaseError, load_cases
from zhin_cli.tools.eval.metrics import run_metrics
from zhin_cli.tools.eval.registry import ASSERTIONS, TRANSFORMS, Outcome, ProviderRun, spec_number, spec_text, spec_texts
from zhin_cli.tools.eval.result import AssertionDocument, CaseDocument, EvalDocument, LiveAnswersDocument, RunMetrics, Status
from zhin_cli.tools.eval.timeline import (
    DEFAULT_BOT,
    DEFAULT_SCENE,
    DEFAULT_TIMEZONE,
    Builder,
    Built,
    PluginAction,
    StepError,
    TurnPoint,
    apply_step,
    start_ms,
)

if TYPE_CHECKING:
    from zhin_cli.core.jsontext import JSONObject
    from zhin_cli.tools.eval.live import LiveModel  # imported by make_live_model only: offline runs never load it

EVAL_VERSION = 1
LIVE_WIRE = "openai-chat"


@dataclass
class AssertionResult:
    index: int
    type: str
    provider: str
    status: Status
    message: str
    line: int

    def as_dict(self) -> AssertionDocument:
        return {"index": self.index, "type": self.type, "provider": self.provider, "status": self.status,
                "message": self.message, "line": self.line}


@dataclass
class CaseResult:
    case: Case
    status: Status
    reason: str
    providers: list[str]
    assertions: list[AssertionResult] = field(default_factory=list)
    duration: float = 0.0
    pass_rate: float | None = None  # live cases: share of repeats that passed every live assertion
    could_not_run: bool = False  # the live model was unreachable
    metrics: list[RunMetrics] = field(default_factory=list)  # per provider: tokens, breaks, rejections (eval.metrics)

    @property
    def line(self) -> int:
        """The line to point at: the first failing assertion, else the case."""
        bad = [a for a in self.assertions if a.status in ("failed", "error")]
        return bad[0].line if bad and self.case.expect == "pass" else self.case.line

    def as_dict(self) -> CaseDocument:
        criterion = self.case.data.get("criterion")
        return {
            "id": self.case.id, "file": str(self.case.file), "line": self.case.line, "expect": self.case.expect,
            "criterion": criterion if isinstance(criterion, str) else None, "status": self.status, "reason": self.reason,
            "providers": self.providers, "duration_ms": round(self.duration * 1000, 1), "pass_rate": self.pass_rate,
            "assertions": [a.as_dict() for a in self.assertions],
            "metrics": self.metrics,
        }


@dataclass
class EvalOptions:
    providers: list[str] = field(default_factory=list)  # --provider: restrict to these
    jobs: int | None = 1  # cases at once (None: every core): processes offline, threads for live cases
    repeat: int | None = None  # --repeat: live cases ask this many times
    live: bool = False
    model: str | None = None
    use_cache: bool = True
    cache_dir: Path | None = None  # --cache-dir: the live response cache (default: the user cache directory)
    base_url: str | None = None
    api_key: str | None = None
    seed: int = 0
    expect_override: str | None = None  # tests: run every case as if it expected this
    # The project's configuration (zhin.yaml, or a --base/--head side) for cases without their own ``config:``.
    project_config: Config | None = None


@dataclass
class LiveAnswers:
    """How the live model's answers were obtained: ``from_cache`` of ``total`` were read from ``cache_dir``."""

    total: int
    from_cache: int
    cache_dir: str | None  # None: the cache was off (--no-cache)

    def as_dict(self) -> LiveAnswersDocument:
        return {"total": self.total, "from_cache": self.from_cache, "cache_dir": self.cache_dir}

    def describe(self) -> str:
        where = f" ({self.cache_dir})" if self.cache_dir is not None else " (cache off)"
        return f"{self.from_cache} of {self.total} live answers from cache{where}"


@dataclass
class EvalRun:
    results: list[CaseResult]
    live: bool
    duration: float
    live_answers: LiveAnswers | None = None  # set when a live model was asked

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for r in self.results if r.status == s) for s in ("passed", "failed", "error", "skipped")}

    @property
    def exit_code(self) -> int:
        if any(r.could_not_run for r in self.results):
            return EXIT_CANNOT_RUN
        return EXIT_FOUND if any(r.status in ("failed", "error") for r in self.results) else EXIT_OK

    def as_dict(self) -> EvalDocument:
        document: EvalDocument = {"version": EVAL_VERSION, "live": self.live, "duration_ms": round(self.duration * 1000, 1),
                    "summary": {**self.counts(), "total": len(self.results), "exit_code": self.exit_code},
                    "cases": [r.as_dict() for r in self.results]}
        if self.live_answers is not None:
            document["live_answers"] = self.live_answers.as_dict()
        return document


# --- preparing a case (everything that can be wrong with the file, found before anything runs) ----------------


@dataclass
class Prepared:
    case: Case
    config: Config
    built: Built
    providers: list[tuple[str, str | None]]


def _sub_lines(case: Case, prefix: str) -> dict[str, int]:
    return {k[len(prefix) + 1 :] if k != prefix else "": v for k, v in case.lines.items()
            if k == prefix or k.startswith(prefix + ".") or k.startswith(prefix + "[")}


def prepare(case: Case, *, cwd: Path | None = None, project: Config | None = None) -> Prepared:
    """``project``: the configuration a case without its own ``config:`` runs under (default: built-in).

    The config's plugins are loaded while the case is checked (a provider one of them registers may be named by the
    case and its assertions) and released before this returns; each run loads them again (``assemble_turns``)."""
    config, generations = _load_case_config(case, project)
    try:
        providers = _case_providers(case, config)
        built = build_timeline(case)
        _check_references(case, built)
    finally:
        for generation in reversed(generations):
            generation.release()
    return Prepared(case, config, built, providers)


def _load_case_config(case: Case, project: Config | None) -> tuple[Config, list[Generation]]:
    """The case's configuration (its own ``config:``, else ``project``) with its plugins loaded (release them)."""
    data = case.data
    try:
        if "config" not in data and project is not None:
            config = project
        else:
            config = parse_config(data.get("config") or {}, case.file, _sub_lines(case, "config"))
            config.source = PluginSource.case(case.file)  # its plugins: trusted case file, inside its folder
        _, generations = config.registry()  # plugins load now: a broken one is the case's problem, named at its line
    except UntrustedPlugins:
        raise  # not the case file's fault: its own one line and exit status, before anything runs
    except ConfigError as exc:
        raise CaseError(f"config: {exc.message}", where=exc.where or case.where("config")) from None
    return config, generations


def _case_providers(case: Case, config: Config) -> list[tuple[str, str | None]]:
    """``(provider, model)`` the case runs under: its ``providers:``, else the config's provider (or the default)."""
    providers: list[tuple[str, str | None]] = []
    for index, item in enumerate(case.data.get("providers") or [config.provider or DEFAULT_PROVIDER]):
        name, model = (item, None) if isinstance(item, str) else (item["provider"], item.get("model"))
        if name not in PROVIDERS:
            raise CaseError(unknown_provider(name), where=case.where(f"providers[{index}]"))
        resolve_profile(name, model or "", config.provider_overrides.get(name))
        providers.append((name, model))
    return providers


def build_timeline(case: Case) -> Built:
    """The case's conversation as a stored ``Session`` and its turns (library code; tests reuse it)."""
    session_spec = case.data.get("session") or {}
    timezone = session_spec.get("timezone", DEFAULT_TIMEZONE)
    if not valid_timezone(timezone):
        raise CaseError(f"unknown time zone {timezone!r}", where=case.where("session.timezone"))
    zone = ZoneInfo(timezone)
    try:
        start = start_ms(session_spec.get("start"), zone)
    except StepError as exc:
        raise CaseError(f"session.start: {exc.message}", where=case.where("session.start")) from None
    stored = None
    if "file" in session_spec or "db" in session_spec:
        from zhin_cli.store import load_session

        try:
            if "file" in session_spec:
                stored = load_session(str(case.file.parent / session_spec["file"]))
            else:
                if "id" not in session_spec:
                    raise CaseError("session.db needs session.id", where=case.where("session.db"))
                stored = load_session(session_spec["id"], db=str(case.file.parent / session_spec["db"]))
        except CaseError:
            raise
        except ZhinError as exc:
            raise CaseError(f"session: {exc}", where=case.where("session")) from None
    builder = Builder(
        base=case.file.parent, timezone=timezone, start_ms=start,
        bot=BotFacts.from_mapping({**DEFAULT_BOT, **session_spec.get("bot", {})}),
        scene=SceneFacts.from_mapping({**DEFAULT_SCENE, **session_spec.get("scene", {})}),
        members={str(k): v for k, v in (case.data.get("members") or {}).items()},
        session=stored, session_id=case.id,
    )
    for index, item in enumerate(case.data.get("timeline") or []):
        key = f"timeline[{index}]"
        try:
            apply_step(builder, item, case.line_of(key))
        except StepError as exc:
            raise CaseError(exc.message, where=case.where(key)) from None
    return builder.build()


def _check_references(case: Case, built: Built) -> None:
    loaded: set[str] = set()
    for action in built.actions:
        if isinstance(action, PluginAction):
            where = f"{case.file}:{action.line}" if action.line else case.where("timeline")
            if action.load and action.name in loaded:
                raise CaseError(f"plugin {action.name!r} is already loaded", where=where)
            if not action.load and action.name not in loaded:
                raise CaseError(f"plugin {action.name!r} is not loaded", where=where)
            (loaded.add if action.load else loaded.discard)(action.name)
            if action.load and action.spec:
                try:
                    _authorize_step(action.spec, case, where)
                    load_plugin(action.spec, case.file, where, source=PluginSource.case(case.file))
                except UntrustedPlugins:
                    raise
                except ConfigError as exc:
                    raise CaseError(exc.message, where=exc.where or where) from None
    labels = {t.label for t in built.turns if t.label}
    greetings = {t.label: number for number, t in enumerate(built.turns, start=1) if t.greeting}
    asked = sum(1 for t in built.turns if not t.greeting)  # turns with a request
    for index, spec in enumerate(case.data["assertions"]):
        key = f"assertions[{index}]"
        for turn_key in ("turn", "from", "to"):
            turn = spec.get(turn_key)
            if isinstance(turn, str) and turn not in ("last", "all") and turn not in labels:
                raise CaseError(f"{turn_key}: no turn labelled {turn!r} (turn labels: {', '.join(sorted(labels)) or 'none'})",
                                where=case.where(f"{key}.{turn_key}"))
            if isinstance(turn, int) and not (1 <= turn <= len(built.turns) or 1 <= -turn <= asked):
                raise CaseError(f"{turn_key}: turn {turn} does not exist (the conversation has {len(built.turns)} turn(s)"
                                f"{f', {asked} with a request' if asked != len(built.turns) else ''})",
                                where=case.where(f"{key}.{turn_key}"))
            if turn in greetings.values() or (isinstance(turn, str) and turn in greetings):
                raise CaseError(f"{turn_key}: turn {greetings.get(turn, turn) if isinstance(turn, str) else turn} is the "
                                "greeting: no request is made for it (as in zhin trace)", where=case.where(f"{key}.{turn_key}"))
        # A known provider the case does not run under is fine (a variant may narrow an inherited case's providers).
        unknown = [p for p in spec.get("providers", []) if p not in PROVIDERS]
        if unknown:
            raise CaseError(unknown_provider(unknown[0]), where=case.where(f"{key}.providers"))


# --- running ------------------------------------------------------------------------------------------------------


def assemble_turns(prepared: Prepared, provider: str, model: str | None) -> ProviderRun:
    """Every turn of the case's conversation under one provider profile (plugins load/unload in order), through
    the pipeline's ``Conversation``: the same sent-prefix carry as ``zhin trace``, and every plugin generation —
    the config's and the timeline's — released at the end."""
    case, config, built = prepared.case, prepared.config, prepared.built
    requests: list[AssembledRequest] = []
    labels: dict[str, int] = {}
    greetings: list[int] = []
    transforms = case.data.get("transforms") or []
    with Pipeline.open(config, provider=provider, model=model) as pipeline:
        conversation = pipeline.conversation(built.session)
        loaded: dict[str, Generation] = {}
        try:
            turn = 0  # turn k: the k-th turn point, as ``zhin trace`` numbers them (the greeting is turn 1, no request)
            for action in built.actions:
                if isinstance(action, PluginAction):
                    _plugin_action(action, pipeline.registry, loaded, case)
                    continue
                assert isinstance(action, TurnPoint)
                turn += 1
                if action.greeting:  # nobody asked the model for it (as in trace): it is only in the next prefix
                    greetings.append(turn)
                    assert action.reply_row is not None
                    conversation.greeting(action.reply_row)
                    continue
                request = conversation.request(action.upto, action.time, turn=turn, reply_row=action.reply_row)
                for spec in transforms:
                    body = TRANSFORMS[spec["type"]].apply(request, spec)
                    request = dataclasses.replace(request, request=body,
                                                  verdict=validate(request.profile.validator, body, request.model))
                if action.label:
                    labels[action.label] = len(requests)
                requests.append(request)
        finally:
            for generation in loaded.values():
                generation.release()
    return ProviderRun(provider=provider, model=requests[0].model if requests else (model or ""), requests=requests, labels=labels,
                       greetings=tuple(greetings))


def _authorize_step(spec: str, case: Case, where: str | None) -> None:
    """A ``plugin: {load: …}`` step may run: its file is inside the case's folder and exists (else the case file is
    wrong, exit 4), and the case file is trusted (else :class:`UntrustedPlugins`). Nothing of the plugin ran yet."""
    source = PluginSource.case(case.file)
    file = plugin_file(spec, case.file.parent)
    if file is not None:
        inside(file, source, spec, where)
        if not file.is_file():
            raise ConfigError(f"plugin {spec!r}: no such file {file}", where=where)
    authorize(source, [spec], where)


def _plugin_action(action: PluginAction, registry: PromptSegmentRegistry, loaded: dict[str, Generation], case: Case) -> None:
    where = f"{case.file}:{action.line}" if action.line else None
    if not action.load:
        loaded.pop(action.name).release()
        return
    generation = registry.generation(action.name)
    try:
        if action.spec:
            _authorize_step(action.spec, case, where)  # again: the file is executed again now, it may have changed
            load_plugin(action.spec, case.file, where, source=PluginSource.case(case.file))(generation)
        for segment in action.segments:
            generation.register(_text_segment(segment))
    except UntrustedPlugins:
        raise
    except ZhinError as exc:
        raise ConfigError(f"plugin {action.name!r}: {exc.message}", where=exc.where or where) from None
    except Exception as exc:  # the plugin's own bug: one line, never a traceback
        raise ConfigError(f"plugin {action.name!r} failed while registering: {type(exc).__name__}: {exc}", where=where) from None
    loaded[action.name] = generation


def _text_segment(segment: JSONObject) -> TextSegment:
    """A plugin step's inline segment (its schema checked the keys' types and the retention's values)."""
    retention = spec_text(segment, "retention", "preferred")
    if retention not in ("required", "preferred"):
        raise TypeError(f"retention {retention!r} is neither required nor preferred")
    return TextSegment(spec_text(segment, "id"), spec_text(segment, "kind"), spec_text(segment, "text"),
                       spec_number(segment, "weight"), "required" if retention == "required" else "preferred")


def _applies(spec: JSONObject, provider: str) -> bool:
    return "providers" not in spec or provider in spec_texts(spec, "providers")


def run_case(prepared: Prepared, options: EvalOptions, live_model: LiveModel | None = None) -> CaseResult:
    started = time.perf_counter()
    result = _run_case(prepared, options, live_model)
    result.duration = time.perf_counter() - started
    expect = options.expect_override or prepared.case.expect
    if expect == "fail" and result.status in ("passed", "failed"):
        failures = [a for a in result.assertions if a.status == "failed"]
        if failures:
            result.status = "passed"
            result.reason = f"negative control failed as it must: {failures[0].type} ({failures[0].provider}): {failures[0].message}"
        else:
            result.status = "failed"
            result.reason = "negative control passed: its assertions cannot tell the broken behaviour from the right one"
    return result


def _run_case(prepared: Prepared, options: EvalOptions, live_model: LiveModel | None) -> CaseResult:
    case = prepared.case
    providers = [(n, m) for n, m in prepared.providers if not options.providers or n in options.providers]
    if not providers and options.providers and not case.data.get("providers"):
        providers = [(n, None) for n in options.providers]
    names = [n for n, _ in providers]
    if not providers:
        return CaseResult(case, "skipped", f"no selected provider (the case runs under {', '.join(n for n, _ in prepared.providers)})", [])
    if case.requires_live and not options.live:
        return CaseResult(case, "skipped", "needs --live (a live model)", names)
    results: list[AssertionResult] = []
    rates: list[float] = []
    metrics: list[RunMetrics] = []
    could_not_run = False
    for provider, model in providers:
        try:
            run = assemble_turns(prepared, provider, model)
            error = None
            metrics.append(run_metrics(provider, run.requests))
        except ZhinError as exc:
            run, error = None, str(exc)
        for index, spec in enumerate(case.data["assertions"]):
            if not _applies(spec, provider):
                continue
            kind = ASSERTIONS[spec["type"]]
            line = case.line_of(f"assertions[{index}]")
            if kind.live:
                continue  # below, all live assertions together
            if spec["type"] == "assembly_error" or error is not None:
                results.append(_assembly_result(index, spec, provider, line, error))
                continue
            assert run is not None
            results.append(_check(index, spec, provider, line, run))
        live_specs = [(i, s) for i, s in enumerate(case.data["assertions"]) if ASSERTIONS[s["type"]].live and _applies(s, provider)]
        if live_specs and run is not None:
            rate, live_results, unreachable = _run_live(prepared, options, live_model, run, live_specs, provider)
            results.extend(live_results)
            could_not_run = could_not_run or unreachable
            if rate is not None:
                rates.append(rate)
    status: Status = "passed"
    if any(a.status == "error" for a in results):
        status = "error"
    elif any(a.status == "failed" for a in results):
        status = "failed"
    bad = next((a for a in results if a.status == status), None) if status != "passed" else None
    reason = f"{bad.type} ({bad.provider}): {bad.message}" if bad else ""
    return CaseResult(case, status, reason, names, results, pass_rate=min(rates) if rates else None, could_not_run=could_not_run,
                      metrics=metrics)


def _assembly_result(index: int, spec: JSONObject, provider: str, line: int, error: str | None) -> AssertionResult:
    kind = spec_text(spec, "type")
    if kind != "assembly_error":
        return AssertionResult(index, kind, provider, "error", f"could not assemble: {error}", line)
    if error is None:
        return AssertionResult(index, kind, provider, "failed", "the conversation assembled without error", line)
    if re.search(spec_text(spec, "matches"), error):
        return AssertionResult(index, kind, provider, "passed", "", line)
    return AssertionResult(index, kind, provider, "failed", f"error {error!r} does not match /{spec['matches']}/", line)


def _check(index: int, spec: JSONObject, provider: str, line: int, run: ProviderRun) -> AssertionResult:
    kind = spec_text(spec, "type")
    try:
        outcome: Outcome = ASSERTIONS[kind].check(run, spec)
    except LookupError as exc:
        return AssertionResult(index, kind, provider, "error", str(exc).strip("'\""), line)
    except ZhinError as exc:
        return AssertionResult(index, kind, provider, "error", str(exc), line)
    except Exception as exc:  # a bug in an assertion must not hide the other results
        return AssertionResult(index, kind, provider, "error", f"{type(exc).__name__}: {exc}", line)
    return AssertionResult(index, kind, provider, "passed" if outcome.ok else "failed", outcome.message, line)


def _run_live(prepared: Prepared, options: EvalOptions, live_model: LiveModel | None, run: ProviderRun,
              specs: list[tuple[int, JSONObject]], provider: str) -> tuple[float | None, list[AssertionResult], bool]:
    """Ask the live model ``repeat`` times for the chosen turn; each live assertion must pass in at least
    ``min_pass_rate`` of them."""
    case = prepared.case
    lines = {i: case.line_of(f"assertions[{i}]") for i, _ in specs}
    request = run.select(specs[0][1].get("turn"))[0][1]
    wire = request.profile.wire
    if wire != LIVE_WIRE:
        message = f"the live model speaks OpenAI chat; provider {provider!r} renders {wire}"
        return None, [AssertionResult(i, spec_text(s, "type"), provider, "error", message, lines[i]) for i, s in specs], False
    if live_model is None:  # a live case reaches here only with --live, which makes the model (make_live_model)
        message = "live assertions need the live model (--live)"
        return None, [AssertionResult(i, spec_text(s, "type"), provider, "error", message, lines[i]) for i, s in specs], True
    repeat = options.repeat or case.data.get("repeat", 1)
    min_rate = float(case.data.get("min_pass_rate", 1.0))
    passes = {i: 0 for i, _ in specs}
    all_passed = cached = 0
    for attempt in range(repeat):
        try:
            reply = live_model.complete(request.request, seed=options.seed + attempt)
        except ZhinError as exc:
            message = f"live model: {exc}"
            return None, [AssertionResult(i, spec_text(s, "type"), provider, "error", message, lines[i]) for i, s in specs], True
        run.replies = [reply]
        cached += bool(getattr(reply, "cached", False))
        every = True
        for i, spec in specs:
            outcome = _check(i, spec, provider, lines[i], run)
            passes[i] += outcome.status == "passed"
            every = every and outcome.status == "passed"
        all_passed += every
    results = []
    for i, spec in specs:
        rate = passes[i] / repeat
        status: Status = "passed" if rate >= min_rate else "failed"
        note = f"{passes[i]}/{repeat} passed (min_pass_rate {min_rate:g}" + (f", {cached} from cache)" if cached else ")")
        results.append(AssertionResult(i, spec_text(spec, "type"), provider, status, note, lines[i]))
    return all_passed / repeat, results, False


def run_offline_case(job: tuple[Prepared, EvalOptions]) -> CaseResult:
    """One case without a live model: the unit of work a worker process receives (data only; the case's config
    carries its ``PluginSource``, so its plugins are trusted exactly as in process)."""
    prepared, options = job
    return run_case(prepared, options)


def make_live_model(options: EvalOptions) -> LiveModel:
    from zhin_cli.tools.eval.live import LiveModel  # lazy: offline runs never import the client

    return LiveModel(base_url=options.base_url, api_key=options.api_key, model=options.model, use_cache=options.use_cache,
                     cache_dir=options.cache_dir)


def run_eval(paths: list[Path], options: EvalOptions, *, progress: Callable[[int, int], None] | None = None) -> EvalRun:
    """Load and check every case under ``paths`` (CaseError, exit 4, before anything runs), then run them.

    ``options.jobs`` cases at once, reported in file order whatever the value: offline in worker processes
    (core/parallel.py, like prefix-diff, report economy and stats cache: assembling is CPU work), live in threads
    (the time goes to waiting for the model, and the threads share one response cache and its counts)."""
    workers = check_jobs(options.jobs)
    if options.repeat is not None and options.repeat < 1:
        raise UsageError("--repeat must be at least 1")
    unknown = [p for p in options.providers if p not in PROVIDERS]
    if unknown:
        raise UsageError(f"--provider: {unknown_provider(unknown[0])}")
    cases = load_cases(paths)
    if not cases:
        raise UsageError(f"no case files (*.yaml) under {', '.join(map(str, paths))}")
    prepared = [prepare(case, project=options.project_config) for case in cases]
    live_model = make_live_model(options) if options.live and any(p.case.requires_live for p in prepared) else None
    started = time.perf_counter()
    done = 0
    results: list[CaseResult | None] = [None] * len(prepared)

    def one(position: int) -> None:
        results[position] = run_case(prepared[position], options, live_model)

    if live_model is None:
        results = list(ordered_map(run_offline_case, [(p, options) for p in prepared], jobs=workers, done=progress,
                                   prepare=counter))  # the default tokenizer, loaded once for every worker
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for _ in pool.map(one, range(len(prepared))):
                done += 1
                if progress:
                    progress(done, len(prepared))
    answers = None
    if live_model is not None:
        answers = LiveAnswers(live_model.answers, live_model.from_cache,
                              str(live_model.cache_dir) if live_model.use_cache else None)
    return EvalRun([r for r in results if r is not None], options.live, time.perf_counter() - started, answers)
