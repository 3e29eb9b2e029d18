"""The provider zhin.yaml names: the published schema accepts a plugin's name (zhin checks it once the plugins ran),
``report window`` and ``serve`` use it when ``--provider`` is not given, ``serve --help``'s examples start, and
``report window`` names the cache its figures meet (timed)."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import clean_env, default_sigint
from jsonschema import Draft202012Validator

from zhin_cli.core.errors import ConfigError
from zhin_cli.pipeline.config import load_config

ROOT = Path(__file__).resolve().parent.parent
BUSY = ROOT / "fixtures" / "group-busy.jsonl"


def published_schema(zhin: Any) -> Any:
    result = zhin("schema", "config")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def errors(schema: Any, data: object) -> list[str]:
    return [error.message for error in Draft202012Validator(schema).iter_errors(data)]


# --- 1. the published schema -----------------------------------------------------------------------------------


def test_the_published_schema_accepts_a_plugin_providers_name(zhin: Any) -> None:
    schema = published_schema(zhin)
    plugin_named = {"plugins": ["acme_zhin:register"], "provider": "acme",
                    "providers": {"acme": {"prefill": False}, "openai": {"prefill": False}}}
    assert errors(schema, plugin_named) == []
    provider = schema["properties"]["provider"]
    assert "openai" in provider["examples"] and "anthropic" in provider["examples"]  # the built-ins, described
    assert "zhin providers" in provider["description"]
    assert "openai" in schema["properties"]["providers"]["propertyNames"]["examples"]
    assert "enum" not in provider and "enum" not in schema["properties"]["providers"]["propertyNames"]


def test_the_published_schema_still_refuses_a_provider_that_is_no_string(zhin: Any) -> None:
    """Negative control: the name is free, its type and a profile's overrides are not."""
    schema = published_schema(zhin)
    assert errors(schema, {"provider": 5}) != []
    assert errors(schema, {"provider": ["openai"]}) != []
    assert errors(schema, {"providers": {"acme": {"colour": "red"}}}) != []
    assert errors(schema, {"providers": {"acme": "fast"}}) != []
    assert errors(schema, {"provider": None}) == []  # `provider: ~` is the default, as before


