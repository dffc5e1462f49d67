"""The workspace's AGENTS.md: read bounded, confined, and never blocking."""

from __future__ import annotations

import os
import pathlib

import pytest

from runtime.agent.instructions import (
    AGENTS_FILE,
    DEFAULT_SYSTEM_PROMPT,
    WorkspaceInstructions,
    compose,
    read_agents_file,
)


def ws(tmp_path: pathlib.Path) -> str:
    root = tmp_path / "ws"
    root.mkdir()
    return os.path.realpath(root)


def test_missing_adds_nothing(tmp_path: pathlib.Path) -> None:
    root = ws(tmp_path)
    assert read_agents_file(root) == WorkspaceInstructions()
    assert compose("P", read_agents_file(root)) == "P"
    os.symlink("nowhere", os.path.join(root, AGENTS_FILE))  # dangling: as if missing
    assert read_agents_file(root) == WorkspaceInstructions()


def test_its_text_follows_the_prompt(tmp_path: pathlib.Path) -> None:
    root = ws(tmp_path)
    pathlib.Path(root, AGENTS_FILE).write_text("\n  Run `make check` before you finish.\n")
    found = read_agents_file(root)
    assert found == WorkspaceInstructions("Run `make check` before you finish.")
    message = compose(DEFAULT_SYSTEM_PROMPT, found)
    assert message.startswith(DEFAULT_SYSTEM_PROMPT)
    assert message.endswith("\n\nRun `make check` before you finish.")


def test_a_long_file_is_cut_with_a_marker(tmp_path: pathlib.Path) -> None:
    root = ws(tmp_path)
    pathlib.Path(root, AGENTS_FILE).write_text("é" * 100)  # 200 bytes; cut inside a character
    found = read_agents_file(root, max_bytes=51)
    assert found.text.startswith("é" * 25 + "\n\n[AGENTS.md is longer than 51 bytes "
                                 "(200 bytes); the rest was cut]")
    assert not found.problem


@pytest.mark.parametrize("kind", ["not-utf8", "fifo", "directory", "outside", "unreadable"])
def test_unusable_files_leave_a_note(tmp_path: pathlib.Path, kind: str) -> None:
    root = ws(tmp_path)
    path = pathlib.Path(root, AGENTS_FILE)
    if kind == "not-utf8":
        path.write_bytes(b"caf\xe9 au lait")
    elif kind == "fifo":
        os.mkfifo(path)  # no writer: a blocking open would hang
    elif kind == "directory":
        path.mkdir()
    elif kind == "outside":
        secret = tmp_path / "secret.md"
        secret.write_text("not for the model")
        path.symlink_to(secret)
    else:
        if os.geteuid() == 0:
            pytest.skip("root reads any file")
        path.write_text("x")
        path.chmod(0)
    found = read_agents_file(root)
    expected = {"not-utf8": "not UTF-8", "fifo": "not a regular file",
                "directory": "not a regular file", "outside": "outside the workspace",
                "unreadable": "Permission denied"}[kind]
    assert expected in found.problem
    assert found.text.startswith("(AGENTS.md exists at the workspace root but could not be "
                                 "read:") and "not for the model" not in found.text


def test_a_symlink_inside_the_workspace_is_followed(tmp_path: pathlib.Path) -> None:
    root = ws(tmp_path)
    pathlib.Path(root, "CLAUDE.md").write_text("Shared notes.")
    os.symlink("CLAUDE.md", os.path.join(root, AGENTS_FILE))
    assert read_agents_file(root).text == "Shared notes."
