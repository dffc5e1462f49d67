"""The private run directory of a user's daemons: where it is, and whether it is safe.

``$XDG_RUNTIME_DIR/quiesce/`` when ``XDG_RUNTIME_DIR`` names a usable directory
(absolute, a real directory owned by this user, writable), else
``<tempdir>/quiesce-<uid>/``. The daemon and ``quiesce ops`` apply the same rule, so
they agree as long as they share that environment.

The directory must be a real directory (not a symlink) owned by this user with no
group or other permission bits; anything else is refused, never repaired, because
another user could have prepared it.
"""

from __future__ import annotations

import os
import pathlib
import stat
import tempfile

DIR_MODE = 0o700


class UnsafeRunDir(Exception):
    """The run directory exists but could be reached or prepared by another user."""


def run_dir(uid: int | None = None) -> pathlib.Path:
    """Where this user's daemons keep their sockets and pid files (nothing is created)."""
    uid = os.getuid() if uid is None else uid
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and _usable_base(pathlib.Path(xdg), uid):
        return pathlib.Path(xdg) / "quiesce"
    return pathlib.Path(tempfile.gettempdir()) / f"quiesce-{uid}"


def _usable_base(path: pathlib.Path, uid: int) -> bool:
    if not path.is_absolute():
        return False
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == uid
            and os.access(path, os.W_OK | os.X_OK))


def check_private_dir(path: pathlib.Path, uid: int | None = None) -> bool:
    """True if ``path`` is a safe run directory; False if it does not exist.

    Raise :class:`UnsafeRunDir` if it exists but is a symlink or not a directory, is
    owned by another user, or has group or other permission bits.
    """
    uid = os.getuid() if uid is None else uid
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafeRunDir(f"{path} is not a directory (or is a symlink); refusing it")
    if st.st_uid != uid:
        raise UnsafeRunDir(f"{path} is owned by uid {st.st_uid}, not {uid}; refusing it")
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise UnsafeRunDir(f"{path} has mode {stat.S_IMODE(st.st_mode):04o}; it must give "
                           "nothing to group or others (0700); refusing it")
    return True


def ensure_private_dir(path: pathlib.Path, uid: int | None = None) -> pathlib.Path:
    """Create ``path`` with mode 0700, or check an existing one; return it."""
    if not check_private_dir(path, uid):
        try:
            os.mkdir(path, DIR_MODE)  # the umask can only remove bits
        except FileExistsError:
            pass  # created concurrently: checked below like any existing directory
        check_private_dir(path, uid)
    return path
