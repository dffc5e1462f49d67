"""The Landlock rulesets quiesce builds: one for a session's tools and hooks (its mode),
and a stricter one for ripgrep (read only beneath the workspace, whatever the mode).

Each is built once per session, on the spawner thread (opening paths touches the file
system), and duplicated for every spawn.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess

from host.sandbox import landlock
from protocol.sandboxsettings import SandboxSettings

DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom",
           "/dev/tty", "/dev/ptmx", "/dev/pts", "/dev/shm")
"""Written by ordinary programs (``> /dev/null``, terminals, POSIX shared memory)."""


def writable_roots(settings: SandboxSettings, workspace: str, tmpdir: str) -> list[str]:
    """The directories a confined process may write beneath (its mode's)."""
    if settings.mode == "read-only":
        return [tmpdir]
    roots = [workspace, tmpdir]
    if not settings.strict_tmp:
        roots.append("/tmp")
    roots += list(settings.extra_writable or ())
    return roots


def tool_ruleset(settings: SandboxSettings, workspace: str, tmpdir: str, abi: int) -> int:
    """The ruleset of Bash, the image backend and hooks: read everywhere, write beneath the
    writable roots, never make device nodes, no TCP unless the network is on, signals and
    abstract sockets scoped (ABI 6)."""
    ruleset = landlock.create_ruleset(
        landlock.handled_for(abi, network=settings.network == "on"))
    try:
        handled = landlock.FS_BY_ABI[min(abi, 3)]
        landlock.add_path(ruleset, "/", landlock.READ & handled)
        protected = [os.path.realpath(p) for p in settings.protected or ()]
        for root in writable_roots(settings, workspace, tmpdir):
            # /tmp (strict_tmp false) is shared as a whole: granted entry by entry, nothing
            # new could be made in it. What it holds is not protected (docs/sandbox.md).
            _grant(ruleset, root, protected if root != "/tmp" else [],
                   (landlock.READ | landlock.WRITE) & handled)
        for device in DEVICES:
            landlock.add_path(ruleset, device, (landlock.READ | landlock.WRITE) & handled)
    except BaseException:
        os.close(ruleset)
        raise
    return ruleset


def _grant(ruleset: int, root: str, protected: list[str], access: int) -> None:
    """Allow ``access`` beneath ``root``, but for the ``protected`` directories beneath it:
    then each entry of ``root`` is granted apart, but the ones holding a protected
    directory (entered in turn) and symbolic links (whose targets are elsewhere). Landlock
    rules only add: a directory on the way to a protected one gets no rule of its own, so
    nothing new can be made directly in it (what it holds already stays writable)."""
    real = os.path.realpath(root)
    inside = [p for p in protected if p == real or p.startswith(real.rstrip("/") + "/")]
    if not inside:
        landlock.add_path(ruleset, root, access)
        return
    if real in inside:
        return
    try:
        entries = list(os.scandir(real))
    except OSError:
        return
    for entry in entries:
        if not entry.is_symlink():
            _grant(ruleset, entry.path, inside, access)


@functools.cache
def _library_dirs(binary: str) -> tuple[str, ...]:
    """The directories of the libraries ``binary`` loads (from ``ldd``), else the usual
    ones: what ripgrep needs to start besides its own file."""
    ldd = shutil.which("ldd")
    found: set[str] = set()
    if ldd is not None:
        try:
            listing = subprocess.run([ldd, binary], capture_output=True, timeout=10,
                                     check=False, text=True).stdout
        except (OSError, subprocess.SubprocessError):
            listing = ""
        for path in re.findall(r"(/\S+\.so[.\d]*)", listing):
            found.add(os.path.dirname(os.path.realpath(path)))
    if not found:
        found = {"/lib", "/lib64", "/usr/lib", "/usr/lib64"}
    return tuple(sorted(found))


def search_ruleset(workspace: str, binary: str, abi: int) -> int:
    """The ruleset of ripgrep: read files and list directories beneath the workspace only
    (a directory swapped for a symlink while it walks leads nowhere else), read and run
    its own binary and its libraries (by name: no listing), nothing written, no TCP,
    signals and abstract sockets scoped."""
    ruleset = landlock.create_ruleset(landlock.handled_for(abi, network=False))
    try:
        read = landlock.READ_FILE | landlock.READ_DIR
        landlock.add_path(ruleset, workspace, read)
        run = landlock.READ_FILE | landlock.EXECUTE
        landlock.add_path(ruleset, os.path.realpath(binary), run)
        for directory in _library_dirs(binary):
            landlock.add_path(ruleset, directory, run)
        landlock.add_path(ruleset, "/etc/ld.so.cache", landlock.READ_FILE)
    except BaseException:
        os.close(ruleset)
        raise
    return ruleset
