"""zhin in a pull request: run the gates, write one Markdown report, post or update one pull-request comment.

What ``action.yml`` runs (through ``scripts/zhin_ci.py``). Three separable parts, so each is tested on its own:

* :func:`run_gate` runs ``zhin eval`` / ``zhin prefix-diff`` with ``--json`` as a user would (a child process of this
  interpreter), keeping their exit status, their document and their stderr (annotations, error lines);
* :func:`comment_body` turns the two results into Markdown — pure, no network: the before/after table of eval and the
  cache-break findings of prefix-diff, headed by the hidden :data:`MARKER` that finds the comment again;
* :func:`upsert_comment` talks to the GitHub REST API at a base URL (``GITHUB_API_URL``; a loopback fake in the
  tests): the first issue comment holding the marker is PATCHed, else one is POSTed. Only ``urllib`` — no client
  library for four requests.

Text from inputs (case ids, reasons, byte excerpts, session ids) reaches the comment through :func:`cell`, which
escapes for Markdown, not for a terminal: line breaks folded, backslashes, table pipes and backticks escaped, control
and invisible characters shown as ``\\uXXXX``, and ``<``/``>``/``&`` as entities, so a prompt excerpt can neither break
the table, open a code span, inject HTML nor forge the marker — and a case id (``adr-1.yaml::adr1``) reads as written.
The copy of the report printed to the job's log is a terminal's: it goes through :func:`log_text` (``terminal_safe``,
so no ``::`` from an input can start a workflow command there).
"""

from __future__ import annotations

import html
import json
import os
import shlex
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from zhin_cli.core.errors import EXIT_CANNOT_RUN, EXIT_FOUND, EXIT_OK, UsageError, ZhinError
from zhin_cli.core.ghactions import summary_cell
from zhin_cli.core.jsontext import JSON, JSONObject
from zhin_cli.core.terminaltext import terminal_safe, terminal_safe_lines, unsafe_character

MARKER = "<!-- zhin -->"
GITHUB_API = "https://api.github.com"
# GitHub refuses comment bodies past 65,536 characters; rows past these counts are summarised in one line.
MAX_ROWS = 50
MAX_BODY = 60_000
PAGE_SIZE = 100


# The token may not write here (a pull request from a fork gets a read-only one): the comment is skipped, not the step.
REFUSED_STATUSES = (401, 403)


class GitHubApiError(ZhinError):
    """A GitHub REST call that failed (HTTP status or connection): one line naming the call, exit 3. ``status``:
    the HTTP status (None: no answer)."""

    exit_code = EXIT_CANNOT_RUN

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    @property
    def refused(self) -> bool:
        """The token lacks the permission (a fork's pull request): posting is best effort there."""
        return self.status in REFUSED_STATUSES


@dataclass(frozen=True)
class GateRun:
    """One gate as it ran: its argv (after ``zhin``), exit status, ``--json`` document (None when it wrote none)
    and stderr."""

    name: str
    args: tuple[str, ...]
    exit_code: int
    document: JSONObject | None
    stderr: str = ""

    def error_line(self) -> str:
        """The gate's own one-line error (its last ``zhin: error:`` line), else its last stderr line."""
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("zhin: error:")]
        return (errors or lines or [f"exit status {self.exit_code}"])[-1]


@dataclass(frozen=True)
class CiOptions:
    """What the action's inputs say. Empty ``eval_paths``/``sessions`` skip that gate."""

    eval_paths: tuple[str, ...] = ("eval_cases",)
    sessions: tuple[str, ...] = ()
    base: str = ""
    head: str = ""
    fail_on: str = ""
    config: str = ""
    allow_plugins: bool = False
    allow_ref_plugins: bool = False
    comment: bool = True
    repository: str = ""
    pull_request: int | None = None
    api_url: str = GITHUB_API
    token: str = field(default="", repr=False)


@dataclass(frozen=True)
class CommentResult:
    action: str  # "created" | "updated"
    id: int
    url: str


# ---------------------------------------------------------------------------------------------------------- gates


def eval_args(options: CiOptions) -> tuple[str, ...]:
    args = ["eval", *options.eval_paths, "--json"]
    if options.base and options.head:
        args += ["--base", options.base, "--head", options.head]
    return tuple(args)


