"""Put the Jenkins xunit ``junit-10.xsd`` in ``<venv>/share/zhin/junit-10.xsd`` at install time.

The JUnit XML that ``zhin eval --junit`` writes is tested against this schema (tests/test_gate_output.py). The schema
is third-party (MIT, Gregory Boissinot), so it is not committed: pytest's sdist ships a copy
(``testing/example_scripts/junit-10.xsd``), and this script takes it from there. It asks only the package index
pip uses (``PIP_INDEX_URL``, else PyPI) through its JSON simple API (PEP 691) for the sdist's address and sha256,
downloads that one file, checks both the archive's and the schema's sha256, and extracts the one member. This is
what ``pip download --no-binary :all: pytest`` would fetch, without the minute pip spends building the sdist's
metadata (setuptools_scm in an isolated environment) only to be able to name the file.

    .venv/bin/python scripts/junit_xsd.py                 # from the index (once; later runs see the file and stop)
    .venv/bin/python scripts/junit_xsd.py --sdist pytest-9.2.0.tar.gz   # from an sdist already on disk
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

PYTEST_VERSION = "9.2.0"
MEMBER = "testing/example_scripts/junit-10.xsd"
# The schema as pytest 9.2.0 ships it: a different file (a changed upstream copy, a tampered download) is refused.
XSD_SHA256 = "a1a816f58d1bf95ebabf371994df0b9246dee66ea9572fbec4f9296f1b2c0ff6"
DEFAULT_INDEX = "https://pypi.org/simple"
TIMEOUT = 60


def destination(prefix: str | None = None) -> Path:
    """Where the tests look for the schema: ``<sys.prefix>/share/zhin/junit-10.xsd`` (the venv's share folder)."""
    return Path(prefix or sys.prefix) / "share" / "zhin" / "junit-10.xsd"


def sdist_url(index: str, version: str) -> tuple[str, str]:
    """The address and sha256 of ``pytest-VERSION.tar.gz`` on ``index`` (PEP 691 JSON, one request)."""
    request = urllib.request.Request(index.rstrip("/") + "/pytest/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
        page = json.load(response)
    name = f"pytest-{version}.tar.gz"
    for entry in page.get("files", []):
        if entry.get("filename") == name:
            url = urllib.parse.urljoin(index.rstrip("/") + "/pytest/", entry["url"])
            return url, entry.get("hashes", {}).get("sha256", "")
    raise SystemExit(f"junit_xsd: {index} lists no {name}")


def download(url: str, sha256: str) -> bytes:
    with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
        data: bytes = response.read()
    if sha256 and hashlib.sha256(data).hexdigest() != sha256:
        raise SystemExit(f"junit_xsd: {url}: sha256 differs from the index's")
    return data


def extract(archive: bytes, version: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        member = tar.extractfile(f"pytest-{version}/{MEMBER}")
        if member is None:
            raise SystemExit(f"junit_xsd: the sdist has no {MEMBER}")
        return member.read()


def install(dest: Path, *, sdist: Path | None = None, index: str | None = None, version: str = PYTEST_VERSION) -> Path:
    if dest.is_file() and hashlib.sha256(dest.read_bytes()).hexdigest() == XSD_SHA256:
        return dest
    if sdist is not None:
        archive = sdist.read_bytes()
    else:
        url, sha256 = sdist_url(index or os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX, version)
        archive = download(url, sha256)
    schema = extract(archive, version)
    if hashlib.sha256(schema).hexdigest() != XSD_SHA256:
        raise SystemExit(f"junit_xsd: {MEMBER} of pytest {version} is not the expected junit-10.xsd (sha256 differs)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=dest.parent, delete=False) as handle:  # never a half-written schema
        handle.write(schema)
    os.chmod(handle.name, 0o644)  # a temporary file is private; the schema is for every reader of the venv
    os.replace(handle.name, dest)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sdist", type=Path, help="a pytest sdist (.tar.gz) already on disk")
    parser.add_argument("--index", help=f"the package index (default: $PIP_INDEX_URL, else {DEFAULT_INDEX})")
    parser.add_argument("--dest", type=Path, default=destination(), help="where to write it (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        path = install(args.dest, sdist=args.sdist, index=args.index)
    except OSError as exc:  # network down, index unreachable, unwritable folder: one line, not a traceback
        print(f"junit_xsd: {exc}", file=sys.stderr)
        return 3
    print(f"junit_xsd: {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
