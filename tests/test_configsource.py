"""``load_config_source``: a config file, or the config (and plugin code) of a git ref. Real git, no mocks."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest

from zhin_cli.core.errors import EXIT_USAGE, ConfigError, UsageError
from zhin_cli.pipeline.config import load_config
from zhin_cli.pipeline.configsource import ConfigSource, load_config_source
from zhin_cli.pipeline.segments import PromptSegment, PromptSegmentRegistry, TextSegment


@pytest.fixture(autouse=True)
def _ref_plugins_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests load a ref's plugin code on purpose: opted in (without it, tests/test_trust.py: refused)."""
    monkeypatch.setenv("ZHIN_ALLOW_REF_PLUGINS", "1")


PLUGIN = """\
from dataclasses import dataclass

from zhin_cli.pipeline.segments import TextSegment

TEXT = {text!r}
ORIGIN = __file__


@dataclass(frozen=True)
class PluginSegment:
    id: str = "plug.live"
    kind: str = "platform"
    weight: float = 1
    retention: str = "preferred"

    def inject(self, input):
        return TEXT  # read at call time: a shared module would show the last load's text


def register(generation):
    generation.register(TextSegment("plug.text", "platform", TEXT))
    generation.register(PluginSegment())
"""

CONFIG = """\
segments:
  add:
    - {{id: house.rules, kind: system, text: "{text}"}}
plugins: [plug.py:register]
"""