def prefix_diff_args(options: CiOptions) -> tuple[str, ...]:
    args = ["prefix-diff", *options.sessions, "--json"]
    if options.base and options.head:
        args += ["--base", options.base, "--head", options.head]
    if options.fail_on:
        args += ["--fail-on", options.fail_on]
    return tuple(args)


def global_args(options: CiOptions) -> tuple[str, ...]:
    """zhin's own trust opt-ins, given before the command (docs/safety.md "Plugins and trust")."""
    return (("--allow-plugins",) if options.allow_plugins else ()) + (
        ("--allow-ref-plugins",) if options.allow_ref_plugins else ())


def gate_environment(options: CiOptions, environ: Mapping[str, str]) -> dict[str, str]:
    """The child's environment: the caller's, less the step-summary file (this run writes one combined summary, so a
    gate must not append its own) and less the token (a gate never needs it)."""
    env = {k: v for k, v in environ.items() if k not in ("GITHUB_STEP_SUMMARY", "GITHUB_TOKEN")}
    if options.config:
        env["ZHIN_CONFIG"] = options.config
    return env


def run_gate(name: str, args: Sequence[str], *, env: Mapping[str, str], cwd: str | None = None) -> GateRun:
    """``python -m zhin_cli ARGS`` in a child process; stderr is echoed (the runner reads annotations from it)."""
    proc = subprocess.run([sys.executable, "-m", "zhin_cli", *args], capture_output=True, text=True, env=dict(env),
                          cwd=cwd, check=False)
    sys.stderr.write(proc.stderr)
    return GateRun(name, tuple(args), proc.returncode, parse_document(proc.stdout), proc.stderr)


def parse_document(stdout: str) -> JSONObject | None:
    try:
        document: JSON = json.loads(stdout)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


def ci_exit_code(runs: Sequence[GateRun]) -> int:
    """The step's status: trouble (≥ 2) before findings (1) before success, so a gate that could not run is never
    reported as a mere regression. A gate that wrote no document did not run to its end, whatever its status (a
    crash exits 1, as a finding would): that is trouble too."""
    codes = [run.exit_code if run.document is not None or run.exit_code > EXIT_FOUND else EXIT_CANNOT_RUN for run in runs]
    trouble = [code for code in codes if code not in (EXIT_OK, EXIT_FOUND)]
    if trouble:
        return max(trouble)
    return EXIT_FOUND if EXIT_FOUND in codes else EXIT_OK


# ---------------------------------------------------------------------------------------------------------- body


