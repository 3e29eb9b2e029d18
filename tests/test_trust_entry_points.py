"""Installed plugin packages (``[project.entry-points."zhin"]``, issue 32 Build 2): imported only when a config
that may run plugins names them (``plugins: ["entry:<name>"]``), under the same trust rules as a plugin file.

The package here is a real distribution on ``sys.path`` (a ``.dist-info`` folder ``importlib.metadata`` finds)
whose module appends to a marker file when it is imported: "refused" means one line *and* no import.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import FIXTURES

from zhin_cli.core import trust
from zhin_cli.core.errors import ConfigError
from zhin_cli.core.trust import UntrustedPlugins
from zhin_cli.pipeline.config import load_config
from zhin_cli.pipeline.plugins import installed

SESSION = FIXTURES / "private-chat.jsonl"
MODULE = """\
import os
with open(os.environ["ENTRY_TEST_MARKER"], "a", encoding="utf-8") as _marker:
    _marker.write("imported\\n")
from zhin_cli.api import TextSegment
def register(plugin):
    plugin.register(TextSegment("acme.ep", "role_rules", "From an installed package.", weight=4))
"""


class Site:
    """A folder on sys.path holding one installed distribution, ``acme-zhin``, with the entry point ``acme``."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.marker = root.parent / "imported.txt"
        monkeypatch.setenv("ENTRY_TEST_MARKER", str(self.marker))
        monkeypatch.setenv("XDG_CONFIG_HOME", str(root.parent / "user-config"))
        monkeypatch.delenv("ZHIN_ALLOW_PLUGINS", raising=False)
        module = f"acme_zhin_{abs(hash(root)) % 10**8}"  # unique per test: sys.modules would keep an earlier one
        (root / f"{module}.py").write_text(MODULE, encoding="utf-8")
        self.module = module
        self.install("1.0")
        monkeypatch.syspath_prepend(str(root))
        monkeypatch.setattr(sys, "dont_write_bytecode", True)

    def install(self, version: str) -> None:
        for old in self.root.glob("acme_zhin-*.dist-info"):
            for file in old.iterdir():
                file.unlink()
            old.rmdir()
        info = self.root / f"acme_zhin-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: acme-zhin\nVersion: {version}\n", encoding="utf-8")
        (info / "entry_points.txt").write_text(f"[zhin]\nacme = {self.module}:register\n", encoding="utf-8")

    def imported(self) -> bool:
        ran = self.marker.exists()
        if ran:
            self.marker.unlink()
        sys.modules.pop(self.module, None)
        return ran


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Site:
    root = tmp_path / "site"
    root.mkdir()
    return Site(root, monkeypatch)


def found_config(folder: Path, plugins: str = "['entry:acme']") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "zhin.yaml"
    path.write_text(f"plugins: {plugins}\n", encoding="utf-8")
    return path


def registered(config_path: Path | None, cwd: Path) -> list[str]:
    config = load_config(config_path, cwd=cwd)
    registry, generations = config.registry()
    try:
        return [owner for owner in ("acme.ep",) if owner in registry]
    finally:
        for generation in generations:
            generation.release()


def test_listing_installed_entry_points_imports_nothing(site: Site) -> None:
    listed = [p for p in installed() if p.distribution == "acme-zhin"]
    assert [(p.name, p.value, p.version) for p in listed] == [("acme", f"{site.module}:register", "1.0")]
    assert trust.entry_point_release("entry:acme") == "acme-zhin==1.0"
    assert not site.imported()


def test_a_given_config_naming_an_entry_point_runs_it(site: Site, tmp_path: Path) -> None:
    path = found_config(tmp_path / "repo")
    assert registered(path, tmp_path) == ["acme.ep"]  # --config: naming the file is the decision
    assert site.imported()


def test_a_found_untrusted_config_imports_nothing(site: Site, tmp_path: Path) -> None:
    found_config(tmp_path / "repo")
    with pytest.raises(UntrustedPlugins, match="entry:acme"):
        registered(None, tmp_path / "repo")
    assert not site.imported()  # the negative control: refused before the package was imported


def test_an_installed_package_no_config_names_is_never_imported(site: Site, tmp_path: Path) -> None:
    found_config(tmp_path / "repo", plugins="[]")
    trust.set_allowed(plugins=True)
    try:
        assert registered(None, tmp_path / "repo") == []
    finally:
        trust.set_allowed()
    assert not site.imported()


def test_allow_plugins_lets_a_found_config_run_it(site: Site, tmp_path: Path) -> None:
    found_config(tmp_path / "repo")
    trust.set_allowed(plugins=True)
    try:
        assert registered(None, tmp_path / "repo") == ["acme.ep"]
    finally:
        trust.set_allowed()
    assert site.imported()


def test_zhin_trust_records_the_release_and_an_upgrade_needs_trust_again(site: Site, tmp_path: Path) -> None:
    path = found_config(tmp_path / "repo")
    entry = trust.record(path, ["entry:acme"])
    assert entry["entry_points"] == {"entry:acme": "acme-zhin==1.0"}
    assert registered(None, tmp_path / "repo") == ["acme.ep"]
    assert site.imported()
    site.install("2.0")  # the package was upgraded since it was reviewed
    with pytest.raises(UntrustedPlugins, match=r"acme-zhin==1\.0 → acme-zhin==2\.0"):
        registered(None, tmp_path / "repo")
    assert not site.imported()
    trust.record(path, ["entry:acme"])
    assert registered(None, tmp_path / "repo") == ["acme.ep"]
    assert site.imported()


def test_an_unknown_entry_point_is_one_config_error(site: Site, tmp_path: Path) -> None:
    path = found_config(tmp_path / "repo", plugins="['entry:nope']")
    with pytest.raises(ConfigError) as caught:
        registered(path, tmp_path)
    assert "no installed entry point 'nope' in group 'zhin' (known: " in caught.value.message
    assert "acme" in caught.value.message and caught.value.where == f"{path}:1"
    assert not site.imported()


def test_the_cli_runs_it_from_a_given_config_and_refuses_a_found_one(site: Site, tmp_path: Path, zhin) -> None:  # type: ignore[no-untyped-def]
    path = found_config(tmp_path / "repo")
    given = zhin("trace", SESSION, "--config", path, "--json", cwd=tmp_path)
    assert given.returncode == 0, given.stderr
    assert "acme.ep" in given.stdout and site.imported()
    found = zhin("trace", SESSION, "--json", cwd=tmp_path / "repo")
    assert found.returncode == 3 and found.stderr.startswith("zhin: error: ") and "entry:acme" in found.stderr
    assert len(found.stderr.splitlines()) == 1
    assert not site.imported()
