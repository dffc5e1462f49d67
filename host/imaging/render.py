"""The default image backend: deterministic PNGs rendered offline with Pillow.

    python -m host.imaging.render --prompt P --count N --size WxH --out DIR
                                  [--stem STEM] [--delay-ms MS]

This is a separate program, and its stdout is its protocol with the
GenerateImages tool: one line per finished file, the file's absolute path,
printed only after the file is complete (written to ``.NAME.tmp``, fsynced,
renamed). Diagnostics go to stderr. Image ``i`` is ``STEM-i.png``; its
picture (a gradient, shapes and the prompt text) depends only on the prompt,
the index and the size. ``--delay-ms`` (or ``QUIESCE_IMAGE_DELAY_MS``) sleeps
before each image, so a stop can be tested mid-run. Exit status 2: bad usage.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import re
import sys
import textwrap
import time

from PIL import Image, ImageDraw, ImageFont

from host.imaging import MAX_PIXELS


def _size(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"([1-9][0-9]{0,3})x([1-9][0-9]{0,3})", text)
    if match is None:
        raise argparse.ArgumentTypeError(f"size must be WxH, got {text!r}")
    width, height = int(match[1]), int(match[2])
    if width * height > MAX_PIXELS:
        raise argparse.ArgumentTypeError(f"{text} exceeds {MAX_PIXELS} pixels")
    return width, height


def render(prompt: str, index: int, size: tuple[int, int]) -> Image.Image:
    seed = hashlib.sha256(f"{index}\x00{prompt}".encode()).digest()
    rng = random.Random(seed)

    def color() -> tuple[int, int, int]:
        return (rng.randrange(256), rng.randrange(256), rng.randrange(256))

    width, height = size
    mask = Image.linear_gradient("L").rotate(rng.randrange(360)).resize(size)
    image = Image.composite(Image.new("RGB", size, color()), Image.new("RGB", size, color()), mask)
    draw = ImageDraw.Draw(image, "RGBA")
    for _ in range(rng.randrange(3, 9)):
        x, y = rng.randrange(width), rng.randrange(height)
        r = rng.randrange(max(2, min(size) // 8), max(3, min(size) // 2))
        box = (x - r, y - r, x + r, y + r)
        if rng.random() < 0.5:
            draw.ellipse(box, fill=(*color(), 110))
        else:
            draw.rectangle(box, fill=(*color(), 90))
    font = ImageFont.load_default(size=max(8, min(size) // 16))
    text = "\n".join(textwrap.wrap(prompt, width=max(8, width // max(8, min(size) // 24))))
    if text:
        margin = max(2, min(size) // 32)
        draw.multiline_text((margin + 1, margin + 1), text, font=font, fill=(0, 0, 0, 200))
        draw.multiline_text((margin, margin), text, font=font, fill=(255, 255, 255, 255))
    return image


def write_atomic(image: Image.Image, path: str) -> None:
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}.tmp")
    try:
        with open(tmp, "wb") as out:
            image.save(out, format="PNG")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m host.imaging.render")
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--size", type=_size, default=(256, 256))
    parser.add_argument("--out", required=True)
    parser.add_argument("--stem", default="image")
    parser.add_argument("--delay-ms", type=int,
                        default=int(os.environ.get("QUIESCE_IMAGE_DELAY_MS", "0") or 0))
    args = parser.parse_args(argv)
    if not 1 <= args.count <= 64:
        parser.error("--count must be between 1 and 64")
    if "/" in args.stem or args.stem.startswith("."):
        parser.error("--stem must be a plain file name prefix")
    out = os.path.realpath(args.out)
    if not os.path.isdir(out):
        parser.error(f"--out {args.out!r} is not a directory")
    for index in range(1, args.count + 1):
        if args.delay_ms > 0:
            time.sleep(args.delay_ms / 1000)
        path = os.path.join(out, f"{args.stem}-{index}.png")
        write_atomic(render(args.prompt, index, args.size), path)
        sys.stdout.write(path + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
