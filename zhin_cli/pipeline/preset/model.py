"""What a SillyTavern chat-completion preset declares, as data (docs/spec/sillytavern.md §1).

The importer (``importer.py``) fills these; the skeleton builder (``skeleton.py``) reads them. Nothing
here knows about sessions or providers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from zhin_cli.pipeline.preset.worldinfo import WorldInfo

if TYPE_CHECKING:
    from zhin_cli.core.jsontext import JSON, JSONObject

Role = Literal["system", "user", "assistant"]
Severity = Literal["error", "warning", "info"]

# Chat Completion's global prompt order uses the dummy character id 100001; 100000 is the pre-Aug-2023 one.
CHARACTER_ID = "100001"
LEGACY_CHARACTER_ID = "100000"

# Relative prompts sent even when ``system_prompt`` is not exactly false (ST: known identifiers).
BUILTIN_PROMPTS = ("main", "nsfw", "jailbreak", "enhanceDefinitions")
# ST markers whose content is generated at run time, and zhin's own holes (preset-message-skeleton).
ST_MARKERS = ("chatHistory", "dialogueExamples", "worldInfoBefore", "worldInfoAfter", "charDescription",
              "charPersonality", "scenario", "personaDescription")
ZHIN_HOLES = ("worldBookBefore", "chatHistory", "worldBookAfter", "currentTurn", "postTurn")
# ST markers that mean one of our holes: the same content, whichever name the preset uses.
HOLE_ALIASES = {"worldInfoBefore": "worldBookBefore", "worldInfoAfter": "worldBookAfter"}
# Runtime-filled markers ST appends after the ordered blocks when the order does not mention them.
APPENDED_WHEN_MISSING = ("worldBookBefore", "worldBookAfter", "charDescription", "charPersonality", "scenario",
                         "personaDescription")
# ST's built-in order, used when a preset has no order for 100001 (nor the legacy 100000).
DEFAULT_ORDER = (("main", True), ("worldInfoBefore", True), ("personaDescription", True), ("charDescription", True),
                 ("charPersonality", True), ("scenario", True), ("enhanceDefinitions", False), ("nsfw", True),
                 ("worldInfoAfter", True), ("dialogueExamples", True), ("chatHistory", True), ("jailbreak", True))
POST_PROCESSING = ("", "merge", "merge_tools", "semi", "semi_tools", "strict", "strict_tools", "single", "claude")
MAX_INJECTION_DEPTH = 10000  # ST script.js: in-chat entries are injected for depths 0…10000 only
PLACEHOLDER = "[Start a new chat]"  # ST's shipped config.yaml promptPlaceholder (strict post-processing)

# Top-level keys a saved ST preset carries (openai.js settingsToUpdate) plus legacy keys seen in real
# files. Keys outside this set are kept and reported (lint: info), never an error.
KNOWN_TOP_LEVEL = frozenset("""
prompts prompt_order openai_max_context openai_max_tokens max_context_unlocked names_behavior send_if_empty
impersonation_prompt new_chat_prompt new_group_chat_prompt new_example_chat_prompt continue_nudge_prompt
group_nudge_prompt wi_format scenario_format personality_format squash_system_messages custom_prompt_post_processing
continue_prefill continue_postfix assistant_prefill assistant_impersonation use_sysprompt bias_preset_selected
extensions temperature frequency_penalty presence_penalty top_p top_k top_a min_p repetition_penalty seed n
stream_openai reasoning_effort verbosity show_thoughts function_calling tool_call_recurse_limit tool_reasoning_mode
enable_web_search request_images request_image_aspect_ratio request_image_resolution media_inlining
inline_image_quality chat_completion_source group_models sort_models show_external_models bypass_status_check
reverse_proxy proxy_password custom_model custom_url custom_include_body custom_exclude_body custom_include_headers
custom_prompt_post_processing openai_model claude_model openrouter_model openrouter_use_fallback openrouter_providers
openrouter_quantizations openrouter_allow_fallbacks openrouter_middleout ai21_model mistralai_model cohere_model
perplexity_model groq_model chutes_model siliconflow_model siliconflow_endpoint minimax_model minimax_endpoint
electronhub_model nanogpt_model nanogpt_provider nanogpt_payg_override deepseek_model aimlapi_model xai_model
pollinations_model pollinations_endpoint moonshot_model fireworks_model cometapi_model google_model vertexai_model
vertexai_auth_mode vertexai_region vertexai_express_project_id zai_model zai_endpoint workers_ai_model
workers_ai_account_id azure_base_url azure_deployment_name azure_api_version azure_openai_model
names_in_completion claude_use_sysprompt use_makersuite_sysprompt image_inlining video_inlining audio_inlining
openrouter_sort_models openrouter_group_models wrap_in_quotes chutes_sort_models electronhub_sort_models
electronhub_group_models windowai_model zerooneai_model genamt max_length main_prompt nsfw_prompt jailbreak_prompt
nsfw_first nsfw_avoidance_prompt jailbreak_system legacy_streaming ai21_model scale_model
""".split())
KNOWN_PROMPT_FIELDS = frozenset({"identifier", "name", "role", "content", "system_prompt", "marker", "enabled",
                                 "injection_position", "injection_depth", "injection_order", "injection_trigger",
                                 "forbid_overrides", "extension", "position"})
KNOWN_EXTENSIONS = frozenset({"regex_scripts", "zhin"})


@dataclass(frozen=True)
class Diagnostic:
    severity: Severity
    code: str
    message: str
    where: str | None = None  # "file:line" or a key path

    def as_dict(self) -> dict[str, str | None]:
        return {"severity": self.severity, "code": self.code, "message": self.message, "where": self.where}


@dataclass(frozen=True)
class PromptEntry:
    identifier: str
    name: str = ""
    role: Role = "system"
    role_set: bool = False  # the preset set a role (it then overrides a marker's own role)
    content: str = ""
    system_prompt: bool | None = None
    marker: bool = False
    enabled: bool | None = None  # ignored for assembly, as in ST: only prompt_order[].enabled counts
    injection_position: int = 0  # 0 relative (by order), 1 in-chat (by depth)
    injection_depth: int | None = None  # None: missing or not an integer → never injected (ST compares with ===)
    injection_order: int = 100
    injection_trigger: tuple[str, ...] = ()
    forbid_overrides: bool = False
    extra: JSONObject = field(default_factory=dict)  # unknown fields, kept
    line: int | None = None

    @property
    def in_chat(self) -> bool:
        return self.injection_position == 1

    def triggered(self, generation: str = "normal") -> bool:
        return not self.injection_trigger or generation in self.injection_trigger


@dataclass(frozen=True)
class OrderEntry:
    identifier: str
    enabled: bool = True


@dataclass(frozen=True)
class RegexScript:
    """A preset-bound regex script (``extensions.regex_scripts``); only ``promptOnly`` ones run at assembly."""

    name: str
    pattern: str
    flags: str
    replace: str
    trim_strings: tuple[str, ...] = ()
    placement: tuple[int, ...] = ()
    disabled: bool = False
    prompt_only: bool = False
    markdown_only: bool = False
    min_depth: int | None = None
    max_depth: int | None = None
    line: int | None = None  # where the script starts in the preset file (lint)


@dataclass(frozen=True)
class GroupOptions:
    """A SillyTavern group chat the request is made in (set by a tool that reads ST's group file, check-capture;
    not a zhin.yaml option): ST then opens the history with ``new_group_chat_prompt`` (``{{group}}``: every
    member), ends it with ``group_nudge_prompt``, and names the speaker of each example message in its text."""

    members: tuple[str, ...]  # every member's name, in member order (muted members too)
    muted: tuple[str, ...] = ()  # the muted members' names

    @property
    def names(self) -> str:
        """``{{group}}``: the members' names joined as ST joins them."""
        return ", ".join(self.members)

    @property
    def not_muted(self) -> str:
        """``{{groupNotMuted}}``: the members who are not muted, joined as ``{{group}}``."""
        return ", ".join(m for m in self.members if m not in self.muted)

    def others(self, char: str) -> str:
        """``{{notChar}}`` in the group (ST 1.18's macro environment): the members who are not muted, but for
        ``char`` (the speaker), joined as ``{{group}}`` — the user is not among them."""
        return ", ".join(m for m in self.members if m not in self.muted and m != char)


