"""The C library this process already links, and its ``prctl``: looked up once, with no
library search (``ctypes.util.find_library`` starts ``ldconfig``, tens of milliseconds at
every start of ``serve`` and of the host) and no import beyond ``ctypes``."""

from __future__ import annotations

import ctypes
import functools
from typing import Any


@functools.cache
def libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


@functools.cache
def prctl() -> Any:
    call = libc().prctl
    call.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                     ctypes.c_ulong]
    call.restype = ctypes.c_int
    return call