def test_zhin_itself_still_refuses_a_name_nobody_registers_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "zhin.yaml"
    path.write_text("model: gpt-4o\nprovider: acme\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="unknown provider 'acme'") as raised:
        load_config(path, cwd=tmp_path)
    assert raised.value.where == f"{path}:2"
    path.write_text("model: gpt-4o\nprovider: anthropic\n", encoding="utf-8")  # control: a built-in loads
    assert load_config(path, cwd=tmp_path).provider == "anthropic"


# --- 2 and 4. report window: the config's provider, the timed cache --------------------------------------------


def window(zhin: Any, tmp_path: Path, config: str, *options: str) -> Any:
    (tmp_path / "a.yaml").write_text(config, encoding="utf-8")
    return zhin("report", "window", BUSY, "--config", tmp_path / "a.yaml", "-j", "1", *options)


def test_report_window_bills_the_provider_zhin_yaml_names(zhin: Any, tmp_path: Path) -> None:
    named = window(zhin, tmp_path, "provider: anthropic\n", "--json")
    assert named.returncode == 0, named.stderr
    assert json.loads(named.stdout)["provider"] == "anthropic"
    text = window(zhin, tmp_path, "provider: anthropic\n")
    assert text.stdout.startswith("anthropic "), text.stdout[:200]
    # negative controls: --provider still wins, and a config naming none bills openai
    chosen = window(zhin, tmp_path, "provider: anthropic\n", "--json", "-p", "deepseek")
    assert json.loads(chosen.stdout)["provider"] == "deepseek"
    unnamed = window(zhin, tmp_path, "model: ~\n", "--json")
    assert json.loads(unnamed.stdout)["provider"] == "openai"


def test_report_window_names_the_timed_cache_in_its_header_and_json(zhin: Any, tmp_path: Path) -> None:
    from zhin_cli.tools.report.economy import CACHE_MODEL as ECONOMY

    document = window(zhin, tmp_path, "model: ~\n", "--json")
    assert document.returncode == 0, document.stderr
    data = json.loads(document.stdout)
    assert data["cache_model"] == "timed" == ECONOMY  # as report economy --json names it
    # control: an added key — version 1 and every key it had are still there
    assert data["version"] == 1
    assert {"provider", "model", "encoding", "price", "notes", "min_context", "sessions", "policies", "recommended",
            "default", "sliding"} <= set(data)
    header = window(zhin, tmp_path, "model: ~\n").stdout.split("window policies")[0]
    assert "timed" in header
    assert "timed" not in header.replace("cache: timed", "")  # once, where the header says which cache


# --- 2 and 3. serve: the config's provider, the examples of --help ---------------------------------------------


def serve_start(arguments: list[str], cwd: Path) -> tuple[int | None, str]:
    """Start ``zhin serve ARGUMENTS`` (on a free port): (exit status if it stopped before listening, else None after
    a SIGTERM, its stderr up to the listening line)."""
    process = subprocess.Popen([sys.executable, "-m", "zhin_cli", "serve", *arguments], cwd=cwd, env=clean_env(),
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               preexec_fn=default_sigint)
    assert process.stderr is not None
    lines: list[str] = []
    try:
        for raw in process.stderr:
            lines.append(raw.decode("utf-8", "replace"))
            if "listening on" in lines[-1]:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=20)
                return None, "".join(lines)
        return process.wait(timeout=20), "".join(lines)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_serve_answers_as_the_openai_chat_provider_zhin_yaml_names(tmp_path: Path) -> None:
    (tmp_path / "d.yaml").write_text("provider: deepseek\n", encoding="utf-8")
    status, stderr = serve_start(["--port", "0", "--config", "d.yaml"], tmp_path)
    assert status is None and "(provider deepseek;" in stderr, stderr
    # negative control: --provider wins over the config
    status, stderr = serve_start(["--port", "0", "--config", "d.yaml", "-p", "vllm"], tmp_path)
    assert status is None and "(provider vllm;" in stderr, stderr


def test_serve_notes_a_configured_provider_of_another_wire_and_answers_as_openai(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("provider: anthropic\n", encoding="utf-8")
    status, stderr = serve_start(["--port", "0", "--config", "a.yaml"], tmp_path)
    assert status is None and "(provider openai;" in stderr, stderr
    assert "zhin: note: zhin.yaml's provider anthropic speaks anthropic-messages" in stderr
    assert "Traceback" not in stderr
    (tmp_path / "n.yaml").write_text("model: ~\n", encoding="utf-8")  # control: no provider named, no note
    status, stderr = serve_start(["--port", "0", "--config", "n.yaml"], tmp_path)
    assert status is None and "(provider openai;" in stderr and "note" not in stderr, stderr


def serve_examples() -> list[str]:
    from zhin_cli._cli.examples import examples_for

    return [line for line in examples_for("serve") if line.startswith("zhin serve")]


@pytest.mark.parametrize("line", serve_examples())
def test_every_serve_example_starts(line: str, tmp_path: Path) -> None:
    """test_cli_conventions only parses a server's examples (``--help``); each one here starts (on a free port)."""
    words = shlex.split(line, comments=True)[2:]
    if "--port" in words:
        words[words.index("--port") + 1] = "0"
    status, stderr = serve_start([*words, "--port", "0"], tmp_path)
    assert status is None, (line, stderr)


def test_a_serve_line_that_cannot_start_is_caught(tmp_path: Path) -> None:
    """Negative control for the check above: the example it replaced (anthropic is no openai-chat provider)."""
    status, stderr = serve_start(["--provider", "anthropic", "--capture", "captured/", "--port", "0"], tmp_path)
    assert status == 2 and stderr.startswith("zhin: error:") and "Traceback" not in stderr, stderr
