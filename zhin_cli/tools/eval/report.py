"""Reporters for an eval run: rich summary table, JUnit XML, GitHub annotations and step summary.

Every report of a live run says how many of the live model's answers came from the response cache (the table's
caption, the step summary, ``live_answers`` in ``--json``, a ``live_answers`` property of each JUnit test suite).

JUnit: one ``<testsuite>`` per case file, one ``<testcase>`` per case. A failed assertion is a
``<failure>``, a case that could not be evaluated an ``<error>``, a case that needs a live model (offline)
or no selected provider a ``<skipped>`` with the reason — never an empty (passed) testcase.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

from rich.table import Table
from rich.text import Text

from zhin_cli.tools.eval.runner import CaseResult, EvalRun

STATUS_STYLE = {"passed": "green", "failed": "red", "error": "magenta", "skipped": "yellow"}


def summary_table(run: EvalRun) -> Table:
    table = Table(title=f"zhin eval · {'live' if run.live else 'offline'}", title_justify="left")
    for column in ("case", "file", "expect", "providers", "status", "detail"):
        table.add_column(column, overflow="fold")
    for result in run.results:
        style = STATUS_STYLE[result.status]
        detail = result.reason
        if result.pass_rate is not None:
            detail = f"pass rate {result.pass_rate:.0%}" + (f" · {detail}" if detail else "")
        if result.status == "passed" and not detail:
            checked = sum(1 for a in result.assertions if a.status == "passed")
            detail = f"{checked} check(s)"
        # Text cells, not markup: details quote regexes and headers full of square brackets.
        table.add_row(Text(result.case.id), Text(f"{result.case.file.name}:{result.case.line}"), Text(result.case.expect),
                      Text(",".join(result.providers)), Text(result.status, style=style), Text(detail))
    counts = run.counts()
    table.caption = " · ".join(f"{n} {s}" for s, n in counts.items() if n) + f" · {run.duration:.2f}s"
    if run.live_answers is not None:  # answers from a cache are not the model's: say how many there were
        table.caption += f" · {run.live_answers.describe()}"
    return table


def _failure_text(result: CaseResult) -> str:
    lines = [result.reason]
    for a in result.assertions:
        if a.status in ("failed", "error"):
            lines.append(f"{result.case.file}:{a.line}: {a.type} [{a.provider}] {a.status}: {a.message}")
    return "\n".join(lines)


def junit_xml(run: EvalRun) -> ET.ElementTree:
    by_file: dict[Path, list[CaseResult]] = defaultdict(list)
    for result in run.results:
        by_file[result.case.file].append(result)
    counts = run.counts()
    root = ET.Element("testsuites", name="zhin eval", tests=str(len(run.results)), failures=str(counts["failed"]),
                      errors=str(counts["error"]), skipped=str(counts["skipped"]), time=f"{run.duration:.3f}")
    for file, results in by_file.items():
        suite = ET.SubElement(
            root, "testsuite", name=str(file), tests=str(len(results)),
            failures=str(sum(r.status == "failed" for r in results)), errors=str(sum(r.status == "error" for r in results)),
            skipped=str(sum(r.status == "skipped" for r in results)), time=f"{sum(r.duration for r in results):.3f}",
        )
        if run.live_answers is not None:  # of the whole run (JUnit has no run-level properties)
            ET.SubElement(ET.SubElement(suite, "properties"), "property", name="live_answers",
                          value=run.live_answers.describe())
        for result in results:
            case = ET.SubElement(suite, "testcase", classname=file.stem, name=result.case.id, file=str(file),
                                 line=str(result.line), time=f"{result.duration:.3f}")
            properties = ET.SubElement(case, "properties")
            ET.SubElement(properties, "property", name="expect", value=result.case.expect)
            ET.SubElement(properties, "property", name="providers", value=",".join(result.providers))
            if result.case.data.get("criterion"):
                ET.SubElement(properties, "property", name="criterion", value=result.case.data["criterion"])
            if result.pass_rate is not None:
                ET.SubElement(properties, "property", name="pass_rate", value=f"{result.pass_rate:.3f}")
            if result.status == "failed":
                ET.SubElement(case, "failure", message=result.reason[:500], type="AssertionFailed").text = _failure_text(result)
            elif result.status == "error":
                ET.SubElement(case, "error", message=result.reason[:500], type="CaseError").text = _failure_text(result)
            elif result.status == "skipped":
                ET.SubElement(case, "skipped", message=result.reason)
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(run: EvalRun, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    junit_xml(run).write(path, encoding="utf-8", xml_declaration=True)


def _escape_data(text: str) -> str:
    # GitHub workflow-command escaping (actions/toolkit: escapeData / escapeProperty).
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_annotations(run: EvalRun) -> list[str]:
    """``::error file=…,line=…::`` for each failed or errored case (at its failing assertion's line)."""
    out = []
    for result in run.results:
        if result.status not in ("failed", "error"):
            continue
        title = f"zhin eval: {result.case.id} {result.status}"
        out.append(f"::error file={_escape_property(str(result.case.file))},line={result.line},"
                   f"title={_escape_property(title)}::{_escape_data(result.reason)}")
    return out


def step_summary(run: EvalRun) -> str:
    counts = run.counts()
    lines = [f"### zhin eval ({'live' if run.live else 'offline'})", "",
             " · ".join(f"**{n}** {s}" for s, n in counts.items()), "",
             *([run.live_answers.describe().replace("|", "\\|"), ""] if run.live_answers is not None else []),
             "| case | expect | providers | status | detail |", "|---|---|---|---|---|"]
    icons = {"passed": "✅", "failed": "❌", "error": "💥", "skipped": "⏭️"}
    for r in run.results:
        detail = r.reason.replace("|", "\\|").replace("\n", " ")[:300]
        lines.append(f"| `{r.case.id}` | {r.case.expect} | {', '.join(r.providers)} | {icons[r.status]} {r.status} | {detail} |")
    return "\n".join(lines) + "\n"


def publish_github(run: EvalRun, emit: object = print) -> None:
    """When ``GITHUB_ACTIONS=true``: annotations (the CLI emits them on stderr, which the runner also reads, so
    ``--json`` keeps stdout clean) and the Markdown summary appended to ``$GITHUB_STEP_SUMMARY``."""
    if os.environ.get("GITHUB_ACTIONS") != "true":
        return
    for line in github_annotations(run):
        emit(line)  # type: ignore[operator]
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as handle:
            handle.write(step_summary(run))
