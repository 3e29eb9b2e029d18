"""The report page's labels and figures (issue 31, finding 6), in a real headless Chromium (tests/browser.py): the
chart has a labelled y axis (prompt tokens, ticks at their heights) and x axis (the request unit); the chart's
legend (cached / new / marks) and the segment kinds' legend are two legends whose colours never resemble each
other; a segment label cut to its bar's width (``core…``) carries its full id in its title; and every cache figure
on the page is the CLI's figure of the same name — the headline's warm ones ``prefix-diff --json``'s summary, the
economy box's timed costs ``report economy --json``'s. Each check is a function returning its complaints, run on the
real page and, as its negative control, on a page with the fault it looks for."""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import chromium, visit
from conftest import FIXTURES, ROOT

from zhin_cli.cache.cost import format_usd
from zhin_cli.tools.report.html import CHART_COLOURS, PALETTE

DEMO_KEY = "icqq:8596238:group:1048877509"  # fixtures/group-busy.jsonl, as `make demo` imports it
CHART_LABELS = ["cached", "new", "window shift", "compaction", "unexpected break"]
MIN_DISTANCE = 60.0  # RGB distance below which two swatches read as one colour (#f08c00 vs #e69f00: 21)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The demo database, its page and the JSON of the commands whose figures the page shows."""
    from conftest import run_zhin

    folder = tmp_path_factory.mktemp("labels")
    out: dict[str, Any] = {"html": folder / "report.html"}
    for name, args in (("import", ["import", FIXTURES / "group-busy.jsonl", "--db", folder / ".zhin" / "data.sqlite"]),
                       ("page", ["report", "html", DEMO_KEY, "-o", "report.html"]),
                       ("trace", ["trace", DEMO_KEY, "--all", "--json"]),
                       ("diff", ["prefix-diff", DEMO_KEY, "--json"]),
                       ("economy", ["report", "economy", DEMO_KEY, "--provider", "openai", "--json"])):
        proc = run_zhin(*args, cwd=folder)
        assert proc.returncode == 0, (args, proc.stderr)
        if name in ("trace", "diff", "economy"):
            out[name] = json.loads(proc.stdout)
    return out


PAGE_FACTS = """() => {
  const a = document.querySelector('article.session');
  const text = e => e ? e.textContent : null;
  const swatches = sel => [...a.querySelectorAll(sel + ' span')].filter(s => s.querySelector('i'))
    .map(s => [s.textContent.trim(), getComputedStyle(s.querySelector('i')).backgroundColor]);
  return {
    yTitle: text(a.querySelector('.chart .y-title')), xTitle: text(a.querySelector('.x-title')),
    ticks: [...a.querySelectorAll('.chart .yaxis .tick')].map(t => [t.textContent, +t.dataset.value, t.getBoundingClientRect().top]),
    legends: a.querySelectorAll('p.legend').length,
    chartLegend: swatches('.chart-legend'), kindLegend: swatches('.kind-legend'),
    cut: [...a.querySelectorAll('section[data-turn] .seg')].filter(s => s.scrollWidth > s.clientWidth)
      .map(s => [s.dataset.segment, s.getAttribute('title') || '']),
    warm: a.querySelector('.warm') ? {...a.querySelector('.warm').dataset, text: text(a.querySelector('.warm'))} : null,
    timed: Object.fromEntries([...a.querySelectorAll('.economy tr[data-provider]')].map(r =>
      [r.dataset.provider, {...r.dataset, text: r.textContent}])),
    timedHeader: text(a.querySelector('.economy table:nth-of-type(2) thead')),
  };
}"""


def page_facts(browser: Any, path: Path) -> dict[str, Any]:
    with visit(browser, path) as (page, seen):
        assert seen.problems() == []
        facts: dict[str, Any] = page.evaluate(PAGE_FACTS)
    return facts


# --- the checks: each returns its complaints (empty: the page passes) ------------------------------------------


