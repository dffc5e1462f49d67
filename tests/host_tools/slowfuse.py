"""A tiny FUSE file system on ``/dev/fuse``, for tests (root only): a stand-in for a slow
network or user-space lower layer.

``python slowfuse.py MOUNTPOINT`` mounts it, prints ``ready`` and serves until killed
(killing it closes ``/dev/fuse``, which aborts the connection: every request waiting on
it fails at once). Its root holds three files:

- ``fast.txt`` (``fast\\n``), answered at once;
- ``slow.txt`` (``slow\\n``), whose reads are never answered (held until the server dies);
- ``bad.txt`` (``bad\\n`` by its size), whose reads fail with ``EIO``;
- ``baddir/``, a directory whose listing fails with ``EIO``.

Only what a lookup, a stat, a directory listing and a read need is implemented; anything
else is answered ``ENOSYS``. Requests are served one at a time; a held one does not stop
the others.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import struct
import sys

_IN_HEADER = struct.Struct("<IIQQIIIHH")  # len opcode unique nodeid uid gid pid extlen pad
_OUT_HEADER = struct.Struct("<IiQ")  # len error unique
_ATTR = struct.Struct("<QQQQQQIIIIIIIIII")  # ino size blocks [amc]time [amc]timensec mode..

LOOKUP, FORGET, GETATTR, STATFS, RELEASE, FLUSH, INIT = 1, 2, 3, 17, 18, 25, 26
OPEN, READ, OPENDIR, READDIR, RELEASEDIR, INTERRUPT, DESTROY, BATCH_FORGET = (
    14, 15, 27, 28, 29, 36, 38, 42)

ROOT = 1
FILES = {b"fast.txt": (2, b"fast\n"), b"slow.txt": (3, b"slow\n"), b"bad.txt": (4, b"bad\n")}
BY_INODE = {ino: (name, data) for name, (ino, data) in FILES.items()}
SLOW, BAD = FILES[b"slow.txt"][0], FILES[b"bad.txt"][0]
BADDIR = 5


def _attr(ino: int) -> bytes:
    if ino in (ROOT, BADDIR):
        mode, size, nlink = stat.S_IFDIR | 0o755, 0, 2
    else:
        mode, size, nlink = stat.S_IFREG | 0o644, len(BY_INODE[ino][1]), 1
    return _ATTR.pack(ino, size, (size + 511) // 512, 0, 0, 0, 0, 0, 0, mode, nlink,
                      0, 0, 0, 4096, 0)


def _dirents(offset: int) -> bytes:
    entries = [(ROOT, b".", 4), (ROOT, b"..", 4)] + [
        (ino, name, 8) for name, (ino, _) in FILES.items()] + [(BADDIR, b"baddir", 4)]
    out = b""
    for index, (ino, name, kind) in enumerate(entries[offset:], offset + 1):
        entry = struct.pack("<QQII", ino, index, len(name), kind) + name
        out += entry + b"\0" * (-len(entry) % 8)
    return out


def _answer(fd: int, unique: int, error: int = 0, payload: bytes = b"") -> None:
    os.write(fd, _OUT_HEADER.pack(_OUT_HEADER.size + len(payload), -error, unique) + payload)


def _serve_one(fd: int, request: bytes) -> None:
    _, opcode, unique, node, *_ = _IN_HEADER.unpack_from(request)
    body = request[_IN_HEADER.size:]
    if opcode in (FORGET, BATCH_FORGET, INTERRUPT):
        return  # no answer expected (an interrupted held read stays held)
    if opcode == INIT:
        minor = struct.unpack_from("<II", body)[1]
        _answer(fd, unique, payload=struct.pack("<IIIIHHIIHHI", 7, min(minor, 31), 0, 0, 16,
                                                12, 128 * 1024, 1, 32, 0, 0) + bytes(28))
    elif opcode == LOOKUP:
        name = body.split(b"\0", 1)[0]
        if node != ROOT or (name not in FILES and name != b"baddir"):
            _answer(fd, unique, errno.ENOENT)
            return
        ino = FILES[name][0] if name in FILES else BADDIR
        _answer(fd, unique, payload=struct.pack("<QQQQII", ino, 0, 1, 1, 0, 0) + _attr(ino))
    elif opcode == GETATTR:
        _answer(fd, unique, payload=struct.pack("<QII", 1, 0, 0) + _attr(node))
    elif opcode in (OPEN, OPENDIR):
        _answer(fd, unique, payload=struct.pack("<QII", 0, 0, 0))
    elif opcode == READ:
        offset, size = struct.unpack_from("<QQI", body)[1:]
        if node == SLOW:
            return  # held: never answered while this server lives
        if node == BAD:
            _answer(fd, unique, errno.EIO)
            return
        _answer(fd, unique, payload=BY_INODE[node][1][offset:offset + size])
    elif opcode == READDIR and node == BADDIR:
        _answer(fd, unique, errno.EIO)
    elif opcode == READDIR:
        offset = struct.unpack_from("<QQI", body)[1]
        _answer(fd, unique, payload=_dirents(offset))
    elif opcode in (RELEASE, RELEASEDIR, FLUSH):
        _answer(fd, unique)
    elif opcode == STATFS:
        _answer(fd, unique, payload=struct.pack("<QQQQQIIII", 0, 0, 0, 0, 0, 4096, 255,
                                                4096, 0) + bytes(24))
    elif opcode == DESTROY:
        _answer(fd, unique)
        sys.exit(0)
    else:
        _answer(fd, unique, errno.ENOSYS)


def main(mountpoint: str) -> None:
    fd = os.open("/dev/fuse", os.O_RDWR)
    libc = ctypes.CDLL(None, use_errno=True)
    options = f"fd={fd},rootmode=40000,user_id=0,group_id=0,allow_other".encode()
    if libc.mount(b"slowfuse", os.fsencode(mountpoint), b"fuse", 0, options) != 0:
        raise OSError(ctypes.get_errno(), "mount of the FUSE file system failed")
    print("ready", flush=True)
    while True:
        try:
            request = os.read(fd, 1024 * 1024 + 4096)
        except OSError as exc:
            if exc.errno == errno.ENODEV:  # unmounted
                return
            if exc.errno in (errno.EINTR, errno.ENOENT):  # an interrupted request is gone
                continue
            raise
        _serve_one(fd, request)


if __name__ == "__main__":
    main(sys.argv[1])
