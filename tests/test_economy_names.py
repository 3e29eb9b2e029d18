"""Issue 31 §1 for ``report economy`` and the report page: its cache figures are named **timed** (docs/figures.md:
cold at the first request of each cache group, warm after it) in the text, ``--json`` and the page's economy box;
a line says how many requests start cold (why the figures differ from prefix-diff's warm ones); the flat-vs-ADR
line says why one layout costs less; and the simulated-cache tables keep every number whole at 60, 80 and 120
columns."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import clean_env, run_zhin

ROOT = Path(__file__).resolve().parent.parent
BUSY = ROOT / "fixtures" / "group-busy.jsonl"
PRIVATE = ROOT / "fixtures" / "private-chat.jsonl"
DEMO_DB = ROOT / "tests" / "data" / "upstream-db" / "data.sqlite"
ADR_CHEAPER = "onebot11:tokyo-ob11:group:856301447"  # on Anthropic, ADR's cache reads outweigh its longer prompt
TOKEN = re.compile(r"\$?[0-9][0-9,.]*[0-9]%?|\$?[0-9]%?")  # 1,988.6 · $0.0004125 · 92.8% · 13/3's parts
DIFFERS = "prefix-diff's warm figures differ"


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("economy-names")
    shutil.copyfile(DEMO_DB, folder / "demo.sqlite")  # a copy: the checked-in database stays as it is
    return folder


def economy(*args: object, cwd: Path = ROOT, width: int | None = None) -> str:
    env = clean_env() if width is None else {**clean_env(), "COLUMNS": str(width)}
    result = run_zhin("report", "economy", *args, cwd=cwd, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def busy_json() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(economy(BUSY, "--json"))
    return data


# --- the name: timed ---------------------------------------------------------------------------------------


def test_json_names_its_cache_timed_and_counts_the_cache_groups(busy_json: dict[str, Any]) -> None:
    assert busy_json["version"] == 1 and busy_json["cache_model"] == "timed"
    cache = busy_json["sessions"][0]["cache"]
    # the groups follow each provider's lifetime: OpenAI's 600 s cuts the chat in 13, DeepSeek's hour in 11
    assert {name: figures["cache_groups"] for name, figures in cache.items()} == {"openai": 13, "anthropic": 13, "deepseek": 11}
    assert all(figures["cache_groups"] == figures["requests_first"] for figures in cache.values())


def test_the_text_says_how_many_requests_start_cold_and_names_cold_and_warm() -> None:
    text = economy(BUSY, width=1000)
    assert "simulated prompt cache, timed" in text
    assert "16 requests in 13 cache groups: 13 start cold, 3 later" in text
    assert "16 requests in 11 cache groups: 11 start cold, 5 later" in text
    assert DIFFERS in text
    # one name for the figure (docs/figures.md): the later hit rate; no first-request rate (0 by construction)
    assert re.search(r"┃ layout +┃ prompt per request ┃ later hit rate ┃ cost per request ┃", text)
    heads = [line for line in simulated(text).splitlines() if line.startswith("┃")]
    assert heads and not [line for line in heads if re.search(r"\b(first|warm|cold)\b", line)]  # the old names


def test_one_cache_group_says_no_difference_from_prefix_diff() -> None:
    """Negative control: every request of the private chat falls in one OpenAI group, so timed equals warm."""
    text = economy(PRIVATE, "-p", "openai", width=1000)
    assert "6 requests in 1 cache group: 1 starts cold, 5 later" in text
    assert DIFFERS not in text
    assert "flat vs ADR: flat costs 22% less per request than ADR: its prompt is 22% shorter (no sender prefix, where " \
           "ADR's headers take 294 tokens over the session), and neither has a token cached" in text  # one-to-one chat


# --- flat vs ADR ---------------------------------------------------------------------------------------------


def test_flat_cheaper_says_its_prompt_is_shorter(busy_json: dict[str, Any]) -> None:
    reason = busy_json["sessions"][0]["cache"]["openai"]["flat_vs_adr"]
    assert re.fullmatch(r"flat costs \d+% less per request than ADR: its prompt is \d+% shorter \(its messages carry "
                        r"upstream's \[sender:…\] prefix, 1,619 header tokens over the session, where ADR's headers "
                        r"take 2,360\), and both cache about as much \(20\.\d% vs 20\.\d% of prompt tokens cached\)", reason), reason
    assert "flat vs ADR: flat costs 14% less per request than ADR" in economy(BUSY, "-p", "openai", width=1000)


def test_adr_cheaper_says_it_caches_more(demo_dir: Path) -> None:
    """Negative control: where ADR costs less (Anthropic on the demo's busy group), the line says so and why."""
    data = json.loads(economy(ADR_CHEAPER, "--db", "demo.sqlite", "-p", "anthropic", "--json", cwd=demo_dir))
    reason = data["sessions"][0]["cache"]["anthropic"]["flat_vs_adr"]
    assert re.fullmatch(r"ADR costs \d+% less per request than flat: it caches more \(\d+\.\d% vs 0\.0% of prompt tokens "
                        r"cached\), which outweighs its \d+% longer prompt", reason), reason


def test_anthropic_flat_cheaper_though_it_caches_nothing(busy_json: dict[str, Any]) -> None:
    """The busy session on Anthropic: flat gets no hits, yet its shorter prompt wins (13 of 16 requests are cold)."""
    reason = busy_json["sessions"][0]["cache"]["anthropic"]["flat_vs_adr"]
    assert reason.startswith("flat costs") and "which outweighs caching less (0.0% vs 20." in reason, reason


# --- widths: every number whole --------------------------------------------------------------------------------


def cut_numbers(narrow: str, wide: str) -> list[str]:
    """Numbers of the wide view the narrow one lacks (a cell cut to ``$0.000412``) and cells cut with ``…``."""
    have = set(TOKEN.findall(narrow))
    missing = sorted(set(TOKEN.findall(wide)) - have)
    cut = [line for line in narrow.splitlines() if re.search(r"\w…", line) and line not in wide]
    return missing + cut


def test_negative_control_a_cut_cell_is_caught() -> None:
    wide = "│ deepseek │ $0.0004125 · $0.0003452 │ providers │"
    assert cut_numbers("│ deepseek │ $0.000412 · $0.000345 │ provid… │", wide) == ["$0.0003452", "$0.0004125", "│ deepseek │ $0.000412 · $0.000345 │ provid… │"]
    assert cut_numbers("│ deepseek │ $0.0004125 ·   │\n│          │ $0.0003452     │ providers │", wide) == []


def simulated(text: str) -> str:
    """The simulated-cache part of a session's output (from its line to the bot's bill)."""
    start = text.index("simulated prompt cache")
    return text[start:text.index("the bot's bill", start)]


@pytest.mark.parametrize("width", [60, 80, 120])
def test_the_simulated_cache_tables_keep_every_number_at(width: int) -> None:
    narrow, wide = simulated(economy(BUSY, width=width)), simulated(economy(BUSY, width=1000))
    assert cut_numbers(narrow, wide) == []
    assert all(len(line) <= width for line in narrow.splitlines())


def economy_box(tmp_path: Path, *args: object) -> str:
    out = tmp_path / "page.html"
    result = run_zhin("report", "html", BUSY, "-o", out, *args, cwd=ROOT, env=clean_env())
    assert result.returncode == 0, result.stderr
    page = out.read_text(encoding="utf-8")
    box = page[page.index('<section class="economy">'):]
    return box[:box.index("</section>")]


def test_the_page_names_its_economy_figures_timed(tmp_path: Path) -> None:
    box = economy_box(tmp_path)
    assert "timed: simulated prompt cache" in box and "timed cost/request" in box and "data-timed-cost-adr=" in box
    assert "requests: first of group (cold) / later" in box and "later hit rate: ADR" in box
    assert "warm: ADR" not in box and "cold / warm" not in box  # control: the old names, one meaning of warm too many
    assert "openai: 16 requests in 13 cache groups: 13 start cold, 3 later; flat vs ADR: flat costs 14% less" in box
    # the counts are the provider's: DeepSeek's hour-long cache makes 11 groups of the same 16 requests
    assert "deepseek: 16 requests in 11 cache groups: 11 start cold, 5 later" in economy_box(tmp_path, "-p", "deepseek")