@pytest.fixture(autouse=True)
def _isolated_git(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No user or system git config (signing, hooks, default branch) and no inherited GIT_DIR."""
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_CEILING_DIRECTORIES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "no-gitconfig"))
    monkeypatch.setenv("GIT_TERMINAL_PROMPT", "0")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.email=t@example.com", "-c", "user.name=T", "-c", "commit.gpgsign=false", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def write_version(repo: Path, version: str) -> None:
    (repo / "zhin.yaml").write_text(CONFIG.format(text=version), encoding="utf-8")
    (repo / "plug.py").write_text(PLUGIN.format(text=f"plugin {version}"), encoding="utf-8")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """Three commits on main: no zhin.yaml (tag ``bare``), v1 (annotated tag ``v1``), v2 (HEAD)."""
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    git(root, "init", "-q")
    git(root, "symbolic-ref", "HEAD", "refs/heads/main")
    (root / "README").write_text("hello\n", encoding="utf-8")
    (root / "docs" / "notes.txt").write_text("notes\n", encoding="utf-8")
    commit_all(root, "no config yet")
    git(root, "tag", "bare")
    write_version(root, "v1")
    commit_all(root, "v1")
    git(root, "tag", "-a", "v1", "-m", "release v1")
    write_version(root, "v2")
    commit_all(root, "v2")
    return root


def segments(registry: PromptSegmentRegistry) -> dict[str, PromptSegment]:
    return {segment.id: segment for segment in registry.ordered()}


def text_of(segment: PromptSegment) -> str:
    assert isinstance(segment, TextSegment)
    return segment.text


def texts(source: ConfigSource) -> dict[str, str]:
    registry, _ = source.config.registry()
    found = segments(registry)
    return {
        "house.rules": text_of(found["house.rules"]),
        "plug.text": text_of(found["plug.text"]),
        "plug.live": found["plug.live"].inject(None),  # type: ignore[arg-type]
    }


# --- git refs ----------------------------------------------------------------------------------------------


def test_previous_commit_loads_its_config_and_its_plugin_code(repo: Path) -> None:
    with load_config_source("HEAD~1", cwd=repo) as source:
        short = git(repo, "rev-parse", "--short", "HEAD~1")
        assert source.label == f"HEAD~1 ({short})"
        assert source.commit == git(repo, "rev-parse", "HEAD~1")
        assert source.tempdir is not None and source.config.path == source.tempdir / "zhin.yaml"
        assert texts(source) == {"house.rules": "v1", "plug.text": "plugin v1", "plug.live": "plugin v1"}


def test_head_branch_tag_and_hash_resolve(repo: Path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    for ref in ("HEAD", "main", head, head[:10]):
        with load_config_source(ref, cwd=repo) as source:
            assert source.commit == head
            assert texts(source)["house.rules"] == "v2"
    with load_config_source("v1", cwd=repo) as source:  # an annotated tag peels to its commit
        assert source.commit == git(repo, "rev-parse", "HEAD~1")
        assert texts(source)["plug.text"] == "plugin v1"


def test_registries_of_two_refs_differ_exactly_in_the_changed_segments(repo: Path) -> None:
    with load_config_source("HEAD~1", cwd=repo) as base, load_config_source("HEAD", cwd=repo) as head:
        base_registry, _ = base.config.registry()
        head_registry, _ = head.config.registry()
        before, after = segments(base_registry), segments(head_registry)
        assert list(before) == list(after)  # same ids, same order
        changed = {sid for sid in before if before[sid] != after[sid]}
        # the config's segment and the plugin's two (plug.live: equal fields, but each ref's own class)
        assert changed == {"house.rules", "plug.text", "plug.live"}
        assert all(before[sid].kind == after[sid].kind for sid in before)
        assert text_of(after["house.rules"]) == "v2"
        assert text_of(after["plug.text"]) == "plugin v2"


def test_base_and_head_loaded_at_once_do_not_share_plugin_modules(repo: Path) -> None:
    with load_config_source("HEAD~1", cwd=repo) as base, load_config_source("HEAD", cwd=repo) as head:
        assert base.tempdir != head.tempdir
        base_registry, _ = base.config.registry()
        head_registry, _ = head.config.registry()
        base_live, head_live = segments(base_registry)["plug.live"], segments(head_registry)["plug.live"]
        # the base module still holds v1 after the head module was executed
        assert base_live.inject(None) == "plugin v1"  # type: ignore[arg-type]
        assert head_live.inject(None) == "plugin v2"  # type: ignore[arg-type]
        base_module = type(base_live).inject.__globals__
        head_module = type(head_live).inject.__globals__
        assert base_module is not head_module
        assert base.tempdir is not None and head.tempdir is not None
        assert Path(base_module["ORIGIN"]).is_relative_to(base.tempdir)
        assert Path(head_module["ORIGIN"]).is_relative_to(head.tempdir)


def test_temporary_tree_is_removed_by_close_and_by_the_with_block(repo: Path) -> None:
    source = load_config_source("HEAD", cwd=repo)
    assert source.tempdir is not None and (source.tempdir / "plug.py").is_file()
    source.close()
    assert not source.tempdir.exists()
    source.close()  # idempotent
    with load_config_source("HEAD~1", cwd=repo) as other:
        tempdir = other.tempdir
        assert tempdir is not None and tempdir.is_dir()
    assert not tempdir.exists()


def test_ref_without_zhin_yaml_gives_the_default_config(repo: Path, tmp_path: Path) -> None:
    # a zhin.yaml above the repository must not be found: the search stops at the tree's root
    (tmp_path / "zhin.yaml").write_text("provider: openai\n", encoding="utf-8")
    with load_config_source("bare", cwd=repo) as source:
        short = git(repo, "rev-parse", "--short", "bare")
        assert source.label == f"bare ({short}, no zhin.yaml)"
        assert source.config.path is None and source.config.provider is None and source.config.plugins == []
        registry, _ = source.config.registry()
        assert "house.rules" not in registry and "plug.text" not in registry
        tempdir = source.tempdir
    assert tempdir is not None and not tempdir.exists()


def test_subdirectory_cwd_finds_the_config_like_the_working_tree_does(repo: Path) -> None:
    docs = repo / "docs"
    assert load_config(cwd=docs).path == repo / "zhin.yaml"  # the working tree: upward from docs
    with load_config_source("HEAD~1", cwd=docs) as source:
        assert source.tempdir is not None and source.config.path == source.tempdir / "zhin.yaml"
        assert texts(source)["plug.text"] == "plugin v1"
    with load_config_source("HEAD", cwd=docs) as source:
        assert texts(source)["house.rules"] == "v2"


def test_nearest_config_in_the_ref_wins_and_missing_subdirectories_are_fine(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "nested")
    (repo / "docs" / "zhin.yaml").write_text(CONFIG.format(text="docs"), encoding="utf-8")
    (repo / "docs" / "plug.py").write_text(PLUGIN.format(text="plugin docs"), encoding="utf-8")
    commit_all(repo, "docs config")
    with load_config_source("nested", cwd=repo / "docs") as source:
        assert source.tempdir is not None and source.config.path == source.tempdir / "docs" / "zhin.yaml"
        assert texts(source) == {"house.rules": "docs", "plug.text": "plugin docs", "plug.live": "plugin docs"}
    with load_config_source("nested", cwd=repo) as source:
        assert texts(source)["house.rules"] == "v2"
    # docs/deep exists only in the working tree; in the ref the search starts from the nearest ancestor
    (repo / "docs" / "deep").mkdir()
    with load_config_source("main", cwd=repo / "docs" / "deep") as source:
        assert texts(source)["house.rules"] == "v2"
    with load_config_source("nested", cwd=repo / "docs" / "deep") as source:
        assert texts(source)["house.rules"] == "docs"


def test_broken_config_in_a_ref_names_the_ref_not_the_temporary_directory(repo: Path) -> None:
    (repo / "zhin.yaml").write_text("window: [unclosed\n", encoding="utf-8")
    commit_all(repo, "broken")
    with pytest.raises(ConfigError, match=r"^HEAD:zhin.yaml:\d+: invalid YAML") as caught:
        load_config_source("HEAD", cwd=repo)
    assert "zhin-ref-" not in str(caught.value)


def test_extraction_skips_links_that_leave_the_tree(repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secret.py"
    outside.write_text("SECRET = 1\n", encoding="utf-8")
    (repo / "escape.py").symlink_to(outside)
    (repo / "inside.yaml").symlink_to("zhin.yaml")
    commit_all(repo, "links")
    with load_config_source("HEAD", cwd=repo) as source:
        assert source.tempdir is not None
        assert not (source.tempdir / "escape.py").exists() and not (source.tempdir / "escape.py").is_symlink()
        assert (source.tempdir / "inside.yaml").read_text(encoding="utf-8") == CONFIG.format(text="v2")


def test_fallback_extraction_without_tarfile_filters(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(tarfile, "data_filter")  # Python < 3.11.4
    with load_config_source("HEAD~1", cwd=repo) as source:
        assert texts(source)["plug.text"] == "plugin v1"


# --- files ---------------------------------------------------------------------------------------------------


def test_a_file_path_loads_that_file(repo: Path, tmp_path: Path) -> None:
    with load_config_source("zhin.yaml", cwd=repo) as source:
        assert source.label == "zhin.yaml" and source.tempdir is None and source.commit is None
        assert source.config.path == repo / "zhin.yaml"
        assert texts(source)["house.rules"] == "v2"
    with load_config_source("../zhin.yaml", cwd=repo / "docs") as source:
        assert texts(source)["plug.text"] == "plugin v2"
    elsewhere = tmp_path / "other.yaml"
    elsewhere.write_text("provider: openai\n", encoding="utf-8")
    with load_config_source(str(elsewhere), cwd=tmp_path) as source:  # absolute, and outside any repository
        assert source.config.provider == "openai" and source.label == str(elsewhere)


@pytest.mark.parametrize("name", ["main", "HEAD", "v1"])
def test_a_file_named_like_a_ref_is_ambiguous_not_a_stand_in_for_the_ref(repo: Path, name: str) -> None:
    # A checkout's file must not replace a ref: a pull request adding `HEAD` would turn `--head HEAD` into a config
    # the user named (whose plugins run without --allow-ref-plugins). Refused like git's "ambiguous argument".
    (repo / name).write_text("model: from-file\n", encoding="utf-8")
    with pytest.raises(UsageError) as caught:
        load_config_source(name, cwd=repo)
    assert str(caught.value).startswith(f"{name!r} is both a file and a git ref of {repo}: write ./{name} for the file")
    assert caught.value.exit_code == EXIT_USAGE
    # Written as a path, it is the file; a file that is no ref is the file too (negative controls).
    with load_config_source(f"./{name}", cwd=repo) as source:
        assert source.config.model == "from-file" and source.commit is None
    (repo / "other.yaml").write_text("model: other\n", encoding="utf-8")
    with load_config_source("other.yaml", cwd=repo) as source:
        assert source.config.model == "other" and source.commit is None


# --- errors --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["no-such-branch", "HEAD~99", "zz top?", "deadbeef" * 5, "HEAD^{tree}", "missing.yaml"])
def test_unknown_refs_and_random_strings_are_usage_errors(repo: Path, value: str) -> None:
    with pytest.raises(UsageError) as caught:
        load_config_source(value, cwd=repo)
    assert str(caught.value) == f"{value!r} is neither a config file nor a git ref of {repo}"
    assert caught.value.exit_code == EXIT_USAGE


@pytest.mark.parametrize("value", ["-h", "--output=OUT", "--all", "", "HEAD\n--all", "a\0b"])
def test_option_like_and_unprintable_values_never_reach_git(repo: Path, tmp_path: Path, value: str) -> None:
    value = value.replace("OUT", str(tmp_path / "out"))
    with pytest.raises(UsageError, match="is neither a config file nor a git ref") as caught:
        load_config_source(value, cwd=repo)
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_outside_a_repository_a_non_file_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # no repository above tmp_path either
    with pytest.raises(UsageError) as caught:
        load_config_source("main", cwd=plain)
    message = str(caught.value)
    assert message.startswith(f"'main' is neither a config file nor a git ref of {plain} (")
    assert "not a git repository" in message and "\n" not in message


def test_git_missing_is_a_usage_error(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(UsageError, match=r"^'HEAD' is not a config file, and git is not installed"):
        load_config_source("HEAD", cwd=repo)
    with load_config_source("zhin.yaml", cwd=repo) as source:  # files need no git
        assert source.label == "zhin.yaml"


def test_bare_repository_and_git_directory_search_from_the_root(repo: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(bare)], check=True, capture_output=True)
    for cwd in (bare, repo / ".git"):
        with load_config_source("main~1", cwd=cwd) as source:
            assert texts(source) == {"house.rules": "v1", "plug.text": "plugin v1", "plug.live": "plugin v1"}
    with pytest.raises(UsageError, match=rf"^'nope' is neither a config file nor a git ref of {bare}$"):
        load_config_source("nope", cwd=bare)
