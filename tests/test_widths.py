"""Issue 31 §3: text views read at 60, 80 and 120 columns — no word or number broken across lines (by zhin's own
wrapping or by the terminal's, which cuts any line longer than the width at its last column), and the rows of
``trace --all`` one line each at 80 columns."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import clean_env, run_zhin
from rich.cells import cell_len

ROOT = Path(__file__).resolve().parent.parent
BUSY = ROOT / "fixtures" / "group-busy.jsonl"
DEMO_DB = ROOT / "tests" / "data" / "upstream-db" / "data.sqlite"
TOKEN_END = re.compile(r"[A-Za-z0-9$,.]+$")  # a word or a number ($0.05282, 1,695) running up to the line's end
TOKEN_START = re.compile(r"^[A-Za-z0-9$,.]+")
# a word, a number or an identifier as the views print them: core.environment, gpt-4.1-mini, role_rules, 76.9%, +0
TOKEN = re.compile(r"[A-Za-z0-9$][A-Za-z0-9$,._/#%+-]*")
CUT = re.compile(r"[A-Za-z0-9$,._%-]…")  # a cell cut by rich: "gpt-4…", "76.…", "provi…"
WIDTH_NOTE = re.compile(r"at least \d+ columns")  # a line that says what the width left out
DURATION = re.compile(r"\d+(\.\d+)?m?s")  # a run's time (eval's "1.57s"): differs between two runs
WIDE = 1000


def tokens(text: str) -> list[str]:
    """The words, numbers and ids of ``text``, without the punctuation that ends a phrase (and run times)."""
    found = (token.rstrip(".,:") for token in TOKEN.findall(text))
    return [token for token in found if token and not DURATION.fullmatch(token)]


def broken_tokens(narrow: str, wide: str, width: int) -> list[str]:
    """Where ``narrow`` (laid out for ``width``) breaks a word or number of ``wide`` (the same view at 1,000 columns):
    a line longer than ``width`` (a terminal cuts it mid-token); a line ending inside a token that the next line
    continues; a token that is no whole token of ``wide`` (a cell folded or cut inside a table: "environme"/"nt",
    "gpt-4…"); a cell cut with "…"; and a token of ``wide`` missing from ``narrow`` unless ``narrow`` says what
    the width left out (a line "… at least N columns") or marks an elided list with a lone "…". Missing counts
    for the tokens with a digit (figures, costs, dates, model ids: what a reader must not lose); a narrow layout
    may print a header word once (a block per row names its fields its own way)."""
    whole = set(tokens(wide))
    lines = narrow.splitlines()
    found = [f"line {i + 1} is {cell_len(line)} cells: {line!r}" for i, line in enumerate(lines) if cell_len(line) > width]
    for i, (line, following) in enumerate(zip(lines, lines[1:], strict=False)):
        tail, head = TOKEN_END.search(line), TOKEN_START.match(following)
        if tail and head and tail.group() + head.group() in whole and not (tail.group() in whole and head.group() in whole):
            found.append(f"line {i + 1} breaks {tail.group()!r}/{head.group()!r}")
    for i, line in enumerate(lines):
        found += [f"line {i + 1} cuts {cut.group()!r}: {line!r}" for cut in CUT.finditer(line) if cut.group() not in wide]
        if not WIDTH_NOTE.search(line):
            found += [f"line {i + 1} holds {token!r}, no whole word of the wide view: {line!r}"
                      for token in tokens(line) if token not in whole]
    elided = any(WIDTH_NOTE.search(line) or re.search(r"(^|\s)…(\s|$)", line) for line in lines)
    if not elided:
        missing = sorted(token for token in whole - set(tokens(narrow)) if re.search(r"\d", token))
        found += [f"{token!r} of the wide view is missing" for token in missing]
    return found


def test_negative_control_a_wrapped_cost_and_an_overlong_line_are_caught() -> None:
    wide = "16 requests · input cost $0.08518 ($0.005324 per request)"
    assert broken_tokens("16 requests · input cost $0.\n08518 ($0.005324 per request)", wide, 40)
    assert broken_tokens(wide, wide, 40)  # longer than the width: the terminal would cut it
    assert broken_tokens("16 requests · input cost\n$0.08518 ($0.005324 per request)", wide, 40) == []  # between words


def test_negative_control_a_split_or_cut_table_cell_is_caught() -> None:
    wide = "segment           kind        weight\ncore.environment  environment    100\ncore.persona      role_rules     100"
    folded = ("segment           kind      weight\ncore.environment  environme    100\n                  nt\n"
              "core.persona      role_rule    100\n                  s")
    assert any("'environme'" in problem for problem in broken_tokens(folded, wide, 40))  # padding hid it before
    assert any("'role_rule'" in problem for problem in broken_tokens(folded, wide, 40))
    cut = "provi… model  hit\nopenai gpt-4… 76.…"
    wide_cut = "provider model        hit\nopenai   gpt-4.1-mini 76.9%"
    problems = broken_tokens(cut, wide_cut, 40)
    assert {"line 2 cuts '4…': 'openai gpt-4… 76.…'", "line 2 cuts '.…': 'openai gpt-4… 76.…'"} <= set(problems)
    assert any("'gpt-4.1-mini' of the wide view is missing" in problem for problem in problems)
    whole = "segment           kind\ncore.environment  environment\ncore.persona      role_rules"
    assert broken_tokens(whole, wide.replace("weight", "").replace("100", ""), 40) == []  # laid out whole: nothing


def test_an_elided_column_is_allowed_only_where_the_output_says_so() -> None:
    wide = "id     weight\ncore.a 100"
    assert broken_tokens("id\ncore.a", wide, 60)  # weight and 100 vanished silently
    assert broken_tokens("id\ncore.a\nweight: left out (a terminal of at least 13 columns)", wide, 60) == []


def run(args: list[str], width: int, cwd: Path) -> Any:
    env = {**clean_env(), "COLUMNS": str(width)}
    return run_zhin(*args, cwd=cwd, env=env, timeout=120)


VIEWS: dict[str, list[str]] = {
    "trace": ["trace", str(BUSY)],
    "trace --all": ["trace", str(BUSY), "--all"],
    "sessions": ["sessions", "--db", "demo.sqlite"],
    "stats cache": ["stats", "cache", "--db", "demo.sqlite"],
    "providers": ["providers"],
    "prefix-diff": ["prefix-diff", str(BUSY)],
    "report economy": ["report", "economy", "--db", "demo.sqlite"],
    "report window": ["report", "window", "onebot11:tokyo-ob11:group:856301447", "--db", "demo.sqlite"],
    "facts show": ["facts", "show", "onebot11:tokyo-ob11:group:856301447", "--db", "demo.sqlite"],
    "budget check": ["budget", "check", "--file", str(ROOT / "prompt-budget.yaml")],
    "eval": ["--allow-plugins", "eval", str(ROOT / "eval_cases")],  # the repository's own cases and plugins
}


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("widths")
    shutil.copyfile(DEMO_DB, folder / "demo.sqlite")  # a copy: the checked-in database stays as it is
    return folder


@pytest.mark.parametrize("width", [60, 80, 120])
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_no_word_or_number_is_broken_across_lines(view: str, width: int, demo_dir: Path) -> None:
    narrow, wide = run(VIEWS[view], width, demo_dir), run(VIEWS[view], WIDE, demo_dir)
    assert narrow.returncode == 0 and wide.returncode == 0, narrow.stderr
    assert broken_tokens(narrow.stdout, wide.stdout, width) == [], (view, width)


def test_trace_all_rows_are_one_line_each_at_80_columns(demo_dir: Path) -> None:
    text = run(VIEWS["trace --all"], 80, demo_dir).stdout
    row = re.compile(r"^\s*\d+\s+[\d,]+\s+[\d,]+\s.*[✓✗]")
    rows = [i for i, line in enumerate(text.splitlines()) if row.match(line)]
    assert len(rows) == 16  # group-busy has 16 turns
    assert rows == list(range(rows[0], rows[0] + 16))  # consecutive lines: nothing wraps between two rows


def test_prefix_diff_rows_are_one_line_each_at_80_columns(demo_dir: Path) -> None:
    text = run(VIEWS["prefix-diff"], 80, demo_dir).stdout
    pairs = [line for line in text.splitlines() if re.match(r"^[✗ ] \d+→\d+ ", line)]
    assert len(pairs) == 15 and all(cell_len(line) <= 80 for line in pairs)  # 16 turns: 15 pairs, each a line
    following = [text.splitlines()[text.splitlines().index(line) + 1] for line in pairs]
    assert not any(line.startswith(" " * 20) for line in following)  # no continuation line under a row


def test_negative_control_the_row_check_sees_a_wrapped_row(demo_dir: Any) -> None:
    row = re.compile(r"^\s*\d+\s+[\d,]+\s+[\d,]+\s.*[✓✗]")
    wrapped = ["   1    868      0  $0.00217 ░░░  none-needed ✓", "     history.user 543",
               "   2   1695      0 $0.004237 ░░░░  system      ✓"]
    rows = [i for i, line in enumerate(wrapped) if row.match(line)]
    assert rows != list(range(rows[0], rows[0] + len(rows)))


# --- one way to write a cost -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "shown"), [
    (0.0024, "$0.002400"), (0.00217, "$0.002170"), (0.004237, "$0.004237"), (0.05282, "$0.05282"),
    (0.0009999996, "$0.001000"), (1e-7, "$0.0000001000"), (0.99999, "$1.00"), (1234.5, "$1,234.50"),
    (0, "$0"), (None, "—"),
])
def test_a_cost_is_written_to_four_significant_digits(value: float | None, shown: str) -> None:
    from zhin_cli.cache.cost import format_usd

    assert format_usd(value) == shown


def test_costs_in_trace_and_prefix_diff_all_have_four_significant_digits(demo_dir: Path) -> None:
    texts = [run(VIEWS[view], 200, demo_dir).stdout for view in ("trace --all", "prefix-diff", "trace")]
    costs = [cost for text in texts for cost in re.findall(r"\$0\.\d+", text)]
    assert len(costs) > 30 and "$0.002400" in texts[0]  # turn 11, written $0.0024 before
    assert all(len(cost.removeprefix("$0.").lstrip("0")) == 4 for cost in costs), costs
    # negative control: the three ways of before are told apart from the one
    assert [len(c.removeprefix("$0.").lstrip("0")) == 4 for c in ("$0.00217", "$0.004237", "$0.0024")] == [False, True, False]


def test_token_counts_have_thousands_separators_in_trace_as_in_prefix_diff(demo_dir: Path) -> None:
    rows = run(VIEWS["trace --all"], 200, demo_dir).stdout
    pairs = run(VIEWS["prefix-diff"], 200, demo_dir).stdout
    assert re.search(r"^\s+2\s+1,695\s", rows, re.M) and " 1,695 " in pairs  # turn 2's prompt, one way in both
    assert re.search(r"of [\d,]+ prompt tokens cached", rows) and not re.search(r"\d{4} prompt tokens", rows)
    assert not re.search(r"^\s+2\s+1695\s", rows, re.M)  # negative control: the plain form of before is gone


def test_report_economy_writes_token_figures_with_thousands_separators(demo_dir: Path) -> None:
    text = run(VIEWS["report economy"], 200, demo_dir).stdout
    # openai's ADR and flat prompt tokens per request on the demo (one row per layout)
    assert re.search(r"│ ADR +│ +1,495\.0 │", text) and re.search(r"│ flat +│ +1,428\.2 │", text)  # one decimal each
    unseparated = re.findall(r"(?<![\w.,:#-])\d{4,}(?:\.\d)?(?![\w,:#-]| s\b)", text.replace("0041", ""))  # not seconds
    assert unseparated == []
    assert re.findall(r"(?<![\w.,:#-])\d{4,}(?:\.\d)?(?![\w,:#-])", "│ 1493 · 1426.2 │") != []  # negative control
