"""No code runs without trust (issue 14 §5): every path that used to run an untrusted checkout's plugin.

Each plugin here writes a marker file when it is imported, so "refused" means the command stopped with one line
*and* no plugin code ran. The trust store lives in a per-test ``XDG_CONFIG_HOME``; real git, real subprocesses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT, clean_env, default_sigint
from typer.testing import CliRunner

from zhin_cli._cli import app
from zhin_cli.core import trust
from zhin_cli.core.errors import ConfigError
from zhin_cli.pipeline.config import Config, load_config

SESSION = FIXTURES / "private-chat.jsonl"
PRESET = ROOT / "fixtures" / "presets" / "st-default.json"
PLUGIN = """\
import os
from pathlib import Path
with open(os.environ["TRUST_TEST_MARKER"], "a", encoding="utf-8") as _marker:
    _marker.write({name!r} + "\\n")
from zhin_cli.pipeline.segments import TextSegment
def register(generation):
    generation.register(TextSegment({segment!r}, "role_rules", "You like cats.", weight=5))
"""
CASE = """\
cases:
  - id: {id}
    timeline:
{steps}      - user: {{from: "10002", text: hi}}
      - assistant: {{text: hello}}
    assertions:
      - {{type: verdict, accepted: true}}
"""


def write_plugin(path: Path, name: str = "plugin", segment: str = "plugin.cats") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(PLUGIN.format(name=name, segment=segment), encoding="utf-8")
    return path


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


class Env:
    """A user: a trust store of their own, a marker file the test plugins write, a temp folder we can inspect.

    Calls run the real CLI app in this process (fast); ``subprocess`` runs ``python -m zhin_cli`` for real."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tmp = tmp_path
        self.monkeypatch = monkeypatch
        self.marker = tmp_path / "plugin-ran.txt"
        self.tmpdir = tmp_path / "tmp"
        self.tmpdir.mkdir()
        self.env = {**clean_env(), "XDG_CONFIG_HOME": str(tmp_path / "user-config"), "TRUST_TEST_MARKER": str(self.marker),
                    "TMPDIR": str(self.tmpdir), "PYTHONDONTWRITEBYTECODE": "1"}
        for name in [k for k in os.environ if k.startswith("ZHIN_")]:
            monkeypatch.delenv(name)
        for name in ("XDG_CONFIG_HOME", "TRUST_TEST_MARKER", "NO_COLOR"):
            monkeypatch.setenv(name, self.env[name])
        monkeypatch.setattr(tempfile, "tempdir", str(self.tmpdir))
        monkeypatch.setattr(sys, "dont_write_bytecode", True)

    def __call__(self, *args: object, cwd: Path, extra: dict[str, str] | None = None) -> Result:
        self.monkeypatch.chdir(cwd)
        result = CliRunner().invoke(app, [str(a) for a in args], env=extra)
        stderr = result.stderr
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            stderr += "".join(traceback.format_exception(result.exception))
        return Result(result.exit_code, result.stdout, stderr)

    def subprocess(self, *args: object, cwd: Path) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-m", "zhin_cli", *map(str, args)], cwd=cwd, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                preexec_fn=default_sigint)

    def ran(self) -> list[str]:
        """Which plugins ran since the last call (and forget them)."""
        if not self.marker.exists():
            return []
        names = self.marker.read_text(encoding="utf-8").split("\n")
        self.marker.unlink()
        return [n for n in names if n]


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    return Env(tmp_path, monkeypatch)


