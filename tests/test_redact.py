"""Credentials are never shown or stored (issue 14 §7).

Each finding is reproduced first: a database password with an unencoded ``@`` (partly printed, the rest sent to
DNS as a host name), ``?password=`` printed in full, a password in ``OPENAI_BASE_URL`` in eval reports, ``--json``
and the response cache, ``eval --live`` answering from a cache planted in the checkout, and malformed URLs that
ended in a traceback. The last test greps every output of an eval run (text, ``--json``, JUnit, GitHub annotations
and step summary, cache files, the checkout) for the secrets.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import clean_env, run_zhin
from sqlalchemy.engine import make_url

from zhin_cli.core.errors import EXIT_CANNOT_RUN, EXIT_USAGE, UsageError
from zhin_cli.core.redact import is_secret_parameter, mask_url, redact_text, remember_secret, split_userinfo
from zhin_cli.store.db import db_error, parse_db

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "eval_cases" / "live-smoke.yaml"  # one live case, repeat 2: two requests
SECRET = "Sx9-pw-CANARY-4d1e"  # a password
SECRET2 = "Qz7-tok-CANARY-88aa"  # a token in a query parameter


def zhin(*args: object, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return run_zhin(*args, cwd=cwd, env=env or clean_env())  # in this process (conftest)


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zhin: error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- the redaction function ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "shown"), [
    (f"postgresql://bot:{SECRET}@db.example/zhin", "postgresql://***@db.example/zhin"),
    # an unencoded '@' in the password: the LAST '@' ends the user information
    (f"postgresql://bot:ss@{SECRET}@127.0.0.1:5432/zhin", "postgresql://***@127.0.0.1:5432/zhin"),
    (f"mysql://bot:a/b?c#d@{SECRET}@h/zhin", "mysql://***@h/zhin"),
    (f"http://{SECRET}@127.0.0.1:8080/v1", "http://***@127.0.0.1:8080/v1"),
    (f"postgresql://bot@h/zhin?password={SECRET}&sslmode=require", "postgresql://***@h/zhin?password=***&sslmode=require"),
    (f"postgresql://h/zhin?PassWord={SECRET}&sslpassword={SECRET}&x=1", "postgresql://h/zhin?PassWord=***&sslpassword=***&x=1"),
    (f"https://h/v1?api_key={SECRET}&apikey={SECRET}&key={SECRET}&access_token={SECRET}&token={SECRET}&pwd={SECRET}"
     f"&pass={SECRET}&secret={SECRET}&api-key={SECRET}#frag",
     "https://h/v1?api_key=***&apikey=***&key=***&access_token=***&token=***&pwd=***&pass=***&secret=***&api-key=***#frag"),
    ("postgresql://h/zhin?application_name=zhin&sslmode=require", "postgresql://h/zhin?application_name=zhin&sslmode=require"),
    ("sqlite:///tmp/data.sqlite", "sqlite:///tmp/data.sqlite"),
    ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1"),
])
def test_mask_url(url: str, shown: str) -> None:
    assert mask_url(url) == shown
    assert SECRET not in mask_url(url)


def test_masking_changes_only_credentials() -> None:
    # control for the table above: a URL without credentials is left exactly as it is
    for url in ("postgresql://db.example:5432/zhin?sslmode=require", "https://api.openai.com/v1", "mysql://h/zhin?charset=utf8mb4"):
        assert mask_url(url) == url


def test_secret_parameter_names_are_case_insensitive() -> None:
    assert all(is_secret_parameter(n) for n in ("password", "PASSWORD", "Pwd", "SSLPassword", "API-KEY", "Access_Token",
                                                  "client_secret", "db_password"))
    assert not any(is_secret_parameter(n) for n in ("sslmode", "host", "user", "application_name", "charset", "connect_timeout"))


def test_split_userinfo_uses_the_last_at() -> None:
    assert split_userinfo("bot:ss@cret@host/db") == ("bot:ss@cret", "host/db")
    assert split_userinfo("host/db") == (None, "host/db")


def test_redact_text_masks_urls_pairs_and_remembered_secrets() -> None:
    remember_secret(SECRET)
    text = (f"could not connect to postgresql://bot:{SECRET}@h/db (password={SECRET2} user=bot) "
            f"'password': '{SECRET2}' \"token\": \"{SECRET2}\" and the raw {SECRET}")
    shown = redact_text(text)
    assert SECRET not in shown and SECRET2 not in shown
    assert "postgresql://***@h/db" in shown and "user=bot" in shown
    # control: a message without secrets is unchanged
    assert redact_text("connection to server at \"127.0.0.1\", port 1 failed: Connection refused") == \
        "connection to server at \"127.0.0.1\", port 1 failed: Connection refused"


# --- --db: parse first, print the masked form ------------------------------------------------------------------


def test_a_password_with_an_unencoded_at_is_parsed_with_the_last_at() -> None:
    ref = parse_db(f"postgresql://bot:ss@{SECRET}@127.0.0.1:5432/zhin")
    url = make_url(ref.url)
    assert (url.username, url.password, url.host, url.port, url.database) == ("bot", f"ss@{SECRET}", "127.0.0.1", 5432, "zhin")
    assert SECRET not in ref.label and "ss@" not in ref.label and "127.0.0.1:5432/zhin" in ref.label
    assert SECRET not in repr(ref)
    # control: a percent-encoded '@' is the same password
    assert make_url(parse_db(f"postgresql://bot:ss%40{SECRET}@127.0.0.1:5432/zhin").url) == url


def test_server_url_components() -> None:
    url = make_url(parse_db("mysql://u@[::1]:3307/zhin?charset=utf8mb4").url)
    assert (url.drivername, url.username, url.password, url.host, url.port, url.database) == (
        "mysql+pymysql", "u", None, "::1", 3307, "zhin")
    assert url.query == {"charset": "utf8mb4"}
    url = make_url(parse_db("postgresql:///zhin?host=/var/run/postgresql").url)
    assert (url.host, url.database, url.query) == (None, "zhin", {"host": "/var/run/postgresql"})


def test_a_password_query_parameter_is_kept_for_the_driver_but_never_in_the_label() -> None:
    ref = parse_db(f"postgresql://bot@127.0.0.1/zhin?password={SECRET}&sslmode=disable")
    assert make_url(ref.url).query == {"password": SECRET, "sslmode": "disable"}
    assert SECRET not in ref.label and "password=***" in ref.label and "sslmode=disable" in ref.label


@pytest.mark.parametrize("value", [
    "postgresql://[::1:1/db", "postgresql://bot:pw@[::1:1/db", "postgresql://h:notaport/db", "postgresql://h:99999/db",
    "mysql://::1/db", "postgresql://h]/db", "postgresql://h o/db",
])
def test_a_malformed_server_url_is_a_usage_error(value: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_db(value)
    assert str(caught.value).startswith("--db ")
    assert "pw" not in str(caught.value)


def test_db_error_masks_the_password_a_driver_echoes() -> None:
    parse_db(f"postgresql://bot:{SECRET}@127.0.0.1/zhin")  # the password is known from here on
    shown = db_error(RuntimeError(f"invalid dsn: host=127.0.0.1 password={SECRET2} user=bot ({SECRET})\nDETAIL: more"))
    assert SECRET not in shown and SECRET2 not in shown and "host=127.0.0.1" in shown and "user=bot" in shown
    assert db_error(RuntimeError("first line\nsecond")) == "first line"  # control: the rest is unchanged


@pytest.mark.parametrize("scheme", ["postgresql", "mysql"])
def test_cli_unencoded_at_connects_to_the_right_host_and_prints_nothing_of_the_password(tmp_path: Path, scheme: str) -> None:
    port = free_port()  # nobody listens: the driver reports a refused connection to 127.0.0.1
    line = one_line_error(zhin("trace", "x", "--db", f"{scheme}://bot:ss@{SECRET}@127.0.0.1:{port}/zhin", cwd=tmp_path))
    assert SECRET not in line and "ss@" not in line
    assert f"{scheme}://***@127.0.0.1:{port}/zhin" in line
    assert "resolve" not in line and "Name or service not known" not in line  # no DNS lookup of the password


def test_cli_password_query_parameter_is_not_printed(tmp_path: Path) -> None:
    port = free_port()
    line = one_line_error(zhin("sessions", "--db", f"postgresql://bot@127.0.0.1:{port}/zhin?password={SECRET}", cwd=tmp_path))
    assert SECRET not in line and "password=***" in line


@pytest.mark.parametrize("value", ["postgresql://[::1:1/db", f"postgresql://bot:{SECRET}@[::1:1/db"])
def test_cli_malformed_db_url_is_one_line_usage_error(tmp_path: Path, value: str) -> None:
    result = zhin("trace", "x", "--db", value, cwd=tmp_path)
    line = one_line_error(result)
    assert result.returncode == EXIT_USAGE and SECRET not in line


def test_cli_unknown_scheme_masks_credentials(tmp_path: Path) -> None:
    result = zhin("trace", "x", "--db", f"oracle://bot:ss@{SECRET}@h/db?password={SECRET2}", cwd=tmp_path)
    line = one_line_error(result)
    assert result.returncode == EXIT_USAGE and SECRET not in line and SECRET2 not in line and "unknown database URL scheme" in line


# --- eval --live: the base URL, the response cache ----------------------------------------------------------


@pytest.fixture
def live_server() -> Iterator[str]:
    from zhin_cli.tools.serve.server import running_server

    with running_server("openai") as (base_url, _server):
        yield base_url


def eval_env(tmp_path: Path, base_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in clean_env().items() if k not in ("OPENAI_API_KEY", "GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")}
    return {**env, "OPENAI_BASE_URL": base_url, "XDG_CACHE_HOME": str(tmp_path / "xdg"), **extra}


def with_credentials(base_url: str, password: str = SECRET) -> str:
    return base_url.replace("http://", f"http://bot:ss@{password}@", 1)


def files_text(folder: Path) -> str:
    return "".join(p.name + p.read_text(encoding="utf-8", errors="replace") for p in folder.rglob("*") if p.is_file())


def test_the_live_cache_defaults_to_the_user_cache_directory(live_server: str, tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    result = zhin("eval", "--live", SMOKE, "--json", cwd=checkout, env=eval_env(tmp_path, live_server))
    assert result.returncode == 0, result.stderr
    assert len(list((tmp_path / "xdg" / "zhin" / "eval-cache").rglob("*.json"))) == 2
    assert not (checkout / ".zhin").exists()  # nothing in the checkout
    report = json.loads(result.stdout)["live_answers"]
    assert report == {"total": 2, "from_cache": 0, "cache_dir": str(tmp_path / "xdg" / "zhin" / "eval-cache")}


def test_eval_live_does_not_trust_a_cache_planted_in_the_checkout(tmp_path: Path) -> None:
    """The finding: with the model server stopped and a cache edited, every live check passed."""
    from zhin_cli.tools.serve.server import running_server

    checkout = tmp_path / "checkout"
    checkout.mkdir()
    with running_server("openai") as (base_url, _server):
        primed = zhin("eval", "--live", SMOKE, cwd=checkout, env=eval_env(tmp_path, base_url, ZHIN_EVAL_CACHE_DIR=str(tmp_path / "primed")))
        assert primed.returncode == 0, primed.stderr
    # the server is stopped now: the same URL answers nothing
    planted = checkout / ".zhin" / "eval-cache"  # where the cache used to be: what a pull request can ship
    shutil.copytree(tmp_path / "primed", planted)
    for path in planted.rglob("*.json"):
        entry = json.loads(path.read_text(encoding="utf-8"))
        entry["reply"]["text"] = "forged by the checkout"
        path.write_text(json.dumps(entry), encoding="utf-8")
    env = eval_env(tmp_path, base_url, XDG_CACHE_HOME=str(tmp_path / "fresh-xdg"))
    result = zhin("eval", "--live", SMOKE, "--json", cwd=checkout, env=env)
    assert result.returncode == EXIT_CANNOT_RUN, result.stdout + result.stderr
    assert "forged" not in result.stdout and "cannot connect" in result.stdout
    # control: naming that cache explicitly uses it, and the report says every answer came from it
    explicit = zhin("eval", "--live", SMOKE, "--json", "--cache-dir", planted, cwd=checkout, env=env)
    assert explicit.returncode == 0, explicit.stdout + explicit.stderr
    assert json.loads(explicit.stdout)["live_answers"] == {"total": 2, "from_cache": 2, "cache_dir": str(planted)}
    text = zhin("eval", "--live", SMOKE, cwd=checkout, env={**env, "ZHIN_EVAL_CACHE_DIR": str(planted)})
    assert text.returncode == 0 and "2 of 2 live answers from cache" in " ".join(text.stdout.split())


def test_eval_reports_answers_from_the_cache_only_when_they_were(live_server: str, tmp_path: Path) -> None:
    env = eval_env(tmp_path, live_server)
    first = zhin("eval", "--live", SMOKE, cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr
    assert "0 of 2 live answers from cache" in " ".join(first.stdout.split())
    offline = zhin("eval", SMOKE, "--json", cwd=tmp_path, env=env)
    assert "live_answers" not in json.loads(offline.stdout)  # offline: nothing was asked


@pytest.mark.parametrize("url", ["http://[::1:1/v1", "http://bot:pw@[::1:1/v1", "[::1:1", "http://127.0.0.1:x/v1"])
def test_a_malformed_base_url_is_one_line_usage_error(tmp_path: Path, url: str) -> None:
    result = zhin("eval", "--live", SMOKE, cwd=tmp_path, env=eval_env(tmp_path, url))
    line = one_line_error(result)
    assert result.returncode == EXIT_USAGE, line
    assert "pw" not in line


def test_the_cache_key_does_not_depend_on_credentials(live_server: str, tmp_path: Path) -> None:
    from zhin_cli.tools.eval.live import LiveModel, LiveModelError

    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    first = LiveModel(base_url=with_credentials(live_server, SECRET), cache_dir=tmp_path / "c").complete(body)
    again = LiveModel(base_url=with_credentials(live_server, SECRET2), cache_dir=tmp_path / "c").complete(body)
    assert (first.cached, again.cached) == (False, True)
    assert SECRET not in files_text(tmp_path / "c") and "bot" not in files_text(tmp_path / "c")
    assert len(list((tmp_path / "c").rglob("*.json"))) == 1
    # control: another server is another entry
    other = LiveModel(base_url=with_credentials(live_server.replace("/v1", "/v2")), cache_dir=tmp_path / "c")
    with pytest.raises(LiveModelError):  # zhin serve has no /v2: the request is really sent, not answered from the cache
        other.complete(body)


def test_no_output_of_an_eval_run_holds_a_secret_of_the_base_url(live_server: str, tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    summary = tmp_path / "step-summary.md"
    outputs: list[str] = []

    def run(base_url: str, *args: object) -> subprocess.CompletedProcess[str]:
        env = eval_env(tmp_path, base_url, GITHUB_ACTIONS="true", GITHUB_STEP_SUMMARY=str(summary))
        result = zhin("eval", "--live", SMOKE, *args, cwd=checkout, env=env)
        outputs.extend([result.stdout, result.stderr])
        return result

    good = with_credentials(live_server)
    assert run(good, "--json", "--junit", tmp_path / "ok.xml").returncode == 0
    assert run(good).returncode == 0  # answered from the cache
    dead = with_credentials(f"http://127.0.0.1:{free_port()}/v1?api_key={SECRET2}&token={SECRET2}")
    for args in (["--json", "--junit", tmp_path / "dead.xml"], ["--no-cache"]):
        failed = run(dead, *args)
        assert failed.returncode == EXIT_CANNOT_RUN, failed.stderr
    everything = "\n".join(outputs) + files_text(tmp_path / "xdg") + files_text(checkout) + summary.read_text(encoding="utf-8")
    everything += (tmp_path / "ok.xml").read_text(encoding="utf-8") + (tmp_path / "dead.xml").read_text(encoding="utf-8")
    assert SECRET not in everything and SECRET2 not in everything and "ss@" not in everything
    # controls: the run really reported the unreachable server by its (masked) URL and wrote cache files
    assert "cannot connect" in everything and "http://***@127.0.0.1:" in everything and "api_key=***" in everything
    assert len(list((tmp_path / "xdg").rglob("*.json"))) == 2


def test_every_cli_error_line_is_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    # Any message that reaches the user goes through one exit: a URL with credentials in a library's own words is masked.
    from zhin_cli._cli import report_error

    report_error("driver said: cannot reach postgresql://bot:hunter2@db.example/zhin")
    err = capsys.readouterr().err
    assert "hunter2" not in err and "postgresql://***@db.example/zhin" in err
    # Negative control: an ordinary message is printed as it is.
    report_error("zhin.yaml:3: unknown key 'windows'")
    assert capsys.readouterr().err == "zhin: error: zhin.yaml:3: unknown key 'windows'\n"


def test_punctuation_after_a_url_in_a_sentence_is_kept() -> None:
    from zhin_cli.core.redact import redact_text

    said = redact_text("cannot read postgresql://h/db?user=u&password=hunter2: connection refused.")
    assert said == "cannot read postgresql://h/db?user=u&password=***: connection refused."
    # Negative control: the secret is still masked when nothing follows it.
    assert redact_text("postgresql://h/db?password=hunter2") == "postgresql://h/db?password=***"
