#!/usr/bin/env python3
"""Write docs/protocol.md from protocol/'s types; with --check, fail if it is stale."""

from __future__ import annotations

import argparse
import pathlib
import sys

from protocol.docs import render

TARGET = pathlib.Path(__file__).resolve().parent.parent / "docs" / "protocol.md"
EXAMPLE = TARGET.with_name("protocol-example.jsonl")  # scripts/capture_protocol_example.py


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = render(EXAMPLE.read_text())
    if args.check:
        if not TARGET.exists() or TARGET.read_text() != text:
            print(f"{TARGET} is stale: run scripts/gen_protocol_docs.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
