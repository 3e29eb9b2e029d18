"""The GitHub Action's step (action.yml): run zhin's gates on a pull request, summarise, comment. docs/ci.md.

Thin: the work is zhin_cli.tools.ci.comment. Run it locally the same way (``--no-comment`` to skip GitHub):

    python scripts/zhin_ci.py --eval eval_cases --sessions fixtures/ --base main --head HEAD --no-comment

Exit status: 0 every gate passed, 1 a gate found something (eval: a failure or regression; prefix-diff: an unexpected
cache break), ≥ 2 a gate (or the comment) could not run — the gate's own code (2 usage, 3 could not run, 4 bad case).
A comment the token may not post (HTTP 401/403: a fork's pull request) is a warning, not a failure.
"""

from __future__ import annotations

import argparse
import os
import sys

from zhin_cli.core.errors import ZhinError
from zhin_cli.core.terminaltext import terminal_safe
from zhin_cli.tools.ci.comment import options_from, run_ci


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="zhin_ci.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--eval", default="eval_cases", help="eval case files/folders, space-separated ('' skips eval)")
    p.add_argument("--sessions", default="", help="prefix-diff sessions, space-separated ('' skips prefix-diff)")
    p.add_argument("--base", default="", help="base ref (default: the pull request's base commit)")
    p.add_argument("--head", default="", help="head ref (default: the pull request's head commit)")
    p.add_argument("--fail-on", dest="fail_on", default="", help="prefix-diff --fail-on causes")
    p.add_argument("--config", default="", help="zhin.yaml for cases and sessions without one")
    p.add_argument("--allow-plugins", dest="allow_plugins", action="store_true",
                   help="run the plugins of the checkout's zhin.yaml and eval cases")
    p.add_argument("--allow-ref-plugins", dest="allow_ref_plugins", action="store_true",
                   help="run the plugin code of the base/head refs")
    p.add_argument("--comment", action=argparse.BooleanOptionalAction, default=True,
                   help="post or update the pull-request comment")
    p.add_argument("--pull-request", dest="pull_request", type=int, default=None,
                   help="pull-request number (default: from GITHUB_EVENT_PATH)")
    p.add_argument("--repository", default="", help="owner/name (default: GITHUB_REPOSITORY)")
    p.add_argument("--api-url", dest="api_url", default="", help="GitHub REST API base URL (default: GITHUB_API_URL)")
    return p


def main(argv: list[str] | None = None) -> int:
    values = vars(parser().parse_args(argv))
    try:
        return run_ci(options_from(values, os.environ))
    except ZhinError as error:
        print(f"zhin: error: {terminal_safe(str(error))}", file=sys.stderr)
        return error.exit_code


if __name__ == "__main__":
    sys.exit(main())
