"""The pre-commit hooks (.pre-commit-hooks.yaml), run by pre-commit itself on a scratch repository's staged files.

The manifest says ``language: python``: pre-commit would build a virtualenv and ``pip install`` this repository into
it, which needs the network. The tests run offline, so the consuming config overrides only ``language`` (to
``unsupported``, pre-commit's name for ``system``: the ``zhin`` already on PATH, this checkout's). Everything else —
the manifest's entry, ``files`` pattern, ``pass_filenames``, the stash of unstaged changes, the exit status — is
pre-commit's own, from a byte-identical copy of the manifest cloned the way pre-commit clones any hook repository.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from prompt_repo import CLOCK, RULES

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / ".pre-commit-hooks.yaml"
HOOKS = ("zhin-budget-check", "zhin-prefix-diff", "zhin-eval")
SHORT, LONG = "群规：不要刷屏", "群规：不要刷屏。不要发广告，不要骂人，不要刷屏，不要发链接，不要冒充管理员。"
CASES = """\
version: 1
cases:
  - id: house.rules-are-sent
    providers: [openai]
    timeline:
      - user: {from: "10002", text: "早"}
    assertions:
      - type: regex
        pattern: "群规：不要刷屏"
"""

def environment(tmp_path: Path) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)  # this venv's zhin: what `language: system` finds on PATH
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "HOME": str(tmp_path), "LANG": "C.UTF-8",
            "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_NOSYSTEM": "1"}


def git(root: Path, env: dict[str, str], *args: str) -> str:
    return subprocess.run(["git", "-c", "commit.gpgsign=false", *args], cwd=root, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def hook_repository(tmp_path: Path, env: dict[str, str], manifest: bytes) -> tuple[Path, str]:
    repo = tmp_path / "hooks"
    repo.mkdir()
    (repo / ".pre-commit-hooks.yaml").write_bytes(manifest)
    git(repo, env, "init", "-q")
    git(repo, env, "add", ".")
    git(repo, env, "commit", "-qm", "hooks")
    return repo, git(repo, env, "rev-parse", "HEAD")


def project(tmp_path: Path, env: dict[str, str]) -> Path:
    """A bot's repository, committed: zhin.yaml, a session, its budget and an eval case, and the pre-commit config."""
    hooks, rev = hook_repository(tmp_path, env, MANIFEST.read_bytes())
    root = tmp_path / "bot"
    (root / "sessions").mkdir(parents=True)
    (root / "sessions" / "private-chat.jsonl").write_bytes((ROOT / "fixtures" / "private-chat.jsonl").read_bytes())
    (root / "eval_cases").mkdir()
    (root / "eval_cases" / "house.yaml").write_text(CASES, encoding="utf-8")
    (root / "zhin.yaml").write_text(RULES.format(SHORT), encoding="utf-8")
    (root / "README.md").write_text("a bot\n", encoding="utf-8")
    (root / "prompt-budget.yaml").write_text(
        "version: 1\nsessions:\n- sessions/private-chat.jsonl\nprofiles:\n- provider: openai\n  parts: {}\n")
    overrides = [{"id": hook, "language": "unsupported", **({"args": ["sessions/"]} if hook == "zhin-prefix-diff" else {})}
                 for hook in HOOKS]
    config = {"repos": [{"repo": str(hooks), "rev": rev, "hooks": overrides}]}
    (root / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    git(root, env, "init", "-q")
    update = subprocess.run([sys.executable, "-m", "zhin_cli", "budget", "update"], cwd=root, env=env,
                            capture_output=True, text=True)
    assert update.returncode == 0, update.stderr
    git(root, env, "add", ".")
    git(root, env, "commit", "-qm", "base")
    return root


def pre_commit(root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`pre-commit run`: the hooks on the staged files, as `git commit` runs them."""
    return subprocess.run([sys.executable, "-m", "pre_commit", "run", "--color", "never"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)


def status(output: str, hook_name: str) -> str:
    """A hook's verdict in pre-commit's report: Passed, Failed or Skipped."""
    [line] = [line for line in output.splitlines() if line.startswith(hook_name + ".")]
    return line.rsplit(")", 1)[-1].rsplit(".", 1)[-1].strip()


@pytest.fixture
def bot(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    env = environment(tmp_path)
    return project(tmp_path, env), env


def test_the_manifest_is_valid_and_the_check_can_fail(tmp_path: Path) -> None:
    valid = subprocess.run([sys.executable, "-m", "pre_commit", "validate-manifest", str(MANIFEST)],
                           capture_output=True, text=True)
    assert valid.returncode == 0, valid.stdout + valid.stderr
    hooks = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    assert [hook["id"] for hook in hooks] == list(HOOKS)
    broken = tmp_path / "broken.yaml"  # control: a hook without its entry is refused
    broken.write_text(yaml.safe_dump([{k: v for k, v in hooks[0].items() if k != "entry"}]))
    refused = subprocess.run([sys.executable, "-m", "pre_commit", "validate-manifest", str(broken)],
                             capture_output=True, text=True)
    assert refused.returncode != 0 and "entry" in refused.stdout + refused.stderr


def test_budget_check_fails_a_staged_zhin_yaml_that_grew(bot: tuple[Path, dict[str, str]]) -> None:
    root, env = bot
    (root / "zhin.yaml").write_text(RULES.format(LONG), encoding="utf-8")
    git(root, env, "add", "zhin.yaml")
    result = pre_commit(root, env)
    assert result.returncode == 1
    assert status(result.stdout, "zhin budget check") == "Failed"
    assert "over budget: openai house.rules grew from" in result.stdout


def test_negative_controls_unrelated_and_unstaged_changes_pass(bot: tuple[Path, dict[str, str]]) -> None:
    root, env = bot
    (root / "README.md").write_text("a bot that talks\n", encoding="utf-8")
    git(root, env, "add", "README.md")
    unrelated = pre_commit(root, env)
    assert unrelated.returncode == 0, unrelated.stdout
    assert [status(unrelated.stdout, name) for name in ("zhin budget check", "zhin eval")] == ["Skipped", "Skipped"]
    # the staged zhin.yaml only gains a comment; the over-budget edit is only in the working tree: pre-commit stashes it
    (root / "zhin.yaml").write_text(RULES.format(SHORT) + "# reviewed\n", encoding="utf-8")
    git(root, env, "add", "zhin.yaml")
    (root / "zhin.yaml").write_text(RULES.format(LONG), encoding="utf-8")
    staged_only = pre_commit(root, env)
    assert status(staged_only.stdout, "zhin budget check") == "Passed", staged_only.stdout
    assert (root / "zhin.yaml").read_text(encoding="utf-8") == RULES.format(LONG)  # the unstaged edit is given back


def test_prefix_diff_shows_the_change_and_fails_an_unstable_head(bot: tuple[Path, dict[str, str]]) -> None:
    root, env = bot
    (root / "zhin.yaml").write_text(RULES.format("群规：不准刷屏"), encoding="utf-8")
    git(root, env, "add", "zhin.yaml")
    stable = pre_commit(root, env)
    assert status(stable.stdout, "zhin prefix-diff (last commit → staged zhin.yaml)") == "Passed"
    assert "house.rules  system  changed" in stable.stdout  # verbose: the diff is shown even when it passes
    (root / "clock.py").write_text(CLOCK, encoding="utf-8")  # a segment that changes on every turn breaks the cache
    (root / "zhin.yaml").write_text(RULES.format("群规：不准刷屏") + "plugins: [clock.py:register]\n", encoding="utf-8")
    git(root, env, "add", "zhin.yaml", "clock.py")
    unstable = pre_commit(root, env)
    assert unstable.returncode == 1
    assert status(unstable.stdout, "zhin prefix-diff (last commit → staged zhin.yaml)") == "Failed"
    assert "5 unexpected break(s)" in unstable.stdout and "plugin.clock" in unstable.stdout


def test_eval_runs_on_a_staged_case_and_fails_it(bot: tuple[Path, dict[str, str]]) -> None:
    root, env = bot
    case = root / "eval_cases" / "house.yaml"
    case.write_text(CASES.replace('pattern: "群规：不要刷屏"', 'pattern: "群规：不准刷屏"'), encoding="utf-8")
    git(root, env, "add", "eval_cases/house.yaml")
    failing = pre_commit(root, env)
    assert failing.returncode == 1 and status(failing.stdout, "zhin eval") == "Failed"
    assert status(failing.stdout, "zhin budget check") == "Skipped"  # an eval case is not a budget input
    case.write_text(CASES.replace("早", "早安"), encoding="utf-8")  # control: a case that still holds passes
    git(root, env, "add", "eval_cases/house.yaml")
    passing = pre_commit(root, env)
    assert passing.returncode == 0 and status(passing.stdout, "zhin eval") == "Passed", passing.stdout
