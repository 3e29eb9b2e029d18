"""Final review's small outputs (X3): a reasoning provider's stored model, the economy caveat's words, the plugin
providers' owner/default/lifetime in ``zhin providers``, ``stats cache`` with nothing counted, a lifted mute's
``muted_by``, and ``provider:`` of the wrong type. Each test has its negative control beside it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT

from zhin_cli._cli.facts import roster_value
from zhin_cli.core.notes import ZhinNote
from zhin_cli.pipeline.models import ModelChooser, belongs
from zhin_cli.tools.report.economy import BILL_CAVEAT

DEMO_DB = ROOT / "tests" / "data" / "upstream-db" / "data.sqlite"
PLUGIN = ROOT / "tests" / "plugins" / "acme_provider.py"


def demo(tmp_path: Path) -> Path:
    (tmp_path / ".zhin").mkdir()
    shutil.copy(DEMO_DB, tmp_path / ".zhin" / "data.sqlite")
    return tmp_path


# 1. openai-reasoning bills at openai's rows, but gpt-4o is not one of its models

def test_a_reasoning_provider_does_not_keep_a_shared_price_rows_model() -> None:
    assert not belongs("openai-reasoning", "gpt-4o")
    assert not belongs("openai-reasoning", "gpt-4o-mini")
    assert belongs("openai-reasoning", "o3") and belongs("openai-reasoning", "o4-mini")  # its own prefixes
    assert belongs("openai-reasoning", "gpt-5.1")
    # negative control: openai itself keeps gpt-4o (its prefixes and its rows)
    assert belongs("openai", "gpt-4o") and belongs("openai", "gpt-4.1-mini")
    with pytest.warns(ZhinNote, match="stored model 'gpt-4o' is not openai-reasoning's"):
        assert ModelChooser("openai-reasoning", named=True).for_stored("gpt-4o") == "o3"


def test_trace_with_openai_reasoning_names_its_default_and_says_so(zhin) -> None:  # type: ignore[no-untyped-def]
    result = zhin("trace", FIXTURES / "group-busy.jsonl", "--turn", "4", "-p", "openai-reasoning", "--show-request")
    assert result.returncode == 0, result.stderr
    assert '"model": "o3"' in result.stdout and '"model": "gpt-4o"' not in result.stdout
    assert "stored model 'gpt-4o' is not openai-reasoning's" in result.stderr
    # negative control: openai keeps the stored gpt-4o with no note
    plain = zhin("trace", FIXTURES / "group-busy.jsonl", "--turn", "4", "-p", "openai", "--show-request")
    assert plain.returncode == 0 and '"model": "gpt-4o"' in plain.stdout and "is not openai's" not in plain.stderr


# 2. report economy's caveat

def test_the_economy_caveat_says_requests() -> None:
    assert "same requests" in BILL_CAVEAT and "same turns" not in BILL_CAVEAT


# 3. zhin providers --config: owner, default model and cache lifetime in the text output

def test_providers_text_shows_owner_default_model_and_cache_lifetime(tmp_path: Path, zhin) -> None:  # type: ignore[no-untyped-def]
    shutil.copy(PLUGIN, tmp_path / "acme_provider.py")
    (tmp_path / "zhin.yaml").write_text("plugins: [acme_provider.py]\n", encoding="utf-8")
    result = zhin("providers", "--config", "zhin.yaml", env={"COLUMNS": "60"})
    assert result.returncode == 0, result.stderr
    acme = ("\n" + result.stdout).split("\nacme\n", 1)[1].split("\nanthropic\n", 1)[0]
    assert "owner: acme_provider.py" in acme and "default model: acme-1" in acme and "lifetime 900 s" in acme
    # negative control: the built-in ones say builtin, their own defaults and lifetimes
    reasoning = result.stdout.split("\nopenai-reasoning\n", 1)[1].split("\nvllm\n", 1)[0]
    assert "owner: builtin" in reasoning and "default model: o3" in reasoning and "lifetime 600 s" in reasoning
    assert "acme" not in zhin("providers", env={"COLUMNS": "60"}).stdout


# 4. stats cache with nothing counted; a lifted mute's muted_by; provider: of the wrong type

def test_stats_cache_with_nothing_counted_has_no_summary(tmp_path: Path, zhin) -> None:  # type: ignore[no-untyped-def]
    result = zhin("stats", "cache", "--until", "2025-01-01", "--days", "3", cwd=demo(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "no usage in the last 3 days" in result.stdout and "session(s)" not in result.stdout
    # negative control: a period with usage ends with the summary
    counted = zhin("stats", "cache", "--until", "2026-10-18", "--days", "3", cwd=tmp_path)
    assert counted.returncode == 0 and "request(s) in it" in counted.stdout and "3 session(s)." in counted.stdout


def test_a_lifted_mute_shows_no_muted_by(tmp_path: Path, zhin) -> None:  # type: ignore[no-untyped-def]
    result = zhin("facts", "show", "onebot11:tokyo-ob11:group:856301447", env={"COLUMNS": "60"}, cwd=demo(tmp_path))
    assert result.returncode == 0, result.stderr
    member = result.stdout.split("\n284100104\n", 1)[1].split("\n284100105\n", 1)[0]
    assert "muted_until: not muted" in member and "muted_by" not in member
    # negative control: a mute that has not been lifted (a time) keeps who muted
    muted = {"muted_until": 1792194710000, "muted_by": "284100102"}
    assert roster_value("muted_by", muted, "UTC") == "284100102"
    assert roster_value("muted_by", {"muted_until": 0, "muted_by": "284100102"}, "UTC") == ""


def test_a_provider_that_is_no_string_is_a_type_error(tmp_path: Path, zhin) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "a.yaml").write_text("provider: 5\n", encoding="utf-8")
    (tmp_path / "b.yaml").write_text("model: x\nprovider: [zeta]\n", encoding="utf-8")
    (tmp_path / "c.yaml").write_text("provider: zeta\n", encoding="utf-8")
    for name, line, shown in (("a.yaml", 1, "5"), ("b.yaml", 2, "['zeta']")):
        result = zhin("providers", "--config", name)
        assert result.returncode == 3
        assert result.stderr.strip() == f"zhin: error: {name}:{line}: provider must be a string, got {shown}"
    # negative control: a string naming no provider is still "unknown provider"
    unknown = zhin("providers", "--config", "c.yaml")
    assert unknown.returncode == 3 and "c.yaml:1: unknown provider 'zeta'" in unknown.stderr
    assert json.loads(zhin("providers", "--json").stdout)["version"] == 1
