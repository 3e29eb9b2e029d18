"""``zhin serve``: a loopback server that answers chat requests the way the real APIs do, offline."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from zhin_cli._cli import ConfigOption, app, check_options, command_context, handles_errors
from zhin_cli.core.redact import mask_url
from zhin_cli.core.terminaltext import terminal_safe
from zhin_cli.tools.serve.server import ENDPOINTS, REQUEST_DEADLINE, serve
from zhin_cli.tools.serve.upstream import READ_TIMEOUT


def _stderr_line(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _config_provider() -> str:
    """zhin.yaml's ``provider:`` when it speaks openai-chat (POST /v1/chat/completions answers as it), else openai:
    a provider of another wire format already answers its own route (POST /v1/messages, …), so a config naming it is
    no error here (a note says so)."""
    from zhin_cli.pipeline.assemble import DEFAULT_PROVIDER
    from zhin_cli.pipeline.providers import PROVIDERS

    context = command_context()
    named = context.config.provider if context is not None else None
    if not named:
        return DEFAULT_PROVIDER
    dialect = ENDPOINTS[CHAT_ROUTE].dialect
    if named in PROVIDERS and PROVIDERS[named].wire == dialect:
        return named
    why = f"speaks {PROVIDERS[named].wire}, not {dialect}" if named in PROVIDERS else "is not registered (its plugins did not run)"
    _stderr_line(terminal_safe(f"zhin: note: zhin.yaml's provider {named} {why}: POST {CHAT_ROUTE} answers as "
                               f"{DEFAULT_PROVIDER} (--provider chooses another)"))
    return DEFAULT_PROVIDER


CHAT_ROUTE = "/v1/chat/completions"


@app.command("serve")
@handles_errors
def serve_command(
    host: Annotated[str, typer.Option("--host", help="Loopback address to listen on (127.0.0.1, ::1 or localhost only).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on (0 = pick a free port).")] = 0,
    provider: Annotated[str | None, typer.Option("--provider", "-p", envvar="ZHIN_PROVIDER", help="Provider profile for POST /v1/chat/completions: any registered provider of the openai-chat wire format (see `zhin providers`; default: zhin.yaml's provider when it speaks openai-chat, else openai).")] = None,
    capture: Annotated[Path | None, typer.Option("--capture", help="Write every request body, as received, to DIR/NNNNN-<route>.json (for `zhin request-diff`), and what it got (status, usage, answer) to DIR/NNNNN-<route>.exchange.json.")] = None,
    upstream: Annotated[str | None, typer.Option("--upstream", metavar="URL", help="Record, do not answer: forward every request to URL + its path (e.g. https://api.openai.com, not …/v1), relay the answer (streams as they arrive), record it into --capture DIR (required). Credentials are forwarded, never written. Unreachable: 502.")] = None,
    upstream_deadline: Annotated[float, typer.Option("--upstream-deadline", metavar="SECONDS", help=f"With --upstream: the provider's answer must begin (a non-streamed one: be complete) within this, else 504; a stream may then run on while no gap between its pieces exceeds {READ_TIMEOUT:g} s. Raise it for slow non-streamed answers.")] = REQUEST_DEADLINE,
    config: ConfigOption = None,
) -> None:
    """Run a local conformance server: point a bot or SDK at it to check its requests offline.

    POST /v1/chat/completions (OpenAI-shaped, --provider profile), POST /v1/messages (Anthropic-shaped) and POST /v1beta/models/<model>:generateContent (Gemini-shaped), these two answered as their wire format's default provider (`zhin providers`). A request the provider would reject gets the provider's status and error body; any other gets a deterministic reply whose usage reports prompt-cache hits from the server's own prefix cache. With --upstream URL it is a recorder in front of the real provider instead (docs/record.md). Prints the base URL on stderr, logs one line per request there (prompt=, read=, written= tokens of the usage), and runs until Ctrl-C or SIGTERM. Loopback only; Host/Origin/Content-Type guarded; bodies over 64 MiB get 413 and are not captured; captures are written atomically (docs/safety.md).

    Exit status: 0 stopped with Ctrl-C or SIGTERM, 2 usage (non-loopback host, unknown provider, --upstream without --capture or not an http(s) origin, --upstream-deadline out of range), 3 cannot run (port in use).
    """

    check_options(provider)  # a provider of the config's plugins (--config) is loaded first, for the whole run
    provider = provider or _config_provider()

    def ready(url: str) -> None:
        routes = ", ".join(f"POST {route}" for route in ENDPOINTS)
        captured = f"; capturing request bodies into {capture}" if capture is not None else ""
        answering = f"forwarding to {mask_url(upstream)}" if upstream is not None else f"provider {provider}"
        _stderr_line(terminal_safe(f"zhin serve: listening on {url} ({answering}; {routes}){captured}; Ctrl-C to stop"))

    serve(provider=provider, host=host, port=port, on_ready=ready, log=lambda line: _stderr_line(f"zhin serve: {line}"),
          capture=capture, upstream=upstream, upstream_deadline=upstream_deadline)