def axis_problems(facts: dict[str, Any], trace: dict[str, Any]) -> list[str]:
    """Both axes titled; ticks at 0 and the tallest request's prompt tokens, written as numbers, higher up the larger."""
    out = []
    if facts["yTitle"] != "prompt tokens":
        out.append(f"y axis title {facts['yTitle']!r}")
    if facts["xTitle"] != "request (one bar each, in order)":  # requests, not members' turns (docs/figures.md)
        out.append(f"x axis title {facts['xTitle']!r}")
    top = max(r["prompt_tokens"] for r in trace["requests"])
    values = [value for _, value, _ in facts["ticks"]]
    if len(values) < 2 or min(values) != 0 or max(values) != top:
        out.append(f"y ticks {values}, want 0 … {top}")
    out += [f"tick {value} reads {label!r}" for label, value, _ in facts["ticks"] if label != f"{value:,}"]
    heights = [y for _, _, y in sorted(facts["ticks"], key=lambda t: t[1])]
    if heights != sorted(heights, reverse=True) or len(set(heights)) != len(heights):
        out.append(f"ticks not placed by value: {facts['ticks']}")
    return out


def rgb(css: str) -> tuple[int, ...]:
    """``rgb(1, 2, 3)`` or ``#010203`` as a triple."""
    if css.startswith("#"):
        return tuple(int(css[i : i + 2], 16) for i in (1, 3, 5))
    return tuple(int(v) for v in re.findall(r"\d+", css)[:3])


def close_colours(chart: list[list[str]], kinds: list[list[str]]) -> list[str]:
    """Every (chart swatch, kind swatch) pair nearer than ``MIN_DISTANCE``: one would be read as the other."""
    return [f"{c_name} {c} ~ {k_name} {k}" for c_name, c in chart for k_name, k in kinds
            if math.dist(rgb(c), rgb(k)) < MIN_DISTANCE]


def legend_problems(facts: dict[str, Any], trace: dict[str, Any]) -> list[str]:
    """Two legends: the chart's (its five entries) and the segment kinds' (every kind the requests have)."""
    out = []
    if facts["legends"] != 2:
        out.append(f"{facts['legends']} legend(s), want the chart's and the kinds'")
    if [name for name, _ in facts["chartLegend"]] != CHART_LABELS:
        out.append(f"chart legend {facts['chartLegend']}")
    kinds = {s["kind"] for r in trace["requests"] for s in r["segments"]}
    if {name for name, _ in facts["kindLegend"]} != kinds:
        out.append(f"kind legend {[n for n, _ in facts['kindLegend']]} != {sorted(kinds)}")
    return out + close_colours(facts["chartLegend"][:2], facts["kindLegend"])


def label_problems(facts: dict[str, Any]) -> list[str]:
    """Every segment label the bar cuts has its full id at the start of its title (before any hover)."""
    return [f"{segment!r} is cut and its title is {title!r}" for segment, title in facts["cut"]
            if not title.startswith(segment + " · ")]


def figure_problems(facts: dict[str, Any], diff: dict[str, Any], economy: dict[str, Any]) -> list[str]:
    """The headline's warm figures are prefix-diff's; the economy box's timed costs are report economy's."""
    out = []
    summary = diff["sessions"][0]["summary"]
    warm = facts["warm"] or {}
    if float(warm.get("cachedShare", "nan")) != summary["cached_share"]:
        out.append(f"warm cached share {warm.get('cachedShare')} != prefix-diff's {summary['cached_share']}")
    if float(warm.get("costPerRequest", "nan")) != summary["cost"]["per_request"]:
        out.append(f"warm cost {warm.get('costPerRequest')} != prefix-diff's {summary['cost']['per_request']}")
    if f"{summary['cached_share']:.1%}" not in warm.get("text", "") or format_usd(summary["cost"]["per_request"]) not in warm.get("text", ""):
        out.append(f"headline text {warm.get('text')!r} does not show prefix-diff's figures")
    if "warm" not in warm.get("text", ""):
        out.append("the headline's figures are not named warm")
    for name, figures in economy["sessions"][0]["cache"].items():
        row = facts["timed"].get(name, {})
        for layout in ("adr", "flat", "sliding"):
            want = figures["cost"][layout]["per_request"]
            if float(row.get(f"timedCost{layout.title()}", "nan")) != want:
                out.append(f"{name} timed {layout} cost {row.get(f'timedCost{layout.title()}')} != report economy's {want}")
        shown = " · ".join(format_usd(figures["cost"][layout]["per_request"]) for layout in ("adr", "flat", "sliding"))
        if shown not in row.get("text", ""):
            out.append(f"{name} row {row.get('text')!r} does not show {shown}")
    if "timed" not in (facts["timedHeader"] or ""):
        out.append("the economy box's cache figures are not named timed")
    return out