def cell(text: object, limit: int = 300) -> str:
    """Text from inputs as one Markdown table cell (see the module docstring), cut to ``limit`` characters of input."""
    flat = " ".join(str(text).replace("\r\n", "\n").replace("\r", "\n").split("\n"))
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    markdown = flat.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`")
    shown = "".join(f"\\u{ord(c):04x}" if unsafe_character(c) else c for c in markdown)
    return html.escape(shown, quote=False)


def log_text(body: str) -> str:
    """The report as the job's log shows it: a terminal's escaping (no workflow command from an input), lines kept."""
    return terminal_safe_lines(body)


def comment_body(eval_run: GateRun | None, prefix_run: GateRun | None) -> str:
    """The pull-request comment (also the step summary): marker, heading, one section per gate that ran."""
    parts = [MARKER, "## zhin: what this change sends to the model", ""]
    if eval_run is not None:
        parts += eval_section(eval_run)
    if prefix_run is not None:
        parts += prefix_section(prefix_run)
    if eval_run is None and prefix_run is None:
        parts.append("No gate ran (the action's `eval` and `sessions` inputs are both empty).")
    return fit(parts)


def fit(parts: list[str]) -> str:
    body = "\n".join(parts).rstrip("\n") + "\n"
    if len(body) <= MAX_BODY:
        return body
    return body[: MAX_BODY - 80].rsplit("\n", 1)[0] + "\n\n… (cut: the full report is in the job's step summary)\n"


def verdict(run: GateRun) -> str:
    if run.document is None:
        return "💥"
    return {EXIT_OK: "✅", EXIT_FOUND: "❌"}.get(run.exit_code, "💥")


def trouble_section(run: GateRun) -> list[str]:
    return [f"### {verdict(run)} zhin {run.name}: could not run (exit {run.exit_code})", "",
            f"> {cell(run.error_line())}", ""]


# A gate's --json document is read as any JSON: a member of the wrong type reads as empty, never as a traceback.


def _list(value: JSON) -> list[JSON]:
    return value if isinstance(value, list) else []


def _objects(value: JSON) -> list[JSONObject]:
    return [item for item in _list(value) if isinstance(item, dict)]


def _object(value: JSON) -> JSONObject:
    return value if isinstance(value, dict) else {}


def _texts(value: JSON) -> list[str]:
    return [item for item in _list(value) if isinstance(item, str)]


def rows_cut(count: int) -> list[str]:
    return ["", f"… and {count - MAX_ROWS} more row(s)"] if count > MAX_ROWS else []


def eval_section(run: GateRun) -> list[str]:
    document = run.document
    if document is None or not isinstance(document.get("cases"), list):
        return trouble_section(run)
    if "regressions" in document:
        return eval_compare_section(run, document)
    return eval_plain_section(run, document)


def eval_compare_section(run: GateRun, document: JSONObject) -> list[str]:
    cases = _objects(document["cases"])
    lines = [f"### {verdict(run)} zhin eval: {document['regressions']} regression(s)", "",
             f"base {cell(document.get('base', ''))} → head {cell(document.get('head', ''))}", "",
             "| case | base → head | change | Δ request tokens | Δ header tokens | notes |", "|---|---|---|---:|---:|---|"]
    for case in cases[:MAX_ROWS]:
        providers = _objects(case.get("providers"))
        lines.append(f"| {cell(case.get('case', ''))} | {cell(case.get('base'))} → {cell(case.get('head'))} | "
                     f"{cell(case.get('change'))} | {deltas(providers, 'prompt_tokens_delta')} | "
                     f"{deltas(providers, 'header_tokens_delta')} | {cell('; '.join(_texts(case.get('reasons'))))} |")
    return lines + rows_cut(len(cases)) + [""]


def deltas(providers: list[JSONObject], key: str) -> str:
    return cell(", ".join(f"{p.get('provider')} {p[key]:+,}" for p in providers if p.get(key))) or "0"


def eval_plain_section(run: GateRun, document: JSONObject) -> list[str]:
    counts = _object(document.get("summary"))
    shown = " · ".join(f"{counts.get(k, 0)} {k}" for k in ("passed", "failed", "error", "skipped"))
    lines = [f"### {verdict(run)} zhin eval: {shown}", "", "| case | status | detail |", "|---|---|---|"]
    cases = _objects(document["cases"])
    for case in cases[:MAX_ROWS]:
        lines.append(f"| {cell(case.get('id', ''))} | {cell(case.get('status'))} | {cell(case.get('reason') or '')} |")
    return lines + rows_cut(len(cases)) + [""]


def prefix_section(run: GateRun) -> list[str]:
    document = run.document
    if document is None or not isinstance(document.get("sessions"), list):
        return trouble_section(run)
    fail_on = ", ".join(_texts(document.get("fail_on"))) or "nothing"
    lines = [f"### {verdict(run)} zhin prefix-diff: {document.get('unexpected', 0)} unexpected cache break(s)", "",
             f"fail on: {cell(fail_on)}", ""]
    if document.get("mode") == "configs":
        lines += prefix_configs_rows(document)
    else:
        lines += prefix_turns_rows(document)
    return lines + [""]


def prefix_configs_rows(document: JSONObject) -> list[str]:
    sessions = _objects(document["sessions"])
    lines = [f"base {cell(document.get('base', ''))} → head {cell(document.get('head', ''))}", "",
             "| session | requests that differ | changed segments | first divergence | head: unexpected breaks |",
             "|---|---:|---|---|---|"]
    for session in sessions[:MAX_ROWS]:
        changed = ", ".join(f"{s.get('id')} ({s.get('status')}, {s.get('tokens', 0):+,} tokens)"
                            for s in _objects(session.get("segments"))) or "none"
        lines.append(f"| {cell(session.get('session_id', ''))} | {len(_list(session.get('differing_turns')))}/"
                     f"{session.get('turns', 0)} | {cell(changed)} | {divergence(session.get('first_divergence'))} | "
                     f"{cell(break_causes(session.get('head_stability'), document))} |")
    return lines + rows_cut(len(sessions))


def divergence(first: JSON) -> str:
    if not isinstance(first, dict) or not first:
        return "none"
    return cell(f"turn {first.get('turn')}, byte {first.get('offset')} ({first.get('segment')})")


def break_causes(stability: JSON, document: JSONObject) -> str:
    """Causes of the pairs that count as breaks (the document's fail_on), counted: ``system_changed 2``."""
    if not isinstance(stability, dict) or not stability:
        return "none"
    fail_on = set(_texts(document.get("fail_on")))
    counts: dict[str, int] = {}
    for pair in _objects(stability.get("pairs")):
        cause = pair.get("cause")
        if isinstance(cause, str) and cause in fail_on:
            counts[cause] = counts.get(cause, 0) + 1
    return ", ".join(f"{cause} {n}" for cause, n in counts.items()) or "none"


def prefix_turns_rows(document: JSONObject) -> list[str]:
    sessions = _objects(document["sessions"])
    lines = ["| session | pairs | unexpected breaks | cached share |", "|---|---:|---|---:|"]
    for session in sessions[:MAX_ROWS]:
        summary = _object(session.get("summary"))
        lines.append(f"| {cell(session.get('session_id', ''))} | {summary.get('pairs', 0)} | "
                     f"{cell(break_causes(session, document))} | {summary.get('cached_share', 0):.0%} |")
    return lines + rows_cut(len(sessions))


# ---------------------------------------------------------------------------------------------------------- GitHub


def api_call(api_url: str, token: str, method: str, path: str, payload: JSONObject | None = None) -> JSON:
    """One REST call: JSON in, JSON out. Every failure is one :class:`GitHubApiError` line (no token in it)."""
    url = api_url.rstrip("/") + path
    data = json.dumps(payload).encode() if payload is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={
        "Accept": "application/vnd.github+json", "Authorization": f"Bearer {token}",
        "X-GitHub-Api-Version": "2022-11-28", "Content-Type": "application/json", "User-Agent": "zhin-ci"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            answer: JSON = json.loads(response.read() or b"null")
            return answer
    except urllib.error.HTTPError as error:
        raise GitHubApiError(f"GitHub API {method} {path}: HTTP {error.code} {api_message(error)}", error.code) from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise GitHubApiError(f"GitHub API {method} {path}: {getattr(error, 'reason', error)}") from None


def api_message(error: urllib.error.HTTPError) -> str:
    try:
        message = json.loads(error.read()).get("message", "")
    except (ValueError, AttributeError, OSError):
        message = ""
    return summary_cell(str(message or error.reason), 200)


def find_marked_comment(api_url: str, token: str, repository: str, number: int) -> int | None:
    """The id of the first comment on the pull request whose body holds :data:`MARKER`, every page read."""
    page = 1
    while True:
        comments = api_call(api_url, token, "GET",
                            f"/repos/{repository}/issues/{number}/comments?per_page={PAGE_SIZE}&page={page}")
        if not isinstance(comments, list):
            raise GitHubApiError(f"GitHub API GET /repos/{repository}/issues/{number}/comments: not a list")
        for comment in comments:
            if isinstance(comment, dict) and MARKER in str(comment.get("body", "")):
                return _comment_id(comment.get("id"), f"/repos/{repository}/issues/{number}/comments")
        if len(comments) < PAGE_SIZE:
            return None
        page += 1


def upsert_comment(api_url: str, token: str, repository: str, number: int, body: str) -> CommentResult:
    """PATCH the marked comment when there is one, else POST a new one."""
    existing = find_marked_comment(api_url, token, repository, number)
    if existing is not None:
        reply = api_call(api_url, token, "PATCH", f"/repos/{repository}/issues/comments/{existing}", {"body": body})
        action = "updated"
    else:
        reply = api_call(api_url, token, "POST", f"/repos/{repository}/issues/{number}/comments", {"body": body})
        action = "created"
    reply = reply if isinstance(reply, dict) else {}
    return CommentResult(action, _comment_id(reply.get("id", existing or 0), "the comment's reply"), str(reply.get("html_url", "")))


def _comment_id(value: JSON, where: str) -> int:
    """A comment's ``id`` as GitHub sends it (a number); anything else is the API's error, in one line."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise GitHubApiError(f"GitHub API {where}: a comment without a numeric id ({summary_cell(repr(value), 80)})")
    try:
        return int(value)
    except (ValueError, OverflowError):
        raise GitHubApiError(f"GitHub API {where}: a comment without a numeric id ({summary_cell(str(value), 80)})") from None


# ---------------------------------------------------------------------------------------------------------- run


def options_from(values: Mapping[str, str | int | bool | None], environ: Mapping[str, str]) -> CiOptions:
    """CiOptions from the script's arguments (its argparse values), filling what the runner knows (repository, API
    URL, token, the pull request's number and refs from ``GITHUB_EVENT_PATH``) when an argument leaves it empty."""
    event = pull_request_event(environ.get("GITHUB_EVENT_PATH", ""))
    given, event_number = values.get("pull_request"), event.get("number")
    number = given if isinstance(given, (int, str)) and given else (
        event_number if isinstance(event_number, (int, str)) else None)
    return CiOptions(
        eval_paths=split_words(_text(values, "eval", "eval_cases"), "--eval"),
        sessions=split_words(_text(values, "sessions"), "--sessions"),
        base=_text(values, "base") or str(_object(event.get("base")).get("sha", "")),
        head=_text(values, "head") or str(_object(event.get("head")).get("sha", "")),
        fail_on=_text(values, "fail_on"), config=_text(values, "config"),
        allow_plugins=bool(values.get("allow_plugins")), allow_ref_plugins=bool(values.get("allow_ref_plugins")),
        comment=bool(values.get("comment", True)),
        repository=_text(values, "repository") or environ.get("GITHUB_REPOSITORY", ""),
        pull_request=int(number) if number else None,
        api_url=_text(values, "api_url") or environ.get("GITHUB_API_URL", GITHUB_API),
        token=environ.get("GITHUB_TOKEN", ""))


def _text(values: Mapping[str, str | int | bool | None], key: str, default: str = "") -> str:
    """A text argument; ``default`` when it is absent (argparse's None too)."""
    value = values.get(key, default)
    return value if isinstance(value, str) else default


def split_words(text: str, option: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(text))
    except ValueError as error:
        raise UsageError(f"{option}: {error}") from None


def pull_request_event(path: str) -> JSONObject:
    """The ``pull_request`` object of the workflow's event payload, or {} (a push, a manual run, no file)."""
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            event: JSON = json.load(handle)
    except (OSError, ValueError):
        return {}
    pull = event.get("pull_request") if isinstance(event, dict) else None
    return pull if isinstance(pull, dict) else {}


def run_ci(options: CiOptions, *, environ: Mapping[str, str] | None = None, cwd: str | None = None) -> int:
    """Run the gates, write the step summary, post/update the comment; the step's exit status."""
    environ = os.environ if environ is None else environ
    env = gate_environment(options, environ)
    prefix = global_args(options)
    eval_run = run_gate("eval", prefix + eval_args(options), env=env, cwd=cwd) if options.eval_paths else None
    prefix_run = run_gate("prefix-diff", prefix + prefix_diff_args(options), env=env, cwd=cwd) if options.sessions else None
    body = comment_body(eval_run, prefix_run)
    sys.stdout.write(log_text(body))  # the job's log (and a local run) shows the report too
    sys.stdout.flush()
    write_step_summary(body, environ.get("GITHUB_STEP_SUMMARY", ""))
    code = ci_exit_code([run for run in (eval_run, prefix_run) if run is not None])
    if options.comment:
        post_comment(options, body)
    return code


def write_step_summary(body: str, path: str) -> None:
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(body.replace(MARKER + "\n", "", 1))
    except OSError:
        pass  # decoration: the gates' status is what the step reports


def post_comment(options: CiOptions, body: str) -> None:
    if options.pull_request is None:
        print("zhin: note: not a pull request: no comment posted", file=sys.stderr)
        return
    if not options.repository or not options.token:
        raise UsageError("a pull-request comment needs GITHUB_REPOSITORY and GITHUB_TOKEN (or --no-comment)")
    try:
        result = upsert_comment(options.api_url, options.token, options.repository, options.pull_request, body)
    except GitHubApiError as error:
        if not error.refused:
            raise
        print(f"zhin: warning: no pull-request comment ({terminal_safe(error.message)}): the token may not "
              "write here (a pull request from a fork); the report is in the step summary", file=sys.stderr)
        return
    print(f"zhin: comment {result.action}: {result.url or result.id}", file=sys.stderr)
