"""GenerateImages (process): render PNGs from a prompt with an image backend subprocess.

The backend is ``config.image_backend`` or the shipped Pillow renderer
(``python -m host.imaging.render``). It is run as ``BACKEND --prompt P --count N
--size WxH --out DIR --stem STEM`` (at most ``MAX_PIXELS`` pixels, else
``INVALID_PARAMS`` before anything runs) in its own session, in the workspace, and
prints one line per finished file (its path); each reported file that lies in
the output folder (``config.image_output_dir``, confined to the workspace) is
streamed as progress and returned as an ``ImageContent``. A stop kills the
backend's process tree and returns ``ABORTED`` with the images already written
(``details["written"]``), including any finished ``STEM-i.png`` the backend had
no time to report; temporary files it left are removed.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import sys
from pathlib import Path

import msgspec

import host
from host.imaging import MAX_PIXELS
from host.tools.context import ToolContext, confined
from host.tools.output import BoundedOutput, TextSink
from host.tools.process import TreeResult, run_tree
from host.workspace import ToolInputError, Workspace
from protocol.errors import ErrorCode
from protocol.tools import (
    GenerateImagesArgs,
    ImageContent,
    ToolResult,
    aborted_result,
    error_result,
    ok_result,
)

log = logging.getLogger(__name__)

STDERR_CAP = 16 * 1024


def default_backend() -> tuple[list[str], dict[str, str]]:
    """The shipped renderer, and the environment that lets it import ``host``. It runs in
    the workspace (its directory), so ``-P``: the workspace is not put first on its import
    path, where a repository's ``argparse.py`` or ``host/`` would run instead of ours."""
    project = str(Path(host.__file__).resolve().parent.parent)
    paths = [project, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return ([sys.executable, "-P", "-m", "host.imaging.render"],
            {"PYTHONPATH": os.pathsep.join(paths)})


def _stem(prompt: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", prompt.lower()).strip("-")[:32].strip("-")
    return f"{slug or 'image'}-{secrets.token_hex(3)}"


def _output_dir(ws: Workspace, rel: str) -> Path:
    folder = ws.resolve(rel)
    fd, _ = ws.open_parent(folder / ".probe", rel, create=True)  # creates it, confined
    os.close(fd)
    folder = ws.resolve(rel, must_exist=True)  # again, right before the backend runs
    if not folder.is_dir():
        raise ToolInputError(ErrorCode.TOOL_FAILED, f"image output {rel!r} is not a folder")
    return folder


class _Written:
    """Files the backend reported (or left finished), confined to the output folder."""

    def __init__(self, ctx: ToolContext, folder: Path) -> None:
        self._ctx = ctx
        self._folder = str(folder)
        self.paths: list[str] = []
        self.rejected = 0
        self._buffer = b""

    def add(self, reported: str) -> None:
        reported = reported.strip()
        if not reported:
            return
        real = os.path.realpath(os.path.join(self._folder, reported))
        if os.path.dirname(real) != self._folder or not os.path.isfile(real):
            self.rejected += 1
            log.warning("image backend reported %r, not a file in %s", reported, self._folder)
            return
        rel = self._ctx.workspace.relative(real)
        if rel not in self.paths:
            self.paths.append(rel)
            self._ctx.emit_output("stdout", f"wrote {rel}\n")

    def feed(self, data: bytes) -> None:
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            self.add(line.decode("utf-8", "replace"))

    def end(self) -> None:
        if self._buffer:
            self.add(self._buffer.decode("utf-8", "replace"))
            self._buffer = b""

    def settle(self, stem: str, count: int) -> None:
        """After the tree is dead: add finished but unreported files, remove temporaries."""
        for index in range(1, count + 1):
            name = os.path.join(self._folder, f"{stem}-{index}.png")
            if os.path.isfile(name):
                self.add(name)
        for name in os.listdir(self._folder):
            if name.startswith(f".{stem}-") and name.endswith(".tmp"):
                try:
                    os.unlink(os.path.join(self._folder, name))
                except FileNotFoundError:
                    pass


def _with_images(result: ToolResult, written: list[str]) -> ToolResult:
    images = tuple(ImageContent(path=path) for path in written)
    return msgspec.structs.replace(result, content=(*result.content, *images))


def _check_size(size: str) -> None:
    """The wire type checks the ``WxH`` form; the pixel bound is checked before any side
    effect, so an oversized request is bad input, not a backend failure."""
    width, height = (int(side) for side in size.split("x"))
    if width * height > MAX_PIXELS:
        raise ToolInputError(ErrorCode.INVALID_PARAMS,
                             f"size {size} exceeds {MAX_PIXELS} pixels (for example 4096x4096)")


async def run(args: GenerateImagesArgs, ctx: ToolContext) -> ToolResult:
    config = ctx.config
    _check_size(args.size)
    if ctx.stop.is_set():
        return aborted_result(before_dispatch=False, details={"started": False, "written": []})
    folder = _output_dir(ctx.workspace, config.image_output_dir)
    stem = _stem(args.prompt)
    if config.image_backend is None:
        backend, env = default_backend()
    else:
        backend, env = list(config.image_backend), {}
    argv = [*backend, "--prompt", args.prompt, "--count", str(args.count), "--size", args.size,
            "--out", str(folder), "--stem", stem]
    written = _Written(ctx, folder)
    errors = BoundedOutput(STDERR_CAP, None)
    confine, sandbox_env = await confined(ctx)
    try:
        tree = await run_tree(
            argv, cwd=ctx.workspace.root, stop=ctx.stop, limit=config.image_timeout_ms / 1000,
            grace=config.kill_grace, marker=ctx.marker,
            env_extra={**ctx.env_marker, **env, **sandbox_env},
            stdout=written, stderr=TextSink("stderr", errors), cgroup_name=ctx.cgroup_name,
            on_stop=ctx.on_stop, confine=confine)
    except (FileNotFoundError, PermissionError) as exc:
        raise ToolInputError(ErrorCode.TOOL_FAILED,
                             f"cannot start the image backend {backend[0]!r}: {exc.strerror}"
                             ) from None
    written.settle(stem, args.count)
    return _result(args, tree, written, errors, ctx.workspace.relative(folder))


def _result(args: GenerateImagesArgs, tree: TreeResult, written: _Written,
            errors: BoundedOutput, folder: str) -> ToolResult:
    details: dict[str, object] = {**tree.details(), "written": written.paths,
                                  "outputDir": folder, "requested": args.count}
    listing = "\n".join(written.paths)
    if tree.outcome == "stopped":
        text = (f"Images written before the stop ({len(written.paths)} of {args.count}):\n"
                f"{listing}" if written.paths else "No image was written before the stop.")
        return _with_images(aborted_result(before_dispatch=False, details=details,
                                           extra_text=text), written.paths)
    if tree.outcome == "timeout" or tree.returncode != 0:
        code = ErrorCode.TOOL_TIMEOUT if tree.outcome == "timeout" else ErrorCode.TOOL_FAILED
        why = ("the image backend timed out" if tree.outcome == "timeout"
               else f"the image backend failed ({tree.signal or tree.exit_status})")
        stderr = errors.text().strip()
        message = f"{why}: {stderr.splitlines()[-1]}" if stderr else why
        details["stderr"] = errors.tail(4096)
        text = f"Error: {message}" + (f"\nImages written:\n{listing}" if listing else "")
        return _with_images(error_result(code, message, body_invoked=True, details=details,
                                         text=text), written.paths)
    if not written.paths:
        return error_result(ErrorCode.TOOL_FAILED, "the image backend reported no image",
                            body_invoked=True, details=details)
    return ok_result(f"Generated {len(written.paths)} image(s) in {folder}:\n{listing}",
                     details=details,
                     extra=tuple(ImageContent(path=path) for path in written.paths))
