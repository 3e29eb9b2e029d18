"""``zhin eval compare A.json B.json`` reads saved results: a cut or edited one is a one-line input error.

Typing the comparison (``tools/eval/result.py``: the ``--json`` document as TypedDicts) found three tracebacks: a
saved result whose metrics lack a count (``KeyError``), hold a count as text (``TypeError``), or whose case is not
an object (``AttributeError``). ``load_result`` now checks every key the comparison reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from zhin_cli.core.errors import InputError
from zhin_cli.tools.eval.compare import compare_results, load_result

METRICS = {"provider": "openai", "turns": 2, "prompt_tokens": 800, "header_tokens": 100,
           "unexpected_breaks": [{"turn": 2, "cause": "system_changed", "segment": "plugin.clock"}],
           "rejected": [{"turn": 1, "status": 400, "message": "bad"}]}


def result(**metrics: object) -> dict[str, Any]:
    case = {"id": "a", "file": "cases/a.yaml", "status": "passed", "reason": "", "expect": "pass",
            "metrics": [{**METRICS, **metrics}]}
    return {"version": 1, "cases": [case]}


def saved(tmp_path: Path, name: str, data: object) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


BROKEN = [
    pytest.param({"version": 1, "cases": [{"id": "a", "metrics": [{"provider": "openai"}]}]},
                 "cases[0].metrics[0]: 'prompt_tokens' is a required property", id="missing-count"),
    pytest.param(result(prompt_tokens="800"), "cases[0].metrics[0].prompt_tokens: '800' is not of type 'integer'", id="count-as-text"),
    pytest.param({"version": 1, "cases": [5]}, "cases[0]: 5 is not of type 'object'", id="case-not-an-object"),
    pytest.param(result(rejected=[{"turn": "1", "status": 400, "message": "x"}]), "cases[0].metrics[0].rejected[0].turn",
                 id="turn-as-text"),
    pytest.param(result(unexpected_breaks=None), "cases[0].metrics[0].unexpected_breaks: None is not of type 'array'",
                 id="breaks-null"),
]


@pytest.mark.parametrize(("data", "message"), BROKEN)
def test_a_broken_saved_result_is_an_input_error_naming_the_key(tmp_path: Path, data: object, message: str) -> None:
    path = saved(tmp_path, "bad.json", data)
    with pytest.raises(InputError) as error:
        load_result(path)
    assert message in error.value.message and error.value.where == str(path)


@pytest.mark.parametrize(("data", "message"), BROKEN[:3])
def test_the_cli_says_it_in_one_line_with_exit_3(zhin: Any, tmp_path: Path, data: object, message: str) -> None:
    saved(tmp_path, "bad.json", data)
    run = zhin("eval", "compare", "bad.json", "bad.json")
    assert run.returncode == 3 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines() == [f"zhin: error: bad.json: not a zhin eval --json result: {message}"]


def test_a_well_formed_result_compares(tmp_path: Path) -> None:
    # negative control: the same document without the damage loads, and a changed count is compared
    base = load_result(saved(tmp_path, "base.json", result()))
    head = load_result(saved(tmp_path, "head.json", result(prompt_tokens=812, rejected=[])))
    (case,) = compare_results(base, head).cases
    (provider,) = case.providers
    assert (provider.prompt_tokens, provider.fixed_rejections) == (12, [{"turn": 1, "status": 400, "message": "bad"}])
    assert case.change == "changed" and not case.regressed


def test_a_result_that_is_no_eval_document_keeps_its_message(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"not a zhin eval --json result \(version 1 with cases\)"):
        load_result(saved(tmp_path, "other.json", {"version": 2, "cases": []}))
