"""zhin.yaml's published JSON Schema (``zhin schema config``) and the loader that validates with it (issue 17 §4):
nothing is silently ignored — unknown keys at any level, unknown provider names, unknown segment ids in
``segments.texts`` / ``segments.remove`` (checked once plugins registered), a text for a segment that has none —
each one line naming ``file:line``, exit 3. Negative controls: every config the repository ships still loads,
and the same keys spelled right take effect."""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from zhin_cli.core.errors import ConfigError
from zhin_cli.pipeline.config import load_config, parse_config
from zhin_cli.pipeline.config_schema import config_schema
from zhin_cli.pipeline.providers import PROFILES

ROOT = Path(__file__).resolve().parent.parent
SESSION = ROOT / "fixtures" / "private-chat.jsonl"
Run = Callable[..., CompletedProcess[str]]

PLUGIN = '''
from zhin_cli.pipeline.segments import TextSegment

def register(generation):
    generation.register(TextSegment("plugin.house", "platform", "plugin text", weight=5))
'''


def write(folder: Path, body: str, name: str = "zhin.yaml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(body).lstrip("\n"), encoding="utf-8")
    return path


def refused(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        config = load_config(path)
        _, generations = config.registry()
        for generation in generations:
            generation.release()
    return caught.value


def line_of(path: Path, needle: str) -> int:
    return next(i for i, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if needle in text)


def texts_of(path: Path) -> dict[str, str]:
    registry, generations = load_config(path).registry()
    try:
        return {s.id: getattr(s, "text", None) for s in registry.ordered()}
    finally:
        for generation in generations:
            generation.release()


# --- the published schema ------------------------------------------------------------------------------------------


def test_zhin_schema_config_prints_a_valid_draft_2020_12_schema(zhin: Run) -> None:
    result = zhin("schema", "config")
    assert result.returncode == 0, result.stderr
    schema = json.loads(result.stdout)
    Draft202012Validator.check_schema(schema)
    assert schema == json.loads(json.dumps(config_schema()))
    # the published schema takes any name (a plugin's provider too); it lists the registered ones as examples
    assert schema["properties"]["providers"]["propertyNames"]["examples"] == sorted(PROFILES)
    assert schema["additionalProperties"] is False


def readme_config() -> Any:
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")  # moved from README (issue 31)
    block = text[text.index("# Configuration: `zhin.yaml`"):]
    return yaml.safe_load(block[block.index("```yaml") + 7: block.index("```", block.index("```yaml") + 7)])


def test_every_config_the_repository_ships_is_valid() -> None:
    """Negative control for every refusal below: the README's example, each eval case's ``config:`` and every
    zhin.yaml in the checkout pass the schema and load."""
    validator = Draft202012Validator(config_schema())
    found = [("README.md", readme_config())]
    for path in sorted((ROOT / "eval_cases").glob("*.yaml")):
        for case in yaml.safe_load(path.read_text(encoding="utf-8"))["cases"]:
            if "config" in case:
                found.append((f"{path.name} {case['id']}", case["config"]))
    for path in ROOT.rglob("zhin.yaml"):
        if not {".venv", "build", ".git"} & set(path.parts):
            found.append((str(path), yaml.safe_load(path.read_text(encoding="utf-8"))))
    assert len(found) >= 7
    for name, data in found:
        assert [e.message for e in validator.iter_errors(data)] == [], name
        if name != "README.md":  # the README's plugin and preset files are examples, not files
            parse_config(data)


def test_every_eval_case_still_prepares(monkeypatch: pytest.MonkeyPatch) -> None:
    from zhin_cli.tools.eval.cases import load_cases
    from zhin_cli.tools.eval.runner import prepare

    monkeypatch.setenv("ZHIN_ALLOW_PLUGINS", "1")  # the case files' own plugins (segments of the negative controls)
    cases = load_cases([ROOT / "eval_cases"])
    for case in cases:
        prepared = prepare(case)
        assert prepared.config is not None


# --- refusals: each one line at the key's line ----------------------------------------------------------------------

REFUSED = [
    ("modle: gpt-4o\n", "modle", "unknown config keys ['modle']"),
    ("budget:\n  max_char: 10\n", "max_char", "unknown budget keys ['max_char']"),
    ("window:\n  max_messages: 10\n  cutto: 3\n", "cutto", "unknown window keys ['cutto']"),
    ("segments:\n  text:\n    core.rules: x\n", "text:", "unknown segments keys ['text']"),
    ("segments:\n  add:\n    - id: a\n      kind: system\n      colour: red\n", "colour", "unknown segments.add[0] keys ['colour']"),
    ("segments:\n  add:\n    - id: a\n", "- id: a", "segments.add[0] needs kind"),
    # inside a provider's overrides the profile's own check speaks, at the provider's line
    ("providers:\n  openai:\n    colour: red\n", "openai:", "provider override keys ['colour'] not supported"),
    ("providers:\n  opena1:\n    prefill: false\n", "opena1", "unknown provider 'opena1' under providers"),
    ("tools:\n  - type: function\n    function: {name: w, descripton: x}\n", "descripton", "unknown tools[0].function keys ['descripton']"),
    ("tools:\n  - {description: x}\n", "description", "tools[0] needs function or name"),
    ("preset:\n  path: x.json\n", "path", "unknown preset keys ['path']"),
    ("window:\n  max_messages: ten\n", "max_messages", "window.max_messages must be an integer (or null), got 'ten'"),
    ("provider: opena1\n", "provider", "unknown provider 'opena1'"),
    ("plugins:\n  - 3\n", "- 3", "plugins[0] must be a string, got 3"),
]


@pytest.mark.parametrize(("body", "needle", "message"), REFUSED, ids=[r[2][:40] for r in REFUSED])
def test_schema_refusals_name_the_key_line(tmp_path: Path, body: str, needle: str, message: str) -> None:
    path = write(tmp_path, body)
    error = refused(path)
    assert message in error.message
    assert error.where == f"{path}:{line_of(path, needle)}"


def test_the_first_problem_in_the_file_is_the_one_reported(tmp_path: Path) -> None:
    path = write(tmp_path, "window:\n  cutto: 3\nmodle: x\n")
    assert refused(path).where == f"{path}:2"


def test_the_cli_prints_one_line_and_exits_3(zhin: Run, tmp_path: Path) -> None:
    write(tmp_path, "segments:\n  texts:\n    core.persona: 你是小知。\n")
    result = zhin("trace", SESSION, "--config", "zhin.yaml")
    assert result.returncode == 3 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zhin: error: zhin.yaml:3: segments.texts: core.persona has no fixed text")
    write(tmp_path, "segments:\n  texts:\n    core.rules: 你是小知。\n")  # negative control
    assert zhin("trace", SESSION, "--config", "zhin.yaml", "--json").returncode == 0


# --- segment ids: known only once the plugins registered ------------------------------------------------------------


def test_texts_for_an_unknown_segment_is_refused_at_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, "segments:\n  texts:\n    core.rules: a\n    core.rule: b\n")
    error = refused(path)
    assert error.where == f"{path}:4"
    assert "segments.texts names unknown segment 'core.rule'" in error.message and "core.rules" in error.message


@pytest.mark.parametrize(("segment", "reason"), [
    ("core.persona", "from the bot's name"), ("core.environment", "from the model"), ("history.user", "messages")])
def test_texts_for_a_computed_segment_is_refused_with_the_reason(tmp_path: Path, segment: str, reason: str) -> None:
    path = write(tmp_path, f"segments:\n  texts:\n    {segment}: x\n")
    error = refused(path)
    assert error.where == f"{path}:3"
    assert reason in error.message and "segments.remove" in error.message and "segments.add" in error.message


def test_texts_replace_builtin_and_plugin_text_segments(tmp_path: Path) -> None:
    """Negative control of the refusals: the keys spelled right change the prompt, the segment keeps its place."""
    (tmp_path / "house.py").write_text(PLUGIN, encoding="utf-8")
    plain = texts_of(write(tmp_path, "plugins: [house.py:register]\n"))
    changed = texts_of(write(tmp_path, "plugins: [house.py:register]\nsegments:\n  texts:\n    core.rules: 规则。\n"
                                       "    core.platform: 平台。\n    plugin.house: 插件。\n"))
    assert plain["plugin.house"] == "plugin text" and changed["plugin.house"] == "插件。"
    assert changed["core.rules"] == "规则。" and changed["core.platform"] == "平台。"
    assert list(changed) == list(plain)


def test_texts_for_a_segment_this_file_adds_points_at_its_add_entry(tmp_path: Path) -> None:
    path = write(tmp_path, "segments:\n  add:\n    - {id: house, kind: system, text: a}\n  texts:\n    house: b\n")
    error = refused(path)
    assert error.where == f"{path}:5" and "set its text there" in error.message


def test_remove_a_plugin_segment_and_refuse_a_typo(tmp_path: Path) -> None:
    (tmp_path / "house.py").write_text(PLUGIN, encoding="utf-8")
    kept = texts_of(write(tmp_path, "plugins: [house.py:register]\nsegments:\n  remove: [core.persona, plugin.house]\n"))
    assert "plugin.house" not in kept and "core.persona" not in kept and "core.rules" in kept
    path = write(tmp_path, "plugins: [house.py:register]\nsegments:\n  remove:\n    - core.persona\n    - plugin.hous\n")
    error = refused(path)
    assert error.where == f"{path}:5" and "unknown segment 'plugin.hous'" in error.message
    assert re.search(r"known: .*plugin\.house", error.message)


def test_a_builtin_removed_may_be_replaced_by_an_added_segment_of_its_id(tmp_path: Path) -> None:
    path = write(tmp_path, "segments:\n  remove: [core.rules]\n  add:\n    - {id: core.rules, kind: system, text: 新规则。}\n")
    assert texts_of(path)["core.rules"] == "新规则。"
