"""Workspace confinement: every path a tool touches is resolved here.

A tool path is relative to the session's workspace root. Absolute paths, ``..``
components that climb above the root, and symlinks whose target lies outside
the root are refused with ``PATH_OUTSIDE_WORKSPACE``. Resolution follows
symlinks (``realpath``), so the returned path contains no symlink at the moment
of the check; tools call ``resolve`` again right before a side effect (after
any permission wait) and, where they open something, verify the opened file
descriptor with ``check_fd`` so a symlink swapped in between cannot redirect
the operation outside the root. ``read_local_small`` needs neither: its file is reached
with ``openat2`` beneath the root, following no symlink (``host.localopen``).

Expected failures raise ``ToolInputError`` with a catalogue code; a tool turns
it into an error result at one boundary.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from pathlib import Path

from host import fsnames
from host.localopen import LOCAL_OPENER
from protocol.errors import ErrorCode

_MAX_RESOLVE_ROUNDS = 8


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
        os_rel = self.os_path(rel_path)
        depth = 0
        for part in os_rel.split("/"):
            if part == "..":
                depth -= 1
                if depth < 0:
                    raise _outside(rel_path)
            elif part not in ("", "."):
                depth += 1
        real = posixpath.join(self._root_str, os_rel)
        for _ in range(_MAX_RESOLVE_ROUNDS):
            # realpath gives up at a symlink loop and returns the rest unresolved, so
            # "loop/../link" would come back as "link" with the link still in it:
            # resolve until nothing changes.
            try:
                resolved = posixpath.normpath(os.path.realpath(real))
            except OSError as exc:  # a component swapped while it was read (EINVAL from
                # readlink of what was a symlink a moment before): the call's error
                raise ToolInputError(ErrorCode.NOT_FOUND, f"{rel_path!r} cannot be "
                                     f"resolved: {exc.strerror}") from None
            if resolved == real:
                break
            real = resolved
        else:
            raise ToolInputError(ErrorCode.NOT_FOUND, f"{rel_path!r} cannot be resolved "
                                 "(symlink loop)")
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

    @staticmethod
    def os_path(rel_path: str) -> str:
        """A tool's path (maybe a shown non-UTF-8 name, ``host.fsnames``) in ``os`` spelling."""
        try:
            return fsnames.to_os(rel_path)
        except UnicodeEncodeError:
            raise ToolInputError(ErrorCode.INVALID_PARAMS,
                                 "path holds a lone surrogate; names that are not UTF-8 "
                                 "are written with \\xHH escapes") from None

    def outside(self, rel_path: str) -> ToolInputError | None:
        """The ``PATH_OUTSIDE_WORKSPACE`` refusal of ``rel_path`` if it leaves the root;
        ``None`` otherwise (any other problem with the path is the tool's to report)."""
        try:
            self.resolve(rel_path)
        except ToolInputError as exc:
            return exc if exc.code is ErrorCode.PATH_OUTSIDE_WORKSPACE else None
        return None

    def resolve_optional(self, rel_path: str | None, *, must_exist: bool = True) -> Path:
        """``resolve``, with ``None`` meaning the root itself."""
        return self.root if rel_path is None else self.resolve(rel_path, must_exist=must_exist)

    def relative(self, real_path: str | os.PathLike[str]) -> str:
        """The workspace-relative spelling of a resolved path (``.`` for the root), shown
        losslessly in UTF-8 (``host.fsnames``)."""
        return fsnames.show_os(self.relative_os(real_path))

    def relative_os(self, real_path: str | os.PathLike[str]) -> str:
        """``relative`` in ``os`` spelling (for ``os`` calls and child processes)."""
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
        if not target.startswith("/"):
            return  # a pipe, socket or anonymous file: not a path to confine
        if not self.contains(target.removesuffix(" (deleted)")):
            raise _outside(shown)

    def open_regular(self, real_path: str | os.PathLike[str], shown: str) -> int:
        """Open a resolved path read-only, refusing anything but a regular file inside the root.

        ``O_NONBLOCK`` keeps a FIFO from blocking the open; ``O_NOFOLLOW``
        refuses a symlink swapped in for the last component; the descriptor
        is then checked against the root. The caller owns the descriptor.
        """
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(real_path, flags)
        except FileNotFoundError:
            raise ToolInputError(ErrorCode.NOT_FOUND, f"{shown!r} does not exist") from None
        except IsADirectoryError:
            raise ToolInputError(ErrorCode.TOOL_FAILED, f"{shown!r} is a directory") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # the resolved path became a symlink meanwhile
                raise ToolInputError(ErrorCode.TOOL_FAILED,
                                     f"{shown!r} changed into a symlink; try again") from None
            raise ToolInputError(ErrorCode.TOOL_FAILED,
                                 f"cannot open {shown!r}: {exc.strerror}") from None
        try:
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode):
                raise ToolInputError(ErrorCode.TOOL_FAILED, f"{shown!r} is a directory")
            if not stat.S_ISREG(mode):
                raise ToolInputError(ErrorCode.TOOL_FAILED, f"{shown!r} is not a regular file")
            self.check_fd(fd, shown)
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def read_local_small(self, rel_path: str, max_size: int) -> tuple[bytes, str] | None:
        """The content and shown path of the regular file ``rel_path`` if it is at most
        ``max_size`` bytes and reached without a symlink, a mount point or ``..`` above the
        root, on the root's own local file system (``host.localopen``: safe to read on the
        event loop); else ``None``, and the caller resolves it as usual."""
        try:
            os_rel = self.os_path(rel_path)
        except ToolInputError:
            return None
        fd = LOCAL_OPENER.open_small(self._root_str, os_rel, max_size)
        if fd is None:
            return None
        try:
            data = os.read(fd, max_size + 1)
        except OSError:
            return None
        finally:
            os.close(fd)
        if len(data) > max_size:
            return None  # it grew since it was opened
        return data, fsnames.show_os(posixpath.normpath(os_rel))

    def open_regular_check(self, real_path: str | os.PathLike[str], shown: str) -> None:
        """Refuse (as ``open_regular``) anything but a regular file inside the root."""
        os.close(self.open_regular(real_path, shown))

    def open_parent(self, real_path: str | os.PathLike[str], shown: str, *,
                    create: bool) -> tuple[int, str]:
        """A directory descriptor for ``real_path``'s parent and the final name.

        The parent is reached from the root one component at a time with
        ``O_NOFOLLOW`` (creating missing directories when ``create``), so no
        symlink swapped in after ``resolve`` can lead the side effect outside
        the root. The caller owns the descriptor.
        """
        rel = os.path.relpath(os.fspath(real_path), self._root_str)
        parts = rel.split("/")
        if rel in (".", "") or parts[0] == "..":
            raise ToolInputError(ErrorCode.INVALID_PARAMS, f"{shown!r} names no file")
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
        fd = os.open(self._root_str, flags)
        try:
            for part in parts[:-1]:
                if create:
                    try:
                        os.mkdir(part, 0o777, dir_fd=fd)
                    except FileExistsError:
                        pass
                try:
                    next_fd = os.open(part, flags | os.O_NOFOLLOW, dir_fd=fd)
                except FileNotFoundError:
                    raise ToolInputError(ErrorCode.NOT_FOUND,
                                         f"the folder of {shown!r} does not exist") from None
                except OSError as exc:  # ELOOP: a symlink swapped in; ENOTDIR: a file
                    raise ToolInputError(ErrorCode.TOOL_FAILED,
                                         f"cannot reach the folder of {shown!r}: "
                                         f"{exc.strerror}") from None
                os.close(fd)
                fd = next_fd
            self.check_fd(fd, shown)
        except BaseException:
            os.close(fd)
            raise
        return fd, parts[-1]
