"""``zhin stats cache``: prompt-cache hit rates from the usage logged on stored assistant messages.

Every stored assistant message is one request to the model; the usage it logged says how many prompt tokens
were read from the provider's cache. Requests are split into *first of a cache group* and *later in a
group* (``cachegroups.first_of_group``: a group is a run of one session's requests to one provider/model,
each within the provider's cache lifetime of the previous one). The first request of a group cannot hit
(the cache is cold); the later ones show whether the prompt prefix is stable — the split of the preset
note's baseline (first 8.6 %, later 20.7 %).

Usage objects are read in whatever shape they were stored (upstream zhin's ``{input, cacheRead, …}``,
OpenAI, Anthropic, DeepSeek, Gemini) and normalised with ``usage.normalize_usage``. Hit rates are
token-weighted: cache-read tokens ÷ prompt tokens, over the requests that reported both; requests whose
usage does not report cache reads are counted as *unreported*, never as misses.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from zhin_cli.cache.groups import first_of_group
from zhin_cli.cache.usage import NormalizedUsage, UsageRecord, usage_records
from zhin_cli.core.jsontext import JSON, JSONObject
from zhin_cli.core.model import Session
from zhin_cli.core.timezones import human_ms, iso_ms
from zhin_cli.pipeline.providers import PROVIDERS, CacheRules, resolve_profile


@dataclass
class Bucket:
    requests: int = 0  # requests counted here (with usage that reports cache reads)
    unreported: int = 0  # requests whose usage does not say how much was read from the cache
    prompt_tokens: int = 0
    cache_read_tokens: int = 0
    hits: int = 0  # requests that read anything from the cache

    def add(self, usage: NormalizedUsage | None) -> None:
        if usage is None or usage.cache_read is None or usage.total_prompt is None:
            self.unreported += 1
            return
        self.requests += 1
        self.prompt_tokens += usage.total_prompt
        self.cache_read_tokens += usage.cache_read
        self.hits += usage.cache_read > 0

    @property
    def hit_rate(self) -> float | None:
        return self.cache_read_tokens / self.prompt_tokens if self.prompt_tokens else None

    def merge(self, other: Bucket) -> None:
        self.requests += other.requests
        self.unreported += other.unreported
        self.prompt_tokens += other.prompt_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.hits += other.hits

    def as_dict(self) -> JSONObject:
        return {
            "requests": self.requests, "unreported": self.unreported, "prompt_tokens": self.prompt_tokens,
            "cache_read_tokens": self.cache_read_tokens, "requests_with_hits": self.hits, "hit_rate": self.hit_rate,
        }


@dataclass
class ModelStats:
    provider: str
    model: str
    lifetime_seconds: int
    first: Bucket = field(default_factory=Bucket)
    later: Bucket = field(default_factory=Bucket)
    groups: int = 0

    def as_dict(self) -> JSONObject:
        return {
            "provider": self.provider, "model": self.model, "cache_lifetime_seconds": self.lifetime_seconds,
            "groups": self.groups, "first": self.first.as_dict(), "later": self.later.as_dict(),
        }


@dataclass
class CacheStats:
    sessions: int = 0
    since: int | None = None  # ms, inclusive
    until: int | None = None  # ms, inclusive
    models: dict[tuple[str, str], ModelStats] = field(default_factory=dict)
    newest: int | None = None  # ms: the newest request that logged usage, inside the period or not
    oldest: int | None = None  # ms: the oldest one

    @property
    def counted(self) -> int:
        """Requests inside the period (with or without usable usage)."""
        return sum(row.first.requests + row.first.unreported + row.later.requests + row.later.unreported
                   for row in self.models.values())

    def merge(self, other: CacheStats) -> None:
        """Add another share of the same question (same period and lifetimes): counts add up."""
        self.sessions += other.sessions
        self.newest = max((t for t in (self.newest, other.newest) if t is not None), default=None)
        self.oldest = min((t for t in (self.oldest, other.oldest) if t is not None), default=None)
        for key, row in other.models.items():
            mine = self.models.setdefault(key, ModelStats(row.provider, row.model, row.lifetime_seconds))
            mine.groups += row.groups
            mine.first.merge(row.first)
            mine.later.merge(row.later)

    def as_dict(self) -> JSONObject:
        rows: list[JSON] = [self.models[key].as_dict() for key in sorted(self.models)]
        return {"version": 1, "sessions": self.sessions, "since": self.since, "since_iso": iso_ms(self.since),
                "until": self.until, "until_iso": iso_ms(self.until), "requests_in_period": self.counted,
                "newest_usage": self.newest, "newest_usage_iso": iso_ms(self.newest),
                "oldest_usage": self.oldest, "oldest_usage_iso": iso_ms(self.oldest), "models": rows}

    def period_line(self, days: int | None = None) -> str:
        """Which period was read and, when it held no request, where the logged usage is: ``period: the last 3
        days (2025-10-28 14:02 UTC to 2025-10-31 14:02 UTC) · no usage in it; newest 2025-10-30 14:02 UTC``."""
        if self.since is None and self.until is None:
            period = "period: all logged usage"
        else:
            start = human_ms(self.since) if self.since is not None else "the first request"
            end = human_ms(self.until) if self.until is not None else "now"
            period = f"period: {f'the last {days} day' + ('s' if days != 1 else '') + ' ' if days else ''}({start} to {end})"
        if self.counted:
            return f"{period} · {self.counted:,} request(s) in it"
        if self.newest is None:
            return f"{period} · no logged usage in the {'session' if self.sessions == 1 else 'sessions'} read"
        span = f"in the last {days} day{'s' if days != 1 else ''}" if days else "in this period"
        return (f"{period} · no usage {span}; newest {human_ms(self.newest)}, oldest {human_ms(self.oldest or self.newest)}"
                f" ({self.where_usage_is(days)})")

    def where_usage_is(self, days: int | None) -> str:
        """The options that show the newest usage: the period ending on its day (``--until`` takes a date's end)."""
        assert self.newest is not None
        day = datetime.fromtimestamp(self.newest / 1000, UTC).date().isoformat()
        until = f"--until {day}" + (f" --days {days}" if days else "")
        return f"to see it: {until}, or neither option for all of it"


def cache_rules(provider: str, model: str) -> CacheRules:
    """The provider's cache rules for this model; unknown providers get the default rules (5 min lifetime)."""
    if provider in PROVIDERS:
        return resolve_profile(provider, model).cache
    return CacheRules()


def cache_stats(
    sessions: Iterable[Session],
    *,
    since: int | None = None,
    until: int | None = None,
    lifetime_seconds: int | None = None,
) -> CacheStats:
    """Hit rates per provider/model, first-of-group vs later. ``since``/``until`` (ms) select the requests
    that are counted; groups are found over every request, so a request just after ``since`` is still
    "later" when its group began before it."""
    stats = CacheStats(since=since, until=until)
    for session in sessions:
        stats.merge(session_cache_stats(session, since=since, until=until, lifetime_seconds=lifetime_seconds))
    return stats


def session_cache_stats(session: Session, *, since: int | None = None, until: int | None = None,
                        lifetime_seconds: int | None = None) -> CacheStats:
    """One session's share of :func:`cache_stats` (groups never span sessions, so sessions add up)."""
    stats = CacheStats(sessions=1, since=since, until=until)
    streams: dict[tuple[str, str], list[UsageRecord]] = {}
    logged: list[int] = []  # when each request that logged usage was made
    for record in usage_records(session):
        streams.setdefault((record.provider, record.model), []).append(record)
        if record.kind is not None:
            logged.append(record.timestamp)
    stats.newest = max(logged, default=None)
    stats.oldest = min(logged, default=None)
    for (provider, model), records in streams.items():
        lifetime = lifetime_seconds if lifetime_seconds is not None else cache_rules(provider, model).lifetime_seconds
        row = stats.models.setdefault((provider, model), ModelStats(provider, model, lifetime))
        flags = first_of_group([r.timestamp // 1000 for r in records], lifetime)
        for record, first in zip(records, flags, strict=True):
            if (since is not None and record.timestamp < since) or (until is not None and record.timestamp > until):
                continue
            row.groups += first
            (row.first if first else row.later).add(record.usage)
    return stats


@dataclass(frozen=True)
class StatsJob:
    """One session of ``zhin stats cache``, as a worker process receives it: data only (core/parallel.py)."""

    ref: str
    db: str | None
    cwd: Path
    since: int | None
    until: int | None
    lifetime_seconds: int | None


def stats_job(job: StatsJob) -> CacheStats:
    from zhin_cli.store import load_session

    session = load_session(job.ref, db=job.db, cwd=job.cwd)
    return session_cache_stats(session, since=job.since, until=job.until, lifetime_seconds=job.lifetime_seconds)


def stored_session_refs(refs: list[str], db: str) -> list[str]:
    """The named sessions, or (none named) the id of every session in the database ``db``."""
    if refs:
        return list(refs)
    from zhin_cli.store.db import SessionDatabase, parse_db

    with SessionDatabase(parse_db(db)) as database:
        return [str(row["session_id"]) for row in database.list_sessions()]


def run_cache_stats(refs: list[str], *, db: str | None, cwd: Path, since: int | None = None, until: int | None = None,
                    lifetime_seconds: int | None = None, jobs: int | None = 1) -> CacheStats:
    """:func:`cache_stats` over session references (``refs``; none: every session of ``db``), loaded one at a
    time; ``jobs`` sessions at once in worker processes (``None``: every core). The same figures for every
    ``jobs``: per-session counts are integers, added in input order."""
    from zhin_cli.core.parallel import check_jobs, ordered_map

    workers = check_jobs(jobs)
    if not refs and db is None:
        from zhin_cli.core.errors import UsageError

        raise UsageError("name the sessions, or give the database whose sessions to count (--db)")
    chosen = stored_session_refs(refs, db or "")
    stats = CacheStats(since=since, until=until)
    for part in ordered_map(stats_job, [StatsJob(ref, db, cwd, since, until, lifetime_seconds) for ref in chosen],
                            jobs=workers):
        stats.merge(part)
    return stats
