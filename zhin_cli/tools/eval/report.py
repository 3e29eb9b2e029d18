"""Reporters for an eval run: rich summary table, JUnit XML, GitHub annotations and step summary.

Every report of a live run says how many of the live model's answers came from the response cache (the table's
caption, the step summary, ``live_answers`` in ``--json``, a ``live_answers`` property of each JUnit test suite).

JUnit (written with junitparser, valid against Jenkins xunit's ``junit-10.xsd``, which CI systems read): one
``<testsuite>`` per case file, one ``<testcase>`` per case. A failed assertion is a ``<failure>`` (its text lists
every failed assertion at its ``file:line``), a case that could not be evaluated an ``<error>``, a case that needs a
live model (offline) or no selected provider a ``<skipped>`` with the reason — never an empty (passed) testcase.
The schema allows a testcase no properties and no file/line attributes, so a case's facts (file:line, expect,
providers, criterion, pass rate) are its ``<system-out>``; the suite's ``file`` attribute names the case file.

GitHub: one annotation per failed assertion (the providers that failed it alike are one annotation), at the
assertion's line; escaping and publishing are :mod:`zhin_cli.core.ghactions`, shared by every gate.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite
from rich.console import Console
from rich.padding import Padding
from rich.text import Text

from zhin_cli.core.errors import OutputError
from zhin_cli.core.ghactions import Annotation, enabled, publish, summary_cell
from zhin_cli.core.terminaltext import terminal_safe, terminal_safe_lines
from zhin_cli.tools.eval.runner import CaseResult, EvalRun

STATUS_STYLE = {"passed": "green", "failed": "red", "error": "magenta", "skipped": "yellow"}


def case_detail(result: CaseResult) -> str:
    """What to say about one case after its status: the reason, a live case's pass rate, or how many checks held."""
    detail = result.reason
    if result.pass_rate is not None:
        detail = f"pass rate {result.pass_rate:.0%}" + (f" · {detail}" if detail else "")
    if result.status == "passed" and not detail:
        detail = f"{sum(1 for a in result.assertions if a.status == 'passed')} check(s)"
    return detail


def summary_caption(run: EvalRun) -> str:
    caption = " · ".join(f"{n} {s}" for s, n in run.counts().items() if n) + f" · {run.duration:.2f}s"
    if run.live_answers is not None:  # answers from a cache are not the model's: say how many there were
        caption += f" · {run.live_answers.describe()}"
    return caption


def print_summary(console: Console, run: EvalRun) -> None:
    """One line per case — status, case id, file:line, expectation, providers — and its detail indented below.

    Lines, not a table: a table at 60 columns folds the case id across rows (issue 17: identifiers are never cut);
    prose wraps at its spaces, so an id shorter than the line stays whole."""
    console.print(Text(f"zhin eval · {'live' if run.live else 'offline'}", style="bold"))
    for result in run.results:
        # the case id, its file's name and the details come from the case file: escaped (core.terminaltext)
        head = Text.assemble((f"{result.status:<7}", STATUS_STYLE[result.status]), " ",
                             (terminal_safe(result.case.id), "bold"),
                             terminal_safe(f" · {result.case.file.name}:{result.case.line} · expect {result.case.expect} · "
                                           f"{', '.join(result.providers)}"))
        console.print(head)
        detail = case_detail(result)
        if detail:
            # Text, not markup: details quote regexes and headers full of square brackets.
            console.print(Padding(Text(terminal_safe_lines(detail)), (0, 0, 0, 8), expand=False))
    console.print(summary_caption(run))


def _failure_text(result: CaseResult) -> str:
    lines = [result.reason]
    for a in result.assertions:
        if a.status in ("failed", "error"):
            lines.append(f"{result.case.file}:{a.line}: {a.type} [{a.provider}] {a.status}: {a.message}")
    return "\n".join(lines)


def _case_facts(result: CaseResult) -> str:
    case = result.case
    facts = [f"file: {case.file}:{case.line}", f"expect: {case.expect}", f"providers: {','.join(result.providers)}"]
    if case.data.get("criterion"):
        facts.append(f"criterion: {case.data['criterion']}")
    if result.pass_rate is not None:
        facts.append(f"pass_rate: {result.pass_rate:.3f}")
    return "\n".join(facts)


def _seconds(value: float) -> float:
    # junit-10.xsd's SUREFIRE_TIME is digits with at most three decimals: no exponent (1e-05), no more places
    return round(value, 3)


