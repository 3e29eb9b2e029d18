"""Issue 31 (F2 finding 1): ``report economy``, ``report window`` and the report page use the session's stored model
when it is the provider's — ``trace``'s rule (``pipeline/models.py``) — so their prompts and costs equal trace's.

The demo session stores replies of ``gpt-4.1-mini``, not the OpenAI default ``gpt-4o``: before the fix economy
simulated a gpt-4o prompt (two tokens short of trace's on every request: the system prompt names the model) and the
page's economy box priced it at gpt-4o while its heading said gpt-4.1-mini. Negative controls: a session stored with
gpt-4o (fixtures/group-busy.jsonl) keeps gpt-4o, and Anthropic's case keeps its own model for the demo session
(gpt-4.1-mini is not Anthropic's)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import clean_env, run_zhin

ROOT = Path(__file__).resolve().parent.parent
DEMO_DB = ROOT / "tests" / "data" / "upstream-db" / "data.sqlite"
KEY = "onebot11:tokyo-ob11:group:856301447"
BUSY = ROOT / "fixtures" / "group-busy.jsonl"
STORED = "gpt-4.1-mini"


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("stored-model") / "demo.sqlite"
    shutil.copyfile(DEMO_DB, copy)  # a copy: the checked-in database stays as it is
    return copy


def zhin_json(*args: object) -> Any:
    result = run_zhin(*args, "--json", cwd=ROOT, env=clean_env())
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def economy(demo_db: Path) -> dict[str, Any]:
    data: dict[str, Any] = zhin_json("report", "economy", KEY, "--db", demo_db, "-p", "openai", "-p", "anthropic",
                                     "--per-request")
    return data["sessions"][0]["cache"]


@pytest.fixture(scope="module")
def trace_all(demo_db: Path) -> dict[int, dict[str, Any]]:
    data = zhin_json("trace", KEY, "--db", demo_db, "--all")
    return {r["turn"]: r for r in data["requests"]}


def test_economy_names_and_bills_the_stored_model(economy: dict[str, Any]) -> None:
    openai = economy["openai"]
    assert openai["model"] == STORED and openai["cost"]["model"] == STORED
    assert openai["cost"]["price"]["model"] == STORED


def test_economy_prompts_equal_traces(economy: dict[str, Any], trace_all: dict[int, dict[str, Any]]) -> None:
    rows = economy["openai"]["per_request"]
    assert {r["turn"]: r["adr"]["prompt"] for r in rows} == {t: r["prompt_tokens"] for t, r in trace_all.items()}
    assert {r["model"] for r in trace_all.values()} == {STORED}


def test_a_cold_request_costs_what_trace_says(demo_db: Path, economy: dict[str, Any]) -> None:
    cold = [r for r in economy["openai"]["per_request"] if r["first_of_group"]]
    assert len(cold) > 1 and any(r["turn"] == 8 for r in cold)
    for row in cold:
        [request] = zhin_json("trace", KEY, "--db", demo_db, "--turn", row["turn"])["requests"]
        assert (row["adr"]["prompt"], row["adr"]["cached"], row["adr"]["usd"]) == (
            request["prompt_tokens"], 0, request["cost"]["usd"]), row["turn"]


def test_negative_control_a_model_of_another_provider_is_not_taken(economy: dict[str, Any]) -> None:
    assert economy["anthropic"]["model"] == "claude-sonnet-5"  # gpt-4.1-mini is not Anthropic's


def test_negative_control_a_default_model_session_keeps_it() -> None:
    cache = zhin_json("report", "economy", BUSY, "-p", "openai")["sessions"][0]["cache"]
    assert cache["openai"]["model"] == "gpt-4o"


def test_the_page_economy_box_bills_the_heading_model(demo_db: Path, economy: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "page.html"
    result = run_zhin("report", "html", KEY, "--db", demo_db, "-o", out, cwd=ROOT, env=clean_env())
    assert result.returncode == 0, result.stderr
    page = out.read_text(encoding="utf-8")
    heading = re.search(r'<p class="meta">[^<]*· openai · ([\w.-]+) · \d+ requests', page)
    assert heading is not None and heading[1] == STORED
    row = re.search(r'<tr data-provider="openai"([^>]*)><td>openai \(([\w.-]+),', page)
    assert row is not None and row[2] == STORED
    assert f'data-timed-cost-adr="{economy["openai"]["cost"]["adr"]["per_request"]}"' in row[1]


def test_window_bills_the_stored_model_as_economy_does(demo_db: Path, economy: dict[str, Any]) -> None:
    window = zhin_json("report", "window", KEY, "--db", demo_db, "-j", "1")
    assert window["model"] == STORED and window["price"]["model"] == STORED
    assert window["default"]["cost_per_request"] == economy["openai"]["cost"]["adr"]["per_request"]


def test_negative_control_window_keeps_a_model_chosen_or_stored_as_default(demo_db: Path) -> None:
    chosen = zhin_json("report", "window", KEY, "--db", demo_db, "-j", "1", "--model", "gpt-4o")
    assert chosen["model"] == "gpt-4o"  # --model wins over the stored model, as in trace
    assert zhin_json("report", "window", BUSY, "-j", "1")["model"] == "gpt-4o"
