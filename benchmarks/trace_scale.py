"""Does a last-turn request cost its window or its session? (`make bench`; issue 16 item 3)

Sessions of 10k, 20k and 100k messages (tiles of the busy group fixture) are written as JSONL and imported into
SQLite. For each, in a fresh process each:

* **store** — what the data source costs a request: open the session, build the window index and the aliases,
  and read the last turn's window (80 messages) — the part of a request that depends on the session's length;
* **trace** — the end-to-end last-turn ``zhin trace --json`` (which, until the request is O(window), still
  replays every turn before it: shown for the record, run only with ``--trace``).

Each is measured for ``before`` (an export of an older commit on ``PYTHONPATH``: ``--before /tmp/old271``) and
``after`` (this checkout) in one run, so the figures compare under the same load; the report gives seconds and
peak RSS (VmHWM), the whole process's CPU seconds (start and imports included: on a shared machine, the estimate
of an idle one) and the ratios 20k/10k and 100k/10k. ``--also start=/tmp/startG`` adds another tree to the run.
Ratios, not absolute times, are what a run proves.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay import tiled  # noqa: E402

from zhin_cli.store.db import import_session  # noqa: E402
from zhin_cli.store.jsonl import read_session, write_session  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SIZES = (10_000, 20_000, 100_000)

# The store part of one last-turn request, as any version of zhin exposes it (load_session, SessionIndex, Aliases).
STORE_PROBE = """
import json, sys, time
ref, db = sys.argv[1], (sys.argv[2] or None)
from zhin_cli.store import load_session
from zhin_cli.pipeline.window import SessionIndex
from zhin_cli.pipeline.headers import Aliases
started = time.perf_counter()
session = load_session(ref, db=db)
index = SessionIndex.of(session)
aliases = Aliases.of(session)
outline = getattr(session, "outline", None)
if outline is not None:
    last = outline.assistant_positions[-1]
else:
    last = max(i for i, m in enumerate(session.messages) if m.role == "assistant")
window = session.messages[max(0, last - 80):last]
chars = sum(len(getattr(m, "text", "")) for m in window)
seconds = time.perf_counter() - started
peak = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:'))
import resource
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"seconds": seconds, "peak_kib": peak, "messages": len(session.messages), "chars": chars,
                  "process_cpu": usage.ru_utime + usage.ru_stime}))
"""

TRACE_PROBE = """
import json, sys, time, io, contextlib
from zhin_cli._cli import main
sys.argv = ['zhin', 'trace'] + sys.argv[1:] + ['--json']
started = time.perf_counter()
out = io.StringIO()
try:
    with contextlib.redirect_stdout(out):
        main()
except SystemExit as exit:
    code = exit.code
else:
    code = 0
