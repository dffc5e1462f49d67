"""Files in the workspace that control later runs (git hooks and configuration, quiesce's
and the editor's settings, direnv, shell start-up files): Landlock cannot make them
read-only without breaking ``git commit``, so a confined call's changes to them are
watched instead and reported (``details.controlFiles`` and a line of the result).

A snapshot is the (mtime, size, inode) of each such file present, taken before and after
the call on a reader thread; at most ``MAX_FILES`` files are looked at (a huge
``.git/hooks`` would not slow a call down without bound).
"""

from __future__ import annotations

import os

WATCHED_FILES = (".git/config", ".envrc", ".bashrc", ".bash_profile", ".profile", ".zshrc",
                 ".zshenv", ".zprofile")
WATCHED_DIRS = (".git/hooks", ".quiesce", ".vscode")
MAX_FILES = 512

Snapshot = dict[str, tuple[int, int, int]]


def snapshot(root: str) -> Snapshot:
    """The watched files under ``root`` as they are now (symlinks not followed)."""
    found: Snapshot = {}

    def note(rel: str) -> None:
        try:
            st = os.lstat(os.path.join(root, rel))
        except OSError:
            return
        found[rel] = (st.st_mtime_ns, st.st_size, st.st_ino)

    for rel in WATCHED_FILES:
        note(rel)
    for rel_dir in WATCHED_DIRS:
        top = os.path.join(root, rel_dir)
        if not os.path.isdir(top) or os.path.islink(top):
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            for name in filenames:
                if len(found) >= MAX_FILES:
                    return found
                note(os.path.relpath(os.path.join(dirpath, name), root))
            dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
    return found


def changed(before: Snapshot, after: Snapshot) -> list[str]:
    """Watched files created, changed or removed between two snapshots, sorted."""
    return sorted(rel for rel in before.keys() | after.keys() if before.get(rel) != after.get(rel))