# --- the page passes -------------------------------------------------------------------------------------------


def test_the_page_has_labelled_axes_two_legends_full_labels_and_the_clis_figures(browser: Any, demo: dict[str, Any]) -> None:
    facts = page_facts(browser, demo["html"])
    assert facts["cut"], "no segment label is cut on the demo page: the label check would pass vacuously"
    assert axis_problems(facts, demo["trace"]) == []
    assert legend_problems(facts, demo["trace"]) == []
    assert label_problems(facts) == []
    assert figure_problems(facts, demo["diff"], demo["economy"]) == []


def test_the_two_meanings_differ_on_the_demo(demo: dict[str, Any]) -> None:
    """Why the page names both: the warm and the timed cost per request are different numbers for this session."""
    warm = demo["diff"]["sessions"][0]["summary"]["cost"]["per_request"]
    timed = demo["economy"]["sessions"][0]["cache"]["openai"]["cost"]["adr"]["per_request"]
    assert warm != timed


def test_segment_colours_never_resemble_the_charts() -> None:
    """Every kind colour is far from every chart colour; control: the old palette's orange is next to "new"."""
    chart = [["chart", c] for c in CHART_COLOURS]
    assert close_colours(chart, [[f"kind {n}", c] for n, c in enumerate(PALETTE)]) == []
    assert close_colours(chart, [["environment", "#e69f00"]]) == ["chart #f08c00 ~ environment #e69f00"]


def test_the_chart_colours_are_the_stylesheets() -> None:
    """CHART_COLOURS (which the palette is kept away from) are report.css's cached, new and mark colours."""
    css = (ROOT / "zhin_cli" / "tools" / "report" / "htmlpage" / "report.css").read_text(encoding="utf-8")
    found = [re.search(pattern, css) for pattern in (r"--cached: (#\w+)", r"--new: (#\w+)", r"--bad: (#\w+)",
                                                      r"\.m-window_shift \{ background: (#\w+)", r"\.m-compaction \{ background: (#\w+)")]
    assert tuple(m.group(1) if m else None for m in found) == CHART_COLOURS


# --- negative controls: each check complains about the fault it looks for --------------------------------------


def edited(demo: dict[str, Any], tmp_path: Path, old: str, new: str) -> Path:
    """The demo page with ``old`` replaced by ``new`` everywhere (outside the hashed style and script)."""
    text = demo["html"].read_text(encoding="utf-8")
    assert old in text, old
    path = tmp_path / "edited.html"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


def test_the_axis_check_complains_of_a_missing_title_or_a_wrong_tick(browser: Any, demo: dict[str, Any], tmp_path: Path) -> None:
    facts = page_facts(browser, edited(demo, tmp_path, '<span class="axis y-title">prompt tokens</span>', ""))
    assert axis_problems(facts, demo["trace"]) == ["y axis title None"]
    top = max(r["prompt_tokens"] for r in demo["trace"]["requests"])
    facts = page_facts(browser, edited(demo, tmp_path, f">{top:,}</span>", f">{top + 1:,}</span>"))
    assert axis_problems(facts, demo["trace"]) == [f"tick {top} reads '{top + 1:,}'"]


def test_the_legend_check_complains_of_one_mixed_legend(browser: Any, demo: dict[str, Any], tmp_path: Path) -> None:
    """The old page's one legend (chart entries and kinds in one paragraph)."""
    facts = page_facts(browser, edited(demo, tmp_path, '</p><p class="legend kind-legend"><b>segment kinds:</b>', " · segment kinds:"))
    problems = legend_problems(facts, demo["trace"])
    assert problems[0] == "1 legend(s), want the chart's and the kinds'" and any(p.startswith("chart legend") for p in problems)


