"""Protocol streams on stdin/stdout, with stray writes to stdout sent to stderr.

The protocol writer gets a private duplicate of fd 1; fd 1 itself is then
pointed at stderr, so a stray ``print`` or a child that inherits stdout cannot
corrupt the wire.
"""

from __future__ import annotations

import os
import sys

import trio


def take_stdio() -> tuple[trio.lowlevel.FdStream, trio.lowlevel.FdStream]:
    in_fd = os.dup(0)
    out_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # children never read the protocol stream
    os.close(devnull)
    return trio.lowlevel.FdStream(in_fd), trio.lowlevel.FdStream(out_fd)
