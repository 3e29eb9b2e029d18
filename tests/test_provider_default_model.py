"""Issue 31, finding 2: a provider given without a model uses that provider's default model (said once on
stderr), unless the stored model is that provider's; no request names a model/provider pair that cannot exist.

The fixtures' replies were stored with ``gpt-4o`` (an OpenAI model). Negative controls: ``--provider openai``
keeps it (it belongs), ``--model`` is obeyed, and without a provider nothing changes.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from zhin_cli.core.notes import ZhinNote
from zhin_cli.pipeline.facade import Pipeline
from zhin_cli.pipeline.models import ModelChooser, belongs, default_model
from zhin_cli.store import load_session

Zhin = Callable[..., CompletedProcess[str]]


def notes(result: CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("zhin: note: ")]


@pytest.mark.parametrize(("provider", "default"), [("deepseek", "deepseek-chat"), ("anthropic", "claude-sonnet-5")])
def test_trace_with_a_provider_names_its_default_model(zhin: Zhin, fixtures_dir: Path, provider: str, default: str) -> None:
    result = zhin("trace", fixtures_dir / "group-busy.jsonl", "--turn", "4", "--provider", provider, "--show-request")
    assert result.returncode == 0, result.stderr
    assert f"Model: {default} via {provider}." in result.stdout  # the system prompt
    assert f"request 4 · {provider} · {default} ·" in result.stdout
    assert "gpt-4o via" not in result.stdout and "no price for" not in result.stderr
    said = notes(result)
    assert len(said) == 1 and "'gpt-4o'" in said[0] and default in said[0] and "--model" in said[0], said


def test_the_stored_model_is_kept_when_it_is_the_providers(zhin: Zhin, fixtures_dir: Path) -> None:
    result = zhin("trace", fixtures_dir / "group-busy.jsonl", "--turn", "4", "--provider", "openai", "--show-request")
    assert result.returncode == 0, result.stderr
    assert "Model: gpt-4o via openai." in result.stdout
    assert notes(result) == []


def test_an_explicit_model_is_obeyed_without_a_note(zhin: Zhin, fixtures_dir: Path) -> None:
    result = zhin("trace", fixtures_dir / "group-busy.jsonl", "--turn", "4", "--provider", "deepseek",
                  "--model", "deepseek-reasoner", "--show-request")
    assert result.returncode == 0, result.stderr
    assert "Model: deepseek-reasoner via deepseek." in result.stdout
    assert notes(result) == []


def test_the_note_is_said_once_for_every_turn(zhin: Zhin, fixtures_dir: Path) -> None:
    result = zhin("trace", fixtures_dir / "group-busy.jsonl", "--all", "--provider", "deepseek")
    assert result.returncode == 0, result.stderr
    said = notes(result)
    assert len(said) == 1 and "deepseek-chat, deepseek's default" in said[0], result.stderr
    assert "16 requests" in result.stdout  # every request was replayed, yet one note


def test_prefix_diff_and_report_economy_use_the_same_choice(zhin: Zhin, fixtures_dir: Path) -> None:
    diff = zhin("prefix-diff", fixtures_dir / "group-busy.jsonl", "--provider", "anthropic")
    assert "anthropic · claude-sonnet-5" in diff.stdout, diff.stdout[:400]
    assert len(notes(diff)) == 1 and "no price for" not in diff.stderr


def test_the_library_pipeline_chooses_per_request(fixtures_dir: Path) -> None:
    session = load_session(str(fixtures_dir / "group-busy.jsonl"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ZhinNote)
        with Pipeline.open(provider="deepseek", cwd=fixtures_dir) as pipeline:
            models = {request.model for request in pipeline.replay(session)}
    assert models == {"deepseek-chat"}
    assert len([w for w in caught if issubclass(w.category, ZhinNote)]) == 1  # once per pipeline
    with Pipeline.open(cwd=fixtures_dir) as pipeline:  # control: no provider named keeps the stored model
        assert pipeline.request(session, turn=4).model == "gpt-4o"


def test_belongs() -> None:
    assert belongs("openai", "gpt-4o") and belongs("openai", "gpt-4o-2024-08-06") and belongs("openai", "o3-mini")
    assert belongs("anthropic", "claude-opus-4-8") and belongs("deepseek", "deepseek-reasoner")
    assert not belongs("deepseek", "gpt-4o") and not belongs("anthropic", "gpt-4o") and not belongs("openai", "claude-sonnet-5")
    assert not belongs("gemini", "deepseek-chat")
    assert belongs("vllm", "Qwen/Qwen3-0.6B") and belongs("openai-compatible", "gpt-4o")  # gateways serve any model
    assert default_model("deepseek") == "deepseek-chat" and default_model("vllm") == "gpt-4o"


def test_the_chooser() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ZhinNote)
        named = ModelChooser("deepseek", named=True)
        assert named.for_stored("gpt-4o") == "deepseek-chat"
        assert named.for_stored("gpt-4o") == "deepseek-chat"
        assert named.for_stored("deepseek-reasoner") == "deepseek-reasoner"
        assert named.for_stored(None) == "deepseek-chat"
        assert ModelChooser("deepseek", named=False).for_stored("gpt-4o") == "gpt-4o"  # the default provider: as before
        assert ModelChooser("deepseek", "deepseek-chat", named=True).for_stored("gpt-4o") == "deepseek-chat"
    assert len([w for w in caught if issubclass(w.category, ZhinNote)]) == 1


def test_the_note_is_said_once_with_parallel_workers(zhin: Zhin, fixtures_dir: Path) -> None:
    # three session files on two worker processes: each worker meets the stored gpt-4o, the command says it once
    for jobs in ("2", "1"):  # the control: the same count without workers
        result = zhin("prefix-diff", fixtures_dir, "--provider", "deepseek", "-j", jobs)
        assert result.returncode == 0, result.stderr
        assert len(notes(result)) == 1, (jobs, result.stderr)


def test_report_windows_target_is_the_providers_model() -> None:
    from zhin_cli.pipeline.config import Config
    from zhin_cli.tools.report.window import target

    assert target("gemini", None, Config()).model == "gemini-2.5-flash"  # was gpt-4o: a pair that cannot exist
    assert target("gemini", "gemini-3-pro", Config()).model == "gemini-3-pro"  # control: the user's model
    assert target("anthropic", None, Config()).model == "claude-sonnet-5"  # control: economy's case, as before
