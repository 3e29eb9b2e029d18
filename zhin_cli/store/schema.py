"""The tables we read and write, as SQLAlchemy Core metadata.

Upstream's own tables are declared exactly as upstream zhin creates them (``docs/spec/zhin-upstream.md``
§2.2); the ADR 0041 tables (``ai_session_profiles``, ``ai_scene_members``) as the ADR §6 describes them;
``zhin_scene_changes`` is ours (scene facts over time, so a JSONL round trip through a database loses
nothing). See ``docs/storage.md``.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Integer, MetaData, PrimaryKeyConstraint, String, Table, Text
from sqlalchemy.dialects.mysql import LONGTEXT

metadata = MetaData()

# MySQL/MariaDB cannot index TEXT and cap TEXT at 64 KiB: key columns are VARCHAR there (binary collation, so
# lookups compare bytes as SQLite and PostgreSQL do) and message bodies LONGTEXT. Elsewhere both stay TEXT.
Key = Text().with_variant(String(255, collation="utf8mb4_bin"), "mysql", "mariadb")
Body = Text().with_variant(LONGTEXT(), "mysql", "mariadb")

# Upstream's `integer` columns hold ms timestamps, which overflow a 4-byte INTEGER on PostgreSQL/MySQL: they are
# BIGINT there. On SQLite it stays INTEGER, so `INTEGER PRIMARY KEY` keeps aliasing the rowid as upstream's does.
Int = BigInteger().with_variant(Integer(), "sqlite")

agent_sessions = Table(
    "agent_sessions",
    metadata,
    Column("session_id", Key, primary_key=True),
    Column("session_key", Text, nullable=False),
    Column("model", Text, server_default=""),
    Column("status", Text, server_default="active"),
    Column("active_leaf_message_id", Int, nullable=True),
    Column("created_at", Int),
    Column("updated_at", Int),
)

agent_messages = Table(
    "agent_messages",
    metadata,
    Column("id", Int, primary_key=True, autoincrement=True),
    Column("session_id", Text, nullable=False),
    Column("role", Text, nullable=False),
    Column("payload", Body, nullable=False),
    Column("parent_id", Int, nullable=True),
    Column("extra", Body, server_default=""),
    Column("timestamp", Int, nullable=False),
)

agent_summaries = Table(
    "agent_summaries",
    metadata,
    Column("id", Int, primary_key=True, autoincrement=True),
    Column("session_id", Text, nullable=False),
    Column("summary", Body, nullable=False),
    Column("anchor_message_id", Int),
    Column("branch_anchor_message_id", Int, nullable=True),
    Column("created_at", Int),
)

conversation_events = Table(
    "conversation_events",
    metadata,
    Column("id", Int, primary_key=True, autoincrement=True),
    Column("event_id", Key, unique=True),
    Column("conversation_key", Text),
    Column("message_key", Text, server_default=""),
    Column("event_json", Body),
    Column("time", Int),
)

ai_session_profiles = Table(
    "ai_session_profiles",
    metadata,
    Column("session_key", Key, primary_key=True),
    Column("platform", Text),
    Column("scene_id", Text),
    Column("scene_type", Text),
    Column("title", Text),
    Column("admins", Text),  # JSON array of user ids
    Column("muted_all", Int),
    Column("bot_role", Text),
    Column("mute_until", Int),
    Column("owner_id", Text),
    Column("member_count", Int),
    Column("facts_updated_at", Int),
    # toolkit extensions: facts the session line of the JSONL carries
    Column("bot_user_id", Text),
    Column("bot_name", Text),
    Column("bot_nickname", Text),
    Column("timezone", Text),
)

ai_scene_members = Table(
    "ai_scene_members",
    metadata,
    Column("platform", Key, nullable=False),
    Column("scene_key", Key, nullable=False),
    Column("user_id", Key, nullable=False),
    Column("platform_role", Text),
    Column("card", Text),
    Column("title", Text),
    Column("muted_until", Int),
    Column("updated_at", Int),
    PrimaryKeyConstraint("platform", "scene_key", "user_id"),
)

zhin_scene_changes = Table(
    "zhin_scene_changes",
    metadata,
    Column("id", Int, primary_key=True, autoincrement=True),
    Column("session_id", Text, nullable=False),
    Column("timestamp", Int, nullable=False),
    Column("changes", Body, nullable=False),  # JSON object of scene facts
)

zhin_lines = Table(
    "zhin_lines",
    metadata,
    # ours: the lines of an imported epoch that upstream's tables cannot hold as written — its session line (facts
    # per epoch, where ai_session_profiles holds one row per key), its member lines (ai_scene_members: one row per
    # member of the key) and its summary lines (unknown keys) — verbatim JSON, so a round trip loses nothing
    Column("id", Int, primary_key=True, autoincrement=True),
    Column("session_id", Key, nullable=False, index=True),
    Column("kind", Text, nullable=False),  # "session", "member" or "summary"
    Column("summary_id", Int, nullable=True),  # a summary line's agent_summaries row (id, or SQLite's rowid)
    Column("line", Body, nullable=False),
)

zhin_imported_events = Table(
    "zhin_imported_events",
    metadata,
    # ours: which conversation_events rows `zhin import --events` already turned into agent_messages rows
    Column("event_id", Key, primary_key=True),
    Column("session_id", Text, nullable=False),
    Column("message_id", Int),
)

REQUIRED_TABLES = ("agent_sessions", "agent_messages")