def junit_xml(run: EvalRun) -> JUnitXml:
    by_file: dict[Path, list[CaseResult]] = defaultdict(list)
    for result in run.results:
        by_file[result.case.file].append(result)
    xml = JUnitXml("zhin eval")
    for file, results in by_file.items():
        suite = TestSuite(str(file))
        suite._elem.set("file", str(file))  # an attribute the schema has and junitparser has no property for
        if run.live_answers is not None:  # of the whole run (the schema has no run-level properties)
            suite.add_property("live_answers", run.live_answers.describe())
        for result in results:
            case = TestCase(result.case.id, classname=file.stem, time=_seconds(result.duration))
            if result.status == "failed":
                failure = Failure(result.reason[:500], "AssertionFailed")
                failure.text = _failure_text(result)
                case.result = [failure]
            elif result.status == "error":
                error = Error(result.reason[:500], "CaseError")
                error.text = _failure_text(result)
                case.result = [error]
            elif result.status == "skipped":
                case.result = [Skipped(result.reason)]
            case.system_out = _case_facts(result)
            suite.add_testcase(case)
        suite.update_statistics()
        suite.time = _seconds(sum(r.duration for r in results))
        xml.add_testsuite(suite)
    # The root's counts by hand: junitparser's update_statistics also sets testsuites/@skipped, which the schema refuses.
    xml.tests = sum(suite.tests for suite in xml)
    xml.failures = sum(suite.failures for suite in xml)
    xml.errors = sum(suite.errors for suite in xml)
    xml.time = _seconds(run.duration)
    return xml


def write_junit(run: EvalRun, path: Path) -> None:
    """The JUnit XML at ``path``, written whole or not at all (a CI reading a half-written file would see a broken
    report, not a failed run)."""
    import xml.etree.ElementTree as ET

    from zhin_cli.core.outputfiles import atomic_output

    root = junit_xml(run)._elem  # junitparser's tree is the standard library's: indent and serialise it as text
    ET.indent(root)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # a file where the folder should be, no permission: one line, like any output
        raise OutputError(f"cannot write: {error.strerror or error}", where=str(path)) from None
    with atomic_output(path) as handle:
        # the declaration by hand: ElementTree would declare the locale's encoding for a text serialisation
        handle.write('<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n")


def github_annotations(run: EvalRun) -> list[Annotation]:
    """An error for each failed assertion of each failed or errored case, at the assertion's line (the providers
    that failed it with the same message are one annotation); a case failing for no assertion of its own — a
    negative control whose assertions all passed, a case that could not run — at the case's line."""
    out = []
    for result in run.results:
        if result.status not in ("failed", "error"):
            continue
        title = f"zhin eval: {result.case.id} {result.status}"
        grouped: dict[tuple[int, str, str], list[str]] = {}
        if result.case.expect == "pass":
            for a in result.assertions:
                if a.status in ("failed", "error"):
                    grouped.setdefault((a.line, a.type, a.message), []).append(a.provider)
        for (line, kind, message), providers in grouped.items():
            out.append(Annotation("error", f"{kind} [{', '.join(dict.fromkeys(providers))}]: {message}", title=title,
                                  file=result.case.file, line=line))
        if not grouped:
            out.append(Annotation("error", result.reason, title=title, file=result.case.file, line=result.case.line))
    return out


def step_summary(run: EvalRun) -> str:
    counts = run.counts()
    lines = [f"### zhin eval ({'live' if run.live else 'offline'})", "",
             " · ".join(f"**{n}** {s}" for s, n in counts.items()), "",
             *([summary_cell(run.live_answers.describe()), ""] if run.live_answers is not None else []),
             "| case | expect | providers | status | detail |", "|---|---|---|---|---|"]
    icons = {"passed": "✅", "failed": "❌", "error": "💥", "skipped": "⏭️"}
    for r in run.results:
        lines.append(f"| `{r.case.id}` | {r.case.expect} | {', '.join(r.providers)} | {icons[r.status]} {r.status} | "
                     f"{summary_cell(r.reason)} |")
    return "\n".join(lines) + "\n"


def publish_github(run: EvalRun) -> None:
    """Annotations and the step summary when running under GitHub Actions (:func:`zhin_cli.core.ghactions.publish`)."""
    if enabled():  # built only for a reader
        publish(github_annotations(run), step_summary(run))