@dataclass(frozen=True)
class CardOptions:
    """Values ST takes from the character card and persona; zhin has no cards, so they come from the
    preset's ``extensions.zhin`` block or the ``preset:`` mapping in zhin.yaml (the latter wins)."""

    user: str | None = None  # {{user}}; default (skeleton.macro_names): the private chat's member, else "User"
    char: str | None = None  # {{char}}; default: the bot's name
    persona: str = ""  # {{persona}} and the personaDescription marker
    description: str = ""  # charDescription marker, {{description}}
    personality: str = ""  # charPersonality marker (through personality_format)
    scenario: str = ""  # scenario marker (through scenario_format)
    examples: str = ""  # dialogueExamples marker: <START>-separated example chats
    world_book_after: str = ""  # worldBookAfter / worldInfoAfter hole
    seed: int = 0  # seeds {{roll}} / {{random}} (with the session id and the request position)
    # ST's first_mes: opens the history of a session that stored no greeting (assemble.Assembler.greeted)
    greeting: str = ""
    # the chat variables at the start of the request (ST's chat_metadata.variables); not a zhin.yaml option:
    # zhin's scope is one request, so this is empty except where a tool sets it (stcheck's state probe)
    variables: tuple[tuple[str, str], ...] = ()  # (name, value) pairs: hashable, as the options are
    # ST's World Info books, settings and the chat's Author's Note (worldinfo.py); not a zhin.yaml option: set by a
    # tool that reads ST's own files (check-capture). None: no World Info, as before
    world_info: WorldInfo | None = None
    group: GroupOptions | None = None  # a SillyTavern group chat (check-capture); None: not one, as before

    FIELDS = ("user", "char", "persona", "description", "personality", "scenario", "examples", "world_book_after", "seed",
              "greeting")

    @classmethod
    def from_values(cls, values: Mapping[str, str | int | None]) -> CardOptions:
        """The options a checked mapping sets (``importer.card_options``: text, and an integer ``seed``); a key it
        leaves out or sets to None keeps the default."""
        texts = {key: value for key, value in values.items() if isinstance(value, str)}
        seed = values.get("seed")
        return cls(user=texts.get("user"), char=texts.get("char"), persona=texts.get("persona", ""),
                   description=texts.get("description", ""), personality=texts.get("personality", ""),
                   scenario=texts.get("scenario", ""), examples=texts.get("examples", ""),
                   world_book_after=texts.get("world_book_after", ""), greeting=texts.get("greeting", ""),
                   seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else 0)


@dataclass
class Preset:
    name: str
    path: Path | None
    prompts: dict[str, PromptEntry]
    order: list[OrderEntry]
    order_source: str  # "100001", "100000" (legacy), "default" (ST's built-in order)
    settings: JSONObject  # the top-level keys, as found (defaults via ``setting``)
    regex_scripts: list[RegexScript] = field(default_factory=list)
    card: CardOptions = field(default_factory=CardOptions)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    unknown_keys: list[str] = field(default_factory=list)
    unknown_extensions: list[str] = field(default_factory=list)
    builtin: bool = False  # the built-in default (the ADR 0041 layout)
    # Run state, not file content: regex scripts (index → reason) that hit a bound (time, growth) in this run;
    # every later request of the run skips them without trying again (and warns).
    skipped_scripts: dict[int, str] = field(default_factory=dict)

    def setting(self, key: str, default: JSON) -> JSON:
        value = self.settings.get(key, default)
        return default if value is None else value

    @property
    def squash(self) -> bool:
        return self.setting("squash_system_messages", False) is True

    @property
    def post_processing(self) -> str:
        mode = str(self.setting("custom_prompt_post_processing", "") or "")
        return "merge" if mode == "claude" else mode