seconds = time.perf_counter() - started
peak = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:'))
import resource
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"seconds": seconds, "peak_kib": peak, "exit": code, "process_cpu": usage.ru_utime + usage.ru_stime}))
"""


def probe(code: str, args: list[str], pythonpath: str | None, cwd: Path) -> dict[str, float]:
    """Run ``code`` in a fresh interpreter on the tree at ``pythonpath`` (None: this checkout). ``cwd`` is outside
    both trees: ``python -c`` puts the working folder first on sys.path, ahead of PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = pythonpath or str(ROOT)
    env["ZHIN_MAX_MESSAGES"] = "1000000"
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=cwd)
    if result.returncode != 0:
        raise SystemExit(f"probe failed ({pythonpath or 'after'}): {result.stderr.strip()[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def build(folder: Path, size: int) -> tuple[Path, Path, str]:
    base = read_session(ROOT / "fixtures" / "group-busy.jsonl")
    copies = max(1, round(size / len(base.messages)))
    session = tiled(base, copies)
    jsonl = folder / f"s{size}.jsonl"
    with jsonl.open("w", encoding="utf-8") as out:
        write_session(session, out)
    db = folder / f"s{size}.sqlite"
    import_session(session, db)
    return jsonl, db, session.session_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="/tmp/old271", help="an exported older tree (empty: skip 'before')")
    parser.add_argument("--also", action="append", default=[], metavar="NAME=TREE",
                        help="another exported tree measured in the same run under NAME (e.g. start=/tmp/startG)")
    parser.add_argument("--trace", action="store_true", help="also time the end-to-end last-turn trace")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (the fastest is reported)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    options = parser.parse_args()
    sizes = [int(s) for s in options.sizes.split(",")]
    versions = {"after": None}
    if options.before and Path(options.before, "zhin_cli").is_dir():
        versions = {"before": options.before, "after": None}
    for named in options.also:
        name, _, tree = named.partition("=")
        if not Path(tree, "zhin_cli").is_dir():
            parser.error(f"--also {named}: no zhin_cli in {tree!r}")
        versions = {**{k: v for k, v in versions.items() if k != "after"}, name: tree, "after": None}
    results: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        built = {size: build(folder, size) for size in sizes}
        # Every figure is the fastest of ``repeat`` runs, the runs interleaved (sizes, sources and versions in turn)
        # so that a burst of load from elsewhere on the machine does not land on one figure only.
        runs: dict[tuple[str, str, str, int], list[dict[str, float]]] = {}
        for round_number in range(options.repeat):
            for size, (jsonl, db, session_id) in built.items():
                for source, args in (("jsonl", [str(jsonl), ""]), ("sqlite", [session_id, str(db)])):
                    for version, path in versions.items():
                        runs.setdefault(("store", source, version, size), []).append(
                            probe(STORE_PROBE, args, path, folder))
                        # the old full replay at 100k takes minutes: its trace is run once
                        if options.trace and (round_number == 0 or version != "before" or size < max(sizes)):
                            trace_args = [str(jsonl)] if source == "jsonl" else [session_id, "--db", str(db)]
                            runs.setdefault(("trace", source, version, size), []).append(
                                probe(TRACE_PROBE, trace_args, path, folder))
        for (part, source, version, size), measured in runs.items():
            best = min(measured, key=lambda r: r["seconds"])
            results.append({"part": part, "source": source, "version": version, "messages": size,
                            "seconds": round(best["seconds"], 3), "runs": len(measured),
                            # the whole process (start, imports, work) in CPU seconds: on a shared machine the
                            # figure that estimates an idle one; the least of the runs
                            "process_cpu": round(min(float(r["process_cpu"]) for r in measured), 3),
                            "peak_rss_mib": round(max(r["peak_kib"] for r in measured) / 1024, 1)})
    print(f"{'part':<6} {'source':<7} {'version':<8} {'messages':>8} {'seconds':>8} {'process CPU s':>13}"
          f" {'peak RSS MiB':>12}")
    for row in results:
        print(f"{row['part']:<6} {row['source']:<7} {row['version']:<8} {row['messages']:>8} {row['seconds']:>8}"
              f" {row['process_cpu']:>13} {row['peak_rss_mib']:>12}")
    ratios: dict[str, float] = {}
    for part in ("store", "trace"):
        for source in ("jsonl", "sqlite"):
            for version in versions:
                by_size = {r["messages"]: r for r in results
                           if r["part"] == part and r["source"] == source and r["version"] == version}
                if sizes[0] not in by_size:
                    continue
                small = by_size[sizes[0]]
                for size in sizes[1:]:
                    if size in by_size:
                        name = f"{part} {source} {version} {size // 1000}k/{sizes[0] // 1000}k"
                        ratios[f"{name} time"] = round(float(by_size[size]["seconds"]) / float(small["seconds"]), 2)  # type: ignore[arg-type]
                        ratios[f"{name} rss"] = round(float(by_size[size]["peak_rss_mib"]) / float(small["peak_rss_mib"]), 2)  # type: ignore[arg-type]
    for name, value in ratios.items():
        print(f"{name}: {value:.2f}x")
    if options.json:
        print(json.dumps({"benchmark": "trace_scale", "results": results, "ratios": ratios}))


if __name__ == "__main__":
    main()
