"""Workspace confinement: ``..``, absolute paths, symlinks, swaps, and a property test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from host.workspace import ToolInputError, Workspace
from protocol.errors import ErrorCode


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "root"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "file.txt").write_text("x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("s")
    (root / "out").symlink_to(outside)
    (root / "out_file").symlink_to(outside / "secret")
    (root / "in").symlink_to(root / "a")
    (root / "up").symlink_to("..")
    (root / "loop").symlink_to("loop")
    (root / "dangling_out").symlink_to(tmp_path / "nowhere")
    return Workspace(root)


def _code(ws: Workspace, path: str, **kw: bool) -> ErrorCode:
    with pytest.raises(ToolInputError) as info:
        ws.resolve(path, **kw)
    return info.value.code


def test_resolves_inside(ws: Workspace) -> None:
    assert ws.resolve("a/file.txt") == ws.root / "a" / "file.txt"
    assert ws.resolve("a/b/../file.txt", must_exist=True) == ws.root / "a" / "file.txt"
    assert ws.resolve(".") == ws.root
    assert ws.resolve("new/file") == ws.root / "new" / "file"
    assert ws.resolve("in/file.txt") == ws.root / "a" / "file.txt"
    assert ws.relative(ws.resolve("in/file.txt")) == "a/file.txt"


@pytest.mark.parametrize("path", ["..", "../x", "a/../../x", "a/b/../../../root/a"])
def test_dotdot_escape_refused(ws: Workspace, path: str) -> None:
    assert _code(ws, path) is ErrorCode.PATH_OUTSIDE_WORKSPACE


def test_absolute_refused_even_inside(ws: Workspace) -> None:
    assert _code(ws, "/etc/passwd") is ErrorCode.PATH_OUTSIDE_WORKSPACE
    assert _code(ws, str(ws.root / "a" / "file.txt")) is ErrorCode.PATH_OUTSIDE_WORKSPACE


@pytest.mark.parametrize("path", ["out", "out/secret", "out_file", "up", "up/outside/secret",
                                  "dangling_out", "in/../out/secret", "loop/../out",
                                  "loop/x/../../out/secret"])
def test_symlink_outside_refused(ws: Workspace, path: str) -> None:
    assert _code(ws, path) is ErrorCode.PATH_OUTSIDE_WORKSPACE


def test_bad_input(ws: Workspace) -> None:
    assert _code(ws, "") is ErrorCode.INVALID_PARAMS
    assert _code(ws, "a\x00b") is ErrorCode.INVALID_PARAMS
    assert _code(ws, "missing", must_exist=True) is ErrorCode.NOT_FOUND
    assert _code(ws, "loop", must_exist=True) is ErrorCode.NOT_FOUND


def test_symlink_swapped_between_resolves(ws: Workspace, tmp_path: Path) -> None:
    link = ws.root / "target"
    link.symlink_to(ws.root / "a")
    # e.g. before a permission wait:
    assert ws.resolve("target/file.txt") == ws.root / "a" / "file.txt"
    link.unlink()
    link.symlink_to(tmp_path / "outside")  # swapped meanwhile
    assert _code(ws, "target/file.txt") is ErrorCode.PATH_OUTSIDE_WORKSPACE


def test_a_component_swapped_during_resolution_is_the_calls_error(
        ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory flipped to a symlink and back while ``realpath`` walks it makes
    ``readlink`` fail EINVAL (it was a symlink at ``lstat``): that is the call's error,
    ``NOT_FOUND`` naming the path, never an internal failure of the tool."""
    import errno

    def swapped(path: str) -> str:
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), path)

    monkeypatch.setattr(os.path, "realpath", swapped)
    with pytest.raises(ToolInputError) as raised:
        ws.resolve("d/file.txt")
    assert raised.value.code == ErrorCode.NOT_FOUND
    assert "'d/file.txt' cannot be resolved: Invalid argument" in str(raised.value)


def test_open_regular_checks_the_descriptor(ws: Workspace, tmp_path: Path) -> None:
    os.mkfifo(ws.root / "fifo")
    with pytest.raises(ToolInputError, match="not a regular file"):
        ws.open_regular(ws.root / "fifo", "fifo")  # non-blocking open: no hang
    with pytest.raises(ToolInputError, match="is a directory"):
        ws.open_regular(ws.root / "a", "a")
    with pytest.raises(ToolInputError, match="symlink"):
        ws.open_regular(ws.root / "out_file", "out_file")  # resolved path became a symlink
    fd = ws.open_regular(ws.root / "a" / "file.txt", "a/file.txt")
    os.close(fd)
    fd = os.open(tmp_path / "outside" / "secret", os.O_RDONLY)
    try:
        with pytest.raises(ToolInputError) as info:
            ws.check_fd(fd, "x")
        assert info.value.code is ErrorCode.PATH_OUTSIDE_WORKSPACE
    finally:
        os.close(fd)


def test_open_parent_does_not_follow_a_swapped_in_symlink(ws: Workspace) -> None:
    resolved = ws.resolve("d/new.txt")
    (ws.root / "d").symlink_to(ws.root / "out")  # swapped in after the resolve
    with pytest.raises(ToolInputError, match="cannot reach"):
        ws.open_parent(resolved, "d/new.txt", create=True)
    fd, name = ws.open_parent(ws.resolve("x/y/z.txt"), "x/y/z.txt", create=True)
    os.close(fd)
    assert name == "z.txt" and (ws.root / "x" / "y").is_dir()


_parts = st.sampled_from(["a", "b", "..", ".", "", "out", "in", "up", "loop", "file.txt",
                          "out_file", "dangling_out", "new"])


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(_parts, min_size=1, max_size=8), must_exist=st.booleans(),
       absolute=st.booleans())
def test_property_resolve_never_escapes(ws: Workspace, parts: list[str], must_exist: bool,
                                        absolute: bool) -> None:
    path = ("/" if absolute else "") + "/".join(parts)
    try:
        resolved = ws.resolve(path, must_exist=must_exist)
    except ToolInputError as exc:
        assert exc.code in (ErrorCode.PATH_OUTSIDE_WORKSPACE, ErrorCode.NOT_FOUND,
                            ErrorCode.INVALID_PARAMS)
        return
    real = os.path.realpath(resolved)
    assert real == str(ws.root) or real.startswith(str(ws.root) + "/"), (path, real)
    assert str(resolved) == str(ws.root) or str(resolved).startswith(str(ws.root) + "/")