def assert_refused(result: Result, code: int, *fragments: str) -> None:
    assert result.returncode == code, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("zhin: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def git(*args: str, cwd: Path) -> str:
    env = {"PATH": os.environ["PATH"], "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout


# --- a zhin.yaml found upward: the eight commands of the finding --------------------------------------------


def project(root: Path) -> Path:
    """A stranger's prompt repo: zhin.yaml naming a plugin file, a case folder, a subfolder."""
    write_plugin(root / "plugins" / "cats.py", "cats")
    (root / "zhin.yaml").write_text("provider: openai\nplugins: ['plugins/cats.py:register']\n", encoding="utf-8")
    (root / "cases").mkdir()
    (root / "cases" / "plain.yaml").write_text(CASE.format(id="plain", steps=""), encoding="utf-8")
    (root / "sub" / "deeper").mkdir(parents=True)
    return root / "zhin.yaml"


# (argv, folder to run in relative to the project, exit status when refused, exit statuses when allowed)
COMMANDS: dict[str, tuple[list[object], str, int, tuple[int, ...]]] = {
    "trace": (["trace", SESSION], ".", 3, (0,)),
    "trace --json": (["trace", SESSION, "--json"], ".", 3, (0,)),
    "prefix-diff": (["prefix-diff", SESSION], ".", 2, (0, 1)),
    "eval": (["eval", "cases"], ".", 3, (0,)),
    "report economy": (["report", "economy", SESSION], ".", 3, (0,)),
    "preset probe": (["preset", "probe", PRESET], ".", 3, (0,)),
    "trace from a subfolder": (["trace", SESSION], "sub/deeper", 3, (0,)),
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_found_config_plugins_are_refused_until_trusted_and_again_after_a_change(user: Env, name: str) -> None:
    argv, folder, refused, allowed = COMMANDS[name]
    config = project(user.tmp / "repo")
    git("init", "-q", cwd=config.parent)  # a checkout: the subfolder case finds the config at the repository's top
    cwd = config.parent / folder

    untrusted = user(*argv, cwd=cwd)
    assert_refused(untrusted, refused, f"{config}:2", "plugins/cats.py:register", f"zhin trust {config}", "--allow-plugins")
    assert user.ran() == []

    trusted = user("trust", config, cwd=cwd)
    assert trusted.returncode == 0 and "plugins/cats.py:register" in trusted.stdout, trusted.stderr
    result = user(*argv, cwd=cwd)
    assert result.returncode in allowed, result.stdout + result.stderr
    assert "cats" in user.ran()

    with config.open("a", encoding="utf-8") as handle:  # the file changes (a pull, an edit): trust again
        handle.write("# changed\n")
    changed = user(*argv, cwd=cwd)
    assert_refused(changed, refused, "changed since `zhin trust`", "zhin.yaml differs", f"zhin trust {config}` again")
    assert user.ran() == []


def test_a_zhin_yaml_in_a_parent_folder_that_is_no_repository_is_not_trusted(user: Env) -> None:
    # ~/zhin.yaml (or /tmp/zhin.yaml) with a plugin, and a project below it that has no config of its own
    parent = user.tmp / "downloads"
    config = project(parent)
    work = parent / "someone-elses-project"
    work.mkdir()
    assert_refused(user("trace", SESSION, cwd=work), 3, f"{config}:2", "found upward")
    assert user.ran() == []
    assert user("--allow-plugins", "trace", SESSION, cwd=work).returncode == 0
    assert user.ran() == ["cats"]


def test_a_changed_plugin_file_needs_trust_again(user: Env) -> None:
    config = project(user.tmp / "repo")
    assert user("trust", cwd=config.parent).returncode == 0  # no FILE: the zhin.yaml found upward
    assert user("trace", SESSION, cwd=config.parent).returncode == 0 and user.ran() == ["cats"]
    write_plugin(config.parent / "plugins" / "cats.py", "cats, changed")
    assert_refused(user("trace", SESSION, cwd=config.parent), 3, "changed since `zhin trust`", "cats.py differs")
    assert user.ran() == []


def test_explicit_config_flag_and_environment_are_trust(user: Env) -> None:
    config = project(user.tmp / "repo")
    cwd = config.parent
    for argv, extra in ((["trace", SESSION, "--config", config], None), (["trace", SESSION], {"ZHIN_CONFIG": str(config)}),
                        (["--allow-plugins", "trace", SESSION], None), (["trace", SESSION], {"ZHIN_ALLOW_PLUGINS": "1"})):
        result = user(*argv, cwd=cwd, extra=extra)
        assert result.returncode == 0, (argv, extra, result.stderr)
        assert user.ran() == ["cats"], (argv, extra)
    # negative controls: a false-y environment value, and the ref opt-in, allow nothing here
    assert_refused(user("trace", SESSION, cwd=cwd, extra={"ZHIN_ALLOW_PLUGINS": "0"}), 3, "untrusted")
    assert_refused(user("--allow-ref-plugins", "trace", SESSION, cwd=cwd), 3, "untrusted")
    assert user.ran() == []


def test_the_installed_command_in_a_real_process(user: Env) -> None:
    config = project(user.tmp / "repo")
    refused = user.subprocess("trace", SESSION, cwd=config.parent)
    _, stderr = refused.communicate(timeout=120)
    assert refused.returncode == 3 and stderr.decode().startswith(f"zhin: error: {config}:2: not running the plugins")
    assert user.ran() == []
    assert user("trust", cwd=config.parent).returncode == 0  # the same store (XDG_CONFIG_HOME) as the process's
    allowed = user.subprocess("trace", SESSION, cwd=config.parent)
    _, stderr = allowed.communicate(timeout=120)
    assert allowed.returncode == 0, stderr
    assert user.ran() == ["cats"]


def test_a_config_without_plugins_needs_no_trust(user: Env) -> None:
    (user.tmp / "zhin.yaml").write_text("provider: anthropic\n", encoding="utf-8")
    result = user("trace", SESSION, "--json", cwd=user.tmp)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["requests"][0]["provider"] == "anthropic"
    assert not (user.tmp / "user-config").exists()  # nothing was written to the trust store either


def test_revoke_and_list(user: Env) -> None:
    config = project(user.tmp / "repo")
    cwd = config.parent
    assert "nothing trusted" in user("trust", "--list", cwd=cwd).stdout
    assert user("trust", "zhin.yaml", cwd=cwd).returncode == 0
    assert user("trust", "--list", cwd=cwd).stdout.startswith(f"ok       {config}")
    (config.parent / "plugins" / "cats.py").write_text("# emptied\n", encoding="utf-8")
    assert user("trust", "--list", cwd=cwd).stdout.startswith("changed")
    assert user("trust", "--revoke", "zhin.yaml", cwd=cwd).returncode == 0
    again = user("trust", "--revoke", "zhin.yaml", cwd=cwd)
    assert_refused(again, 2, "not trusted")
    store = json.loads((user.tmp / "user-config" / "zhin" / "trusted.json").read_text(encoding="utf-8"))
    assert store == {"version": 1, "trusted": {}}


def test_trusting_a_broken_config_is_its_one_line_error(user: Env) -> None:
    (user.tmp / "zhin.yaml").write_text("plugins: [1]\n", encoding="utf-8")
    assert_refused(user("trust", cwd=user.tmp), 3, "zhin.yaml:1", "plugins[0] must be a string")
    empty = user.tmp / "empty"
    empty.mkdir()
    (user.tmp / "zhin.yaml").unlink()
    assert_refused(user("trust", cwd=empty), 2, "no zhin.yaml found")
    assert_refused(user("trust", "nope.yaml", cwd=empty), 3, "no such config file")


# --- eval case files --------------------------------------------------------------------------------------


def test_an_eval_case_file_alone_runs_its_plugin_only_when_trusted(user: Env) -> None:
    cases = user.tmp / "cases"
    write_plugin(cases / "plugins" / "step.py", "step", "plugin.step")
    write_plugin(cases / "plugins" / "conf.py", "conf", "plugin.conf")
    step = cases / "step.yaml"
    step.write_text(CASE.format(id="step", steps="      - plugin: {load: plugins/step.py:register}\n"), encoding="utf-8")
    conf = cases / "conf.yaml"
    conf.write_text(CASE.format(id="conf", steps="").replace("    timeline:", "    config: {plugins: [plugins/conf.py:register]}\n"
                                                               "    timeline:"), encoding="utf-8")
    for case, spec in ((step, "plugins/step.py:register"), (conf, "plugins/conf.py:register")):
        assert_refused(user("eval", case, cwd=user.tmp), 3, f"{case}:", spec, "untrusted eval case file", f"zhin trust {case}")
        assert user.ran() == []
    assert user("trust", cases, cwd=user.tmp).returncode == 0  # a folder: each case file in it
    assert user("eval", cases, cwd=user.tmp).returncode == 0
    assert sorted(set(user.ran())) == ["conf", "step"]
    step.write_text(step.read_text(encoding="utf-8") + "# changed\n", encoding="utf-8")
    assert_refused(user("eval", step, cwd=user.tmp), 3, "changed since `zhin trust`", "step.yaml differs")
    assert user.ran() == []
    assert user("--allow-plugins", "eval", cases, cwd=user.tmp).returncode == 0


@pytest.mark.parametrize("where", ["step", "config"])
@pytest.mark.parametrize("path", ["../outside/evil.py", "absolute"])
def test_eval_case_plugins_stay_inside_the_case_folder(user: Env, where: str, path: str) -> None:
    evil = write_plugin(user.tmp / "outside" / "evil.py", "evil")
    spec = f"{evil}:register" if path == "absolute" else f"{path}:register"
    cases = user.tmp / "cases"
    cases.mkdir()
    case = cases / "case.yaml"
    if where == "step":
        case.write_text(CASE.format(id="c", steps=f"      - plugin: {{load: '{spec}'}}\n"), encoding="utf-8")
    else:
        case.write_text(CASE.format(id="c", steps="").replace("    timeline:", f"    config: {{plugins: ['{spec}']}}\n    timeline:"),
                        encoding="utf-8")
    assert user("trust", case, cwd=user.tmp).returncode == 0
    for argv in (["eval", case], ["--allow-plugins", "eval", case]):  # trusted or allowed: still not outside its folder
        assert_refused(user(*argv, cwd=user.tmp), 4, f"{case}:", "must be a relative path inside the folder of")
        assert user.ran() == []
    # negative control: the same plugin inside the folder runs
    write_plugin(cases / "evil.py", "inside")
    case.write_text(case.read_text(encoding="utf-8").replace(spec, "evil.py:register"), encoding="utf-8")
    assert user("--allow-plugins", "eval", case, cwd=user.tmp).returncode == 0 and "inside" in user.ran()


def test_project_eval_cases_keep_their_missing_file_error(user: Env) -> None:
    # a plugin step naming a file that does not exist is the case file's error (exit 4), trusted or not
    case = user.tmp / "case.yaml"
    case.write_text(CASE.format(id="c", steps="      - plugin: {load: missing.py}\n"), encoding="utf-8")
    assert_refused(user("eval", case, cwd=user.tmp), 4, "no such file")


# --- git refs --------------------------------------------------------------------------------------------


def ref_repo(root: Path, plugin: str = "plugins/cats.py:register") -> Path:
    root.mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=root)
    write_plugin(root / "plugins" / "cats.py", "ref-cats")
    (root / "zhin.yaml").write_text(f"plugins: ['{plugin}']\n", encoding="utf-8")
    git("add", "-A", cwd=root)
    git("commit", "-qm", "v1", cwd=root)
    return root


def test_git_ref_plugins_need_their_own_opt_in(user: Env) -> None:
    repo = ref_repo(user.tmp / "repo")
    argv = ["prefix-diff", SESSION, "--base", "main", "--head", "HEAD"]
    assert_refused(user(*argv, cwd=repo), 2, "main:zhin.yaml:1", "git ref 'main' (", "plugins/cats.py:register",
                   "--allow-ref-plugins", "pull request's code")
    # neither --allow-plugins nor trusting the working tree's identical zhin.yaml lets a ref's code run
    assert_refused(user("--allow-plugins", *argv, cwd=repo), 2, "--allow-ref-plugins")
    assert user("trust", cwd=repo).returncode == 0
    assert_refused(user(*argv, cwd=repo), 2, "--allow-ref-plugins")
    evaluated = user("eval", "--base", "main", "--head", "HEAD", cwd=repo)
    (repo / "cases").mkdir()
    (repo / "cases" / "plain.yaml").write_text(CASE.format(id="plain", steps=""), encoding="utf-8")
    evaluated = user("eval", "cases", "--base", "main", "--head", "HEAD", cwd=repo)
    assert_refused(evaluated, 3, "git ref 'main' (", "--allow-ref-plugins")
    assert user.ran() == []
    allowed = user("--allow-ref-plugins", *argv, cwd=repo)
    assert allowed.returncode == 0, allowed.stderr
    assert user.ran() == ["ref-cats", "ref-cats"]
    assert user("eval", "cases", "--base", "main", "--head", "HEAD", cwd=repo,
                extra={"ZHIN_ALLOW_REF_PLUGINS": "1"}).returncode == 0
    assert "ref-cats" in user.ran()
    assert list(user.tmpdir.iterdir()) == []  # every extracted tree was removed


@pytest.mark.parametrize("name", ["HEAD", "main"])
def test_a_file_named_like_the_ref_cannot_stand_in_for_it(user: Env, name: str) -> None:
    """A pull request that adds a plain file `HEAD` (or `main`) with plugins: `--head HEAD` must not read it as a
    config the user named (its plugins would run without --allow-ref-plugins)."""
    repo = user.tmp / "repo"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    (repo / "zhin.yaml").write_text("provider: openai\n", encoding="utf-8")  # the refs themselves run no code
    git("add", "-A", cwd=repo)
    git("commit", "-qm", "v1", cwd=repo)
    write_plugin(repo / "p" / "evil.py", "planted")
    (repo / name).write_text("plugins: ['p/evil.py:register']\n", encoding="utf-8")
    (repo / "cases").mkdir()
    (repo / "cases" / "plain.yaml").write_text(CASE.format(id="plain", steps=""), encoding="utf-8")
    for command in (["prefix-diff", SESSION], ["eval", "cases"]):
        result = user(*command, "--base", "HEAD~0", "--head", name, cwd=repo)
        assert_refused(result, 2, f"{name!r} is both a file and a git ref", f"./{name}")
    assert user.ran() == []  # the planted plugin never ran
    # Negative control: named as a path, it is the user's explicit choice of that file, and its plugin runs.
    assert user("prefix-diff", SESSION, "--base", "HEAD~0", "--head", f"./{name}", cwd=repo).returncode in (0, 1)
    assert "planted" in user.ran()


@pytest.mark.parametrize("path", ["../evil.py", "absolute"])
def test_a_git_ref_plugin_path_cannot_leave_the_extracted_tree(user: Env, path: str) -> None:
    # TMPDIR is user.tmpdir, so the tree is user.tmpdir/zhin-ref-…/ and ../evil.py is a real file next to it
    evil = write_plugin(user.tmpdir / "evil.py", "evil")
    spec = f"{evil}:register" if path == "absolute" else f"{path}:register"
    repo = ref_repo(user.tmp / "repo", spec)
    result = user("--allow-ref-plugins", "prefix-diff", SESSION, "--base", "main", "--head", "main", cwd=repo)
    assert_refused(result, 2, "main:zhin.yaml:1", "must be a relative path inside the tree of git ref 'main'")
    assert user.ran() == []
    assert sorted(p.name for p in user.tmpdir.iterdir()) == ["evil.py"]


def test_a_ref_plugin_path_inside_the_tree_through_dotdot_is_fine(user: Env) -> None:
    # negative control of the test above: a config in docs/ naming ../plugins/cats.py stays inside the tree
    repo = user.tmp / "repo"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    write_plugin(repo / "plugins" / "cats.py", "ref-cats")
    (repo / "docs").mkdir()
    (repo / "docs" / "zhin.yaml").write_text("plugins: ['../plugins/cats.py:register']\n", encoding="utf-8")
    git("add", "-A", cwd=repo)
    git("commit", "-qm", "v1", cwd=repo)
    result = user("--allow-ref-plugins", "prefix-diff", SESSION, "--base", "main", "--head", "main", cwd=repo / "docs")
    assert result.returncode == 0, result.stderr
    assert user.ran() == ["ref-cats", "ref-cats"]


# --- interrupted: no extracted tree is left (issue 14 §4) ------------------------------------------------------


SLOW_PLUGIN = """\
import os, time
open(os.environ["TRUST_TEST_MARKER"], "a").write("started\\n")
time.sleep(60)
def register(generation):
    pass
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_prefix_diff_of_two_refs_leaves_no_extracted_tree(user: Env, signum: int) -> None:
    repo = user.tmp / "repo"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    (repo / "slow.py").write_text(SLOW_PLUGIN, encoding="utf-8")
    (repo / "zhin.yaml").write_text("plugins: ['slow.py:register']\n", encoding="utf-8")
    git("add", "-A", cwd=repo)
    git("commit", "-qm", "v1", cwd=repo)
    process = user.subprocess("--allow-ref-plugins", "prefix-diff", SESSION, "--base", "main", "--head", "HEAD", cwd=repo)
    try:
        deadline = time.monotonic() + 60
        while not user.marker.exists():  # the base's plugin is running: both trees are extracted
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.05)
        assert len([p for p in user.tmpdir.iterdir() if p.name.startswith("zhin-ref-")]) == 2
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode != 0
    assert b"Traceback" not in stderr, stderr
    assert list(user.tmpdir.iterdir()) == []


# --- the library ---------------------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.delenv("ZHIN_ALLOW_PLUGINS", raising=False)
    monkeypatch.delenv("ZHIN_ALLOW_REF_PLUGINS", raising=False)
    return tmp_path / "cfg" / "zhin" / "trusted.json"


def test_the_store_is_in_the_user_config_folder(store: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert trust.store_path() == store
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/path")  # not absolute: ignored, as the XDG spec says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert trust.store_path() == tmp_path / "home" / ".config" / "zhin" / "trusted.json"


def test_a_damaged_store_fails_closed(store: Path, tmp_path: Path) -> None:
    (tmp_path / "zhin.yaml").write_text("plugins: [zhin_cli.pipeline.segments:nothing]\n", encoding="utf-8")
    config = load_config(cwd=tmp_path)
    store.parent.mkdir(parents=True)
    for damage in ("{", "[]", '{"version": 1, "trusted": []}', '{"version": 99, "trusted": {}}'):
        store.write_text(damage, encoding="utf-8")
        with pytest.raises(ConfigError, match="trust store is damaged") as caught:
            config.registry()
        assert caught.value.where == str(store)


def test_module_plugins_of_a_found_config_need_trust_too(store: Path, tmp_path: Path) -> None:
    (tmp_path / "zhin.yaml").write_text("plugins: ['antigravity:register']\n", encoding="utf-8")
    with pytest.raises(trust.UntrustedPlugins, match="antigravity:register"):
        load_config(cwd=tmp_path).registry()
    # negative control: the same config named by a library caller is given, so it is loaded (and fails to find it)
    with pytest.raises(ConfigError, match="no callable 'register'"):
        load_config(tmp_path / "zhin.yaml").registry()


def test_configs_built_in_code_are_trusted_and_found_ones_are_not(store: Path, tmp_path: Path) -> None:
    write_plugin(tmp_path / "p.py")
    (tmp_path / "zhin.yaml").write_text("plugins: [p.py]\n", encoding="utf-8")
    assert load_config(tmp_path / "zhin.yaml").source.kind == "given"
    assert load_config(cwd=tmp_path).source == trust.PluginSource("found", tmp_path / "zhin.yaml")
    assert Config().source.kind == "given"
    assert load_config(search=False).source.kind == "given"


def test_set_allowed_is_what_the_global_flags_set(store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRUST_TEST_MARKER", str(tmp_path / "ran"))
    write_plugin(tmp_path / "p.py")
    (tmp_path / "zhin.yaml").write_text("plugins: [p.py]\n", encoding="utf-8")
    config = load_config(cwd=tmp_path)
    with pytest.raises(trust.UntrustedPlugins):
        config.registry()
    trust.set_allowed(plugins=True)
    try:
        registry, _ = config.registry()
        assert "plugin.cats" in registry
    finally:
        trust.set_allowed()
    with pytest.raises(trust.UntrustedPlugins):
        config.registry()



def test_no_home_and_no_xdg_config_home_is_one_line_not_a_traceback(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from zhin_cli.core import trust
    from zhin_cli.core.errors import ConfigError

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    with pytest.raises(ConfigError, match="set XDG_CONFIG_HOME or HOME"):
        trust.store_path()
    # Negative control: an absolute XDG_CONFIG_HOME needs no home folder.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert trust.store_path() == tmp_path / "zhin" / "trusted.json"