def test_the_label_check_complains_of_a_cut_label_without_its_title(browser: Any, demo: dict[str, Any], tmp_path: Path) -> None:
    """The old page: segment bars with no title until hovered."""
    text = demo["html"].read_text(encoding="utf-8")
    path = tmp_path / "untitled.html"
    path.write_text(re.sub(r'(<span class="seg[^"]*") title="[^"]*"', r"\1", text), encoding="utf-8")
    facts = page_facts(browser, path)
    assert facts["cut"] and len(label_problems(facts)) == len(facts["cut"])


def test_the_figure_check_complains_of_a_figure_off_the_clis(browser: Any, demo: dict[str, Any], tmp_path: Path) -> None:
    timed = demo["economy"]["sessions"][0]["cache"]["openai"]["cost"]["flat"]["per_request"]
    facts = page_facts(browser, edited(demo, tmp_path, f'data-timed-cost-flat="{timed}"', f'data-timed-cost-flat="{timed * 2}"'))
    assert figure_problems(facts, demo["diff"], demo["economy"]) == [
        f"openai timed flat cost {timed * 2} != report economy's {timed}"]
    share = demo["diff"]["sessions"][0]["summary"]["cached_share"]
    facts = page_facts(browser, edited(demo, tmp_path, f'data-cached-share="{share}"', 'data-cached-share="0.5"'))
    assert figure_problems(facts, demo["diff"], demo["economy"]) == [
        f"warm cached share 0.5 != prefix-diff's {share}"]


# --- the real bot's captures (the upstream database's capture folder, copied) -----------------------------------


CAPTURE_FACTS = """() => [...document.querySelectorAll('article.session')].map(a => ({
  session: a.dataset.session, xTitle: a.querySelector('.x-title').textContent, yTitle: a.querySelector('.y-title').textContent,
  warm: {...a.querySelector('.warm').dataset}}))"""


def warm_mismatches(pages: list[dict[str, Any]], diff: dict[str, Any]) -> list[str]:
    """Each conversation's warm figures on the page against prefix-diff --json's summary of the same conversation."""
    want = {s["session_id"]: s["summary"] for s in diff["sessions"]}
    out = [] if [p["session"] for p in pages] == list(want) else [f"conversations {[p['session'] for p in pages]}"]
    for page in pages:
        summary = want.get(page["session"], {})
        got = (float(page["warm"].get("cachedShare", "nan")), float(page["warm"].get("costPerRequest", "nan")))
        if got != (summary.get("cached_share"), summary.get("cost", {}).get("per_request")):
            out.append(f"{page['session']}: {got} != {summary.get('cached_share')}, {summary.get('cost')}")
    return out


def test_captured_conversations_show_prefix_diffs_warm_figures_per_capture(browser: Any, tmp_path: Path) -> None:
    """The real bot's captures: one page per conversation, its x axis in captures, its warm figures prefix-diff's;
    control: the same check with two conversations' figures swapped complains of both."""
    from conftest import run_zhin
    from test_captures import SHARED_CAPTURES

    folder = Path(shutil.copytree(SHARED_CAPTURES, tmp_path / "captures"))
    assert run_zhin("report", "html", folder, "-o", "captures.html", cwd=tmp_path).returncode == 0
    proc = run_zhin("prefix-diff", folder, "--json", cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr  # 1: the bot's captures have breaks prefix-diff fails on
    diff = json.loads(proc.stdout)
    with visit(browser, tmp_path / "captures.html") as (page, seen):
        assert seen.problems() == []
        pages = page.evaluate(CAPTURE_FACTS)
    assert len(pages) >= 2
    assert all(p["xTitle"].startswith("capture") and p["yTitle"] == "prompt tokens" for p in pages)
    assert warm_mismatches(pages, diff) == []
    swapped = [{**pages[0], "warm": pages[1]["warm"]}, {**pages[1], "warm": pages[0]["warm"]}, *pages[2:]]
    assert [m.split(":")[0] for m in warm_mismatches(swapped, diff)] == [pages[0]["session"], pages[1]["session"]]
