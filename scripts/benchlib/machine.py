"""What the figures were measured on: the machine, Python, package versions, the date."""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import sys
from dataclasses import dataclass

PACKAGES = ("trio", "msgspec", "psutil", "jsonrpcserver")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _load() -> str:
    try:
        one, five, _ = os.getloadavg()
    except OSError:
        return "unknown"
    return f"{one:.2f} (1 min), {five:.2f} (5 min)"


@dataclass(frozen=True)
class Machine:
    nproc: int
    cpu_model: str
    kernel: str
    python: str
    packages: dict[str, str]
    date: str
    load_before: str

    @classmethod
    def describe(cls) -> Machine:
        return cls(
            nproc=os.cpu_count() or 0,
            cpu_model=_cpu_model(),
            kernel=f"{platform.system()} {platform.release()}",
            python=f"{platform.python_implementation()} {sys.version.split()[0]}",
            packages={p: _version(p) for p in PACKAGES},
            date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            load_before=_load(),
        )

    @staticmethod
    def load_now() -> str:
        return _load()
