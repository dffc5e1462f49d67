"""GenerateImages and the default Pillow backend: normal run, stop mid-run, failures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio
from PIL import Image

from host.imaging import render
from host.tools import TOOLS
from protocol.tools import GenerateImagesArgs, ImageContent, TextContent, ToolResult
from runtime.proc.proctree import find_marked
from tests.kit.waiters import wait_until

from .conftest import Harness

SLOW_BACKEND = [sys.executable, "-m", "host.imaging.render", "--delay-ms", "400"]


def images(result: ToolResult) -> list[str]:
    return [c.path for c in result.content if isinstance(c, ImageContent)]


def text(result: ToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


async def generate(h: Harness, prompt: str, count: int = 1, size: str = "64x48",
                   **config: object) -> ToolResult:
    with trio.fail_after(15):
        return await TOOLS["GenerateImages"].run(GenerateImagesArgs(prompt, count, size),
                                                 h.ctx(**config))


def test_render_is_deterministic(tmp_path: Path) -> None:
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        assert render.main(["--prompt", "a lighthouse", "--count", "2", "--size", "80x60",
                            "--out", str(tmp_path / run), "--stem", "x"]) == 0
    first, second = (tmp_path / "a" / "x-1.png").read_bytes(), (tmp_path / "b" / "x-1.png")
    assert first == second.read_bytes()
    assert first != (tmp_path / "a" / "x-2.png").read_bytes()
    with Image.open(tmp_path / "a" / "x-1.png") as image:
        assert image.size == (80, 60) and image.format == "PNG"
    assert not list(tmp_path.rglob(".*.tmp"))


async def test_generates_pngs_in_the_output_folder(harness: Harness) -> None:
    result = await generate(harness, "A red fox, in snow!", count=2)
    assert not result.is_error, text(result)
    paths = images(result)
    assert len(paths) == 2 and all(p.startswith("images/a-red-fox-in-snow-") for p in paths)
    assert result.details["written"] == paths and result.details["exitStatus"] == 0
    for path in paths:
        with Image.open(harness.root / path) as image:
            assert image.size == (64, 48)
    assert [t for _, t in harness.outputs] == [f"wrote {p}\n" for p in paths]


async def test_stop_returns_the_images_already_written(harness: Harness) -> None:
    async def stop_after_first() -> None:
        await wait_until(lambda: harness.outputs, 10)
        harness.stop.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stop_after_first)
        result = await generate(harness, "slow", count=5, image_backend=SLOW_BACKEND)
    assert result.code == "ABORTED" and result.body_invoked
    written = result.details["written"]
    assert 1 <= len(written) < 5 and images(result) == written
    assert "Images written before the stop" in text(result)
    assert all((harness.root / p).is_file() for p in written)
    folder = harness.root / "images"
    assert sorted(p.name for p in folder.iterdir()) == sorted(Path(p).name for p in written)
    assert find_marked(*harness.marker) == []


async def test_backend_failures(harness: Harness) -> None:
    failing = [sys.executable, "-c", "import sys; sys.exit('backend broke')"]
    result = await generate(harness, "x", image_backend=failing)
    assert result.code == "TOOL_FAILED" and "backend broke" in text(result)
    missing = await generate(harness, "x", image_backend=["/nonexistent/backend"])
    assert missing.code == "TOOL_FAILED" and "cannot start the image backend" in text(missing)
    liar = [sys.executable, "-c", "print('/etc/passwd'); print('../x.png')"]
    result = await generate(harness, "x", image_backend=liar)
    assert result.code == "TOOL_FAILED" and images(result) == []
    # Beyond the pixel bound: bad input, refused before the backend runs.
    too_big = await generate(harness, "x", size="5000x5000", image_backend=failing)
    assert too_big.code == "INVALID_PARAMS" and "exceeds" in text(too_big)
    with pytest.raises(SystemExit) as refused:  # the renderer checks it too, for other callers
        render.main(["--prompt", "x", "--size", "5000x5000", "--out", str(harness.root)])
    assert refused.value.code == 2


async def test_output_folder_is_confined(harness: Harness) -> None:
    assert (await generate(harness, "x", image_output_dir="../out")).code == \
        "PATH_OUTSIDE_WORKSPACE"
    (harness.root / "pics").symlink_to(harness.root.parent)
    assert (await generate(harness, "x", image_output_dir="pics")).code == \
        "PATH_OUTSIDE_WORKSPACE"
    result = await generate(harness, "x", image_output_dir="art/gen")
    assert images(result)[0].startswith("art/gen/")


async def test_stop_keeps_finished_unreported_files_and_removes_temporaries(
        harness: Harness, tmp_path: Path) -> None:
    script = tmp_path / "backend.py"
    script.write_text(
        "import argparse, os, time\n"
        "p = argparse.ArgumentParser()\n"
        "for a in ('--prompt', '--count', '--size', '--out', '--stem'): p.add_argument(a)\n"
        "a = p.parse_args()\n"
        "open(os.path.join(a.out, a.stem + '-1.png'), 'wb').write(b'png')\n"
        "open(os.path.join(a.out, '.' + a.stem + '-2.png.tmp'), 'wb').write(b'half')\n"
        "print('started', flush=True)\n"  # not a path: rejected, but it is progress
        "time.sleep(30)\n")
    async with trio.open_nursery() as nursery:
        async def stop_soon() -> None:
            await wait_until(lambda: list((harness.root / "images").glob(".*.tmp")), 10)
            harness.stop.set()
        nursery.start_soon(stop_soon)
        result = await generate(harness, "p", count=2,
                                image_backend=[sys.executable, str(script)])
    assert result.code == "ABORTED"
    assert len(images(result)) == 1 and images(result)[0].endswith("-1.png")
    assert [p.name for p in (harness.root / "images").iterdir()] == [
        Path(images(result)[0]).name]
