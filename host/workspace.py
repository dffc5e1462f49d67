"""Workspace confinement: every path a tool touches is resolved here.

A tool path is relative to the session's workspace root. Absolute paths, ``..``
components that climb above the root, and symlinks whose target lies outside
the root are refused with ``PATH_OUTSIDE_WORKSPACE``. Resolution follows
symlinks (``realpath``), so the returned path contains no symlink at the moment
of the check; tools call ``resolve`` again right before a side effect (after
any permission wait) and, where they open something, verify the opened file
descriptor with ``check_fd`` so a symlink swapped in between cannot redirect
the operation outside the root.

Expected failures raise ``ToolInputError`` with a catalogue code; a tool turns
it into an error result at one boundary.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

from protocol.errors import ErrorCode


class ToolInputError(Exception):
    """An expected, reportable tool failure: bad input, missing file, confinement."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _outside(path: str) -> ToolInputError:
    return ToolInputError(ErrorCode.PATH_OUTSIDE_WORKSPACE,
                          f"path {path!r} is outside the workspace")


class Workspace:
    """The root a session's tools are confined to."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(os.path.realpath(os.fspath(root)))
        self._root_str = str(self.root)

    def __repr__(self) -> str:
        return f"Workspace({self._root_str!r})"

    def contains(self, real_path: str | os.PathLike[str]) -> bool:
        """Whether an already-resolved absolute path is the root or below it."""
        path = posixpath.normpath(os.fspath(real_path))
        return path == self._root_str or path.startswith(self._root_str.rstrip("/") + "/")

    def resolve(self, rel_path: str, *, must_exist: bool = False) -> Path:
        """The real path of ``rel_path`` inside the root, or ``ToolInputError``.

        ``must_exist`` turns a missing path into ``NOT_FOUND``. A symlink loop
        or another unresolvable component is reported as not found when the
        path must exist; otherwise the lexical result is still confined.
        """
        if not rel_path:
            raise ToolInputError(ErrorCode.INVALID_PARAMS, "path is empty")
        if "\x00" in rel_path:
            raise ToolInputError(ErrorCode.INVALID_PARAMS, "path contains a NUL byte")
        if posixpath.isabs(rel_path):
            raise _outside(rel_path)
        depth = 0
        for part in rel_path.split("/"):
            if part == "..":
                depth -= 1
                if depth < 0:
                    raise _outside(rel_path)
            elif part not in ("", "."):
                depth += 1
        real = posixpath.normpath(os.path.realpath(posixpath.join(self._root_str, rel_path)))
        if not self.contains(real):
            raise _outside(rel_path)
        if must_exist:
            try:
                os.stat(real)
            except FileNotFoundError:
                raise ToolInputError(ErrorCode.NOT_FOUND, f"{rel_path!r} does not exist") from None
            except OSError as exc:
                raise ToolInputError(ErrorCode.NOT_FOUND,
                                     f"{rel_path!r} cannot be resolved: {exc.strerror}") from None
        return Path(real)

    def resolve_optional(self, rel_path: str | None, *, must_exist: bool = True) -> Path:
        """``resolve``, with ``None`` meaning the root itself."""
        return self.root if rel_path is None else self.resolve(rel_path, must_exist=must_exist)

    def relative(self, real_path: str | os.PathLike[str]) -> str:
        """The workspace-relative spelling of a resolved path (``.`` for the root)."""
        return os.path.relpath(os.fspath(real_path), self._root_str)

    def check_fd(self, fd: int, shown: str) -> None:
        """Refuse an open descriptor whose file is not inside the root.

        Linux names an open descriptor's file in ``/proc/self/fd``; this is the
        check that closes the window between ``resolve`` and the open. Where
        ``/proc`` is unavailable the check is skipped (the resolve still ran).
        """
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return
        if target.endswith(" (deleted)") or not target.startswith("/"):
            return  # an unlinked or non-path file: nothing to redirect
        if not self.contains(target):
            raise _outside(shown)
