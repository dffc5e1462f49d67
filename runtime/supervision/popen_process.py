"""A child started with ``subprocess.Popen`` before trio ran, driven like a ``trio.Process``.

``quiesce serve`` spawns its host before its own heavy imports, so that the two processes
import side by side; the first host link adopts the child (``runtime/supervision/link.py``).
This is what the link needs of a process, done as ``trio.Process`` does it on Linux: the
pipes become :class:`trio.lowlevel.FdStream` objects on private duplicates (the Popen's
file objects are closed), exit is awaited on a pidfd (no polling), and the child is
reaped through the Popen, so both agree on ``returncode``.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import subprocess

import trio


def _private_dup(fd: int) -> int:
    """A close-on-exec duplicate above the standard fds: never taken for fd 0 or 1
    (``take_stdio`` duplicates those), even by a runtime started with one closed."""
    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)


class PopenProcess:
    """Adopt ``popen``, which must have pipes on its stdin and stdout and not be reaped.

    Raises ``OSError`` where a pidfd cannot be opened (the caller still owns ``popen``).
    Built before ``trio.run``; used (and closed) inside it.
    """

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        if popen.stdin is None or popen.stdout is None:
            raise ValueError("the process needs pipes on its stdin and stdout")
        # Opened while it is our unreaped child: the pid cannot have been reused.
        self._pidfd: int | None = os.pidfd_open(popen.pid)
        self._popen = popen
        command = popen.args
        if isinstance(command, str | bytes | os.PathLike):
            command = [command]
        self.args: tuple[str, ...] = tuple(os.fsdecode(part) for part in command)
        self.pid: int = popen.pid
        try:
            self.stdin = trio.lowlevel.FdStream(_private_dup(popen.stdin.fileno()))
            self.stdout = trio.lowlevel.FdStream(_private_dup(popen.stdout.fileno()))
        except OSError:
            os.close(self._pidfd)
            raise
        popen.stdin.close()
        popen.stdout.close()
        self._wait_lock = trio.Lock()

    def __repr__(self) -> str:
        return f"<PopenProcess {list(self.args)!r} pid {self.pid}>"

    @property
    def returncode(self) -> int | None:
        """The exit status once the child has exited (it is then reaped), else ``None``."""
        result = self._popen.poll()
        if result is not None:
            self._close_pidfd()
        return result

    async def wait(self) -> int:
        """Wait for the child to exit, reap it and return its exit status."""
        async with self._wait_lock:
            if self.returncode is None:
                assert self._pidfd is not None
                # A concurrent ``returncode`` that saw the exit closes the pidfd under us.
                with contextlib.suppress(trio.ClosedResourceError):
                    await trio.lowlevel.wait_readable(self._pidfd)
                self._popen.wait()  # it has exited: this only reaps
                self._close_pidfd()
        assert self._popen.returncode is not None
        return self._popen.returncode

    def kill(self) -> None:
        """SIGKILL the child (a no-op once it is reaped); :meth:`wait` to see it gone."""
        self._popen.kill()

    async def aclose(self) -> None:
        """Kill, reap, and close the pipes: for a child that is not going to be used."""
        with trio.CancelScope(shield=True):
            self.kill()
            await self.wait()
            await self.stdin.aclose()
            await self.stdout.aclose()

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            fd, self._pidfd = self._pidfd, None
            trio.lowlevel.notify_closing(fd)
            os.close(fd)


def adopt_or_kill(popen: subprocess.Popen[bytes]) -> PopenProcess | None:
    """``popen`` made adoptable; where it cannot be (no pidfd), it is killed and reaped
    at once and ``None`` returned: the daemon then spawns its own host, as before."""
    try:
        return PopenProcess(popen)
    except OSError as exc:
        logging.getLogger(__name__).info("host %d not adoptable (%s): killing it",
                                         popen.pid, exc)
        popen.kill()
        popen.wait()
        return None
