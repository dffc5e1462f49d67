#!/usr/bin/env python3
"""Write docs/protocol.md and docs/protocol.schema.json (JSON Schema) from protocol/'s
types; with --check, fail if either is stale."""

from __future__ import annotations

import argparse
import pathlib
import sys

from protocol.docs import render
from protocol.schema import render_schema

TARGET = pathlib.Path(__file__).resolve().parent.parent / "docs" / "protocol.md"
EXAMPLE = TARGET.with_name("protocol-example.jsonl")  # scripts/capture_protocol_example.py
SCHEMA = TARGET.with_name("protocol.schema.json")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    outputs = {TARGET: render(EXAMPLE.read_text()), SCHEMA: render_schema()}
    if args.check:
        stale = [path for path, text in outputs.items()
                 if not path.exists() or path.read_text() != text]
        for path in stale:
            print(f"{path} is stale: run scripts/gen_protocol_docs.py", file=sys.stderr)
        return 1 if stale else 0
    for path, text in outputs.items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
