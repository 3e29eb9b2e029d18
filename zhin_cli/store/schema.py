"""The tables we read and write, as SQLAlchemy Core metadata.

Upstream's own tables are declared exactly as upstream zhin creates them (``reference/zhin-upstream.md``
§2.2); the ADR 0041 tables (``ai_session_profiles``, ``ai_scene_members``) as the ADR §6 describes them;
``zhin_scene_changes`` is ours (scene facts over time, so a JSONL round trip through a database loses
nothing). See ``docs/storage.md``.
"""

from __future__ import annotations

from sqlalchemy import Column, Integer, MetaData, PrimaryKeyConstraint, Table, Text

metadata = MetaData()

agent_sessions = Table(
    "agent_sessions",
    metadata,
    Column("session_id", Text, primary_key=True),
    Column("session_key", Text, nullable=False),
    Column("model", Text, server_default=""),
    Column("status", Text, server_default="active"),
    Column("active_leaf_message_id", Integer, nullable=True),
    Column("created_at", Integer),
    Column("updated_at", Integer),
)

agent_messages = Table(
    "agent_messages",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("session_id", Text, nullable=False),
    Column("role", Text, nullable=False),
    Column("payload", Text, nullable=False),
    Column("parent_id", Integer, nullable=True),
    Column("extra", Text, server_default=""),
    Column("timestamp", Integer, nullable=False),
)

agent_summaries = Table(
    "agent_summaries",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("session_id", Text, nullable=False),
    Column("summary", Text, nullable=False),
    Column("anchor_message_id", Integer),
    Column("branch_anchor_message_id", Integer, nullable=True),
    Column("created_at", Integer),
)

conversation_events = Table(
    "conversation_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("event_id", Text, unique=True),
    Column("conversation_key", Text),
    Column("message_key", Text, server_default=""),
    Column("event_json", Text),
    Column("time", Integer),
)

ai_session_profiles = Table(
    "ai_session_profiles",
    metadata,
    Column("session_key", Text, primary_key=True),
    Column("platform", Text),
    Column("scene_id", Text),
    Column("scene_type", Text),
    Column("title", Text),
    Column("admins", Text),  # JSON array of user ids
    Column("muted_all", Integer),
    Column("bot_role", Text),
    Column("mute_until", Integer),
    Column("owner_id", Text),
    Column("member_count", Integer),
    Column("facts_updated_at", Integer),
    # toolkit extensions: facts the session line of the JSONL carries
    Column("bot_user_id", Text),
    Column("bot_name", Text),
    Column("bot_nickname", Text),
    Column("timezone", Text),
)

ai_scene_members = Table(
    "ai_scene_members",
    metadata,
    Column("platform", Text, nullable=False),
    Column("scene_key", Text, nullable=False),
    Column("user_id", Text, nullable=False),
    Column("platform_role", Text),
    Column("card", Text),
    Column("title", Text),
    Column("muted_until", Integer),
    Column("updated_at", Integer),
    PrimaryKeyConstraint("platform", "scene_key", "user_id"),
)

zhin_scene_changes = Table(
    "zhin_scene_changes",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("session_id", Text, nullable=False),
    Column("timestamp", Integer, nullable=False),
    Column("changes", Text, nullable=False),  # JSON object of scene facts
)

REQUIRED_TABLES = ("agent_sessions", "agent_messages")
