"""The machine a benchmark ran on, in one line (`make bench` prints it first): figures are comparable
within one run; absolute numbers depend on this."""

from __future__ import annotations

import os
import platform
import sys
from datetime import UTC, datetime


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def describe() -> str:
    cpus = os.cpu_count() or 0
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cpus
    return (f"{platform.platform()} · Python {sys.version.split()[0]} · {cpu_model()} · {cpus} CPUs ({usable} usable) · "
            f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC")


if __name__ == "__main__":
    print(f"machine: {describe()}")
