#!/usr/bin/env python3
"""Write the generated sections of docs/architecture.md (one module table per package, each
module's concept the first sentence of its docstring; every state table, drawn from the table
itself); with --check, fail if any is stale.

The document is prose written by hand around sections the code owns. A generated section
sits between two marker lines, ``<!-- BEGIN generated: NAME -->`` and
``<!-- END generated: NAME -->``; everything between them is replaced, everything outside
is kept. The docstrings are read with ``ast``, never imported; the state tables are imported
(``scripts/state_tables.py``), as they are data of the code.
"""

from __future__ import annotations

import argparse
import ast
import pathlib
import re
import sys
from collections.abc import Callable, Iterator

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
TARGET = ROOT / "docs" / "architecture.md"
PACKAGES = ("protocol", "runtime", "host")
"""The top level, in the order the tables are drawn: what the others stand on first."""

BEGIN = "<!-- BEGIN generated: {name} -->"
END = "<!-- END generated: {name} -->"

# A sentence ends at a full stop followed by a space and a capital or a code span
# ("``x.y``" does not end one, nor an abbreviation: "e.g. ``x``").
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(])")
_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "cf.")
_RST_LITERAL = re.compile(r"``(.+?)``")
_RST_ROLE = re.compile(r":(?:mod|class|func|meth|attr|data):`([^`]+)`")


class MissingDocstring(Exception):
    """A module without a docstring: every module says what it is."""


def first_sentence(docstring: str) -> str:
    """The first sentence of a docstring's first paragraph, on one line, as Markdown."""
    paragraph = " ".join(docstring.strip().split("\n\n", 1)[0].split())
    sentence = paragraph
    for end in _SENTENCE_END.finditer(paragraph):
        if not paragraph[:end.start()].endswith(_ABBREVIATIONS):
            sentence = paragraph[:end.start()]
            break
    sentence = _RST_ROLE.sub(r"`\1`", sentence)
    sentence = _RST_LITERAL.sub(r"`\1`", sentence)
    return sentence.replace("|", "\\|")


def docstring_of(path: pathlib.Path) -> str:
    docstring = ast.get_docstring(ast.parse(path.read_text(), filename=str(path)))
    if not docstring:
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        raise MissingDocstring(f"{shown} has no docstring: say what the module is")
    return docstring


def packages(root: pathlib.Path = ROOT) -> Iterator[pathlib.Path]:
    """Every package directory (one with an ``__init__.py``), parents before children."""
    for top in PACKAGES:
        for init in sorted((root / top).rglob("__init__.py"),
                           key=lambda p: p.parent.relative_to(root).parts):
            yield init.parent


def module_table(package: pathlib.Path) -> str:
    """One package's section: its own docstring's first sentence, then a row per module and
    per subpackage."""
    name = package.relative_to(ROOT).as_posix()
    lines = [f"### `{name}/`", "", first_sentence(docstring_of(package / "__init__.py"))]
    entries = sorted(
        [p for p in package.glob("*.py") if p.name != "__init__.py"]
        + [p for p in package.iterdir() if (p / "__init__.py").is_file()],
        key=lambda p: p.name)
    if entries:  # a package of data files only (the browser client's) has no table
        lines += ["", "| module | concept |", "|---|---|"]
    for entry in entries:
        if entry.is_dir():
            name, docstring = f"{entry.name}/", docstring_of(entry / "__init__.py")
        else:
            name, docstring = entry.name, docstring_of(entry)
        lines.append(f"| `{name}` | {first_sentence(docstring)} |")
    return "\n".join(lines)


def render_module_tables() -> str:
    return "\n\n".join(module_table(package) for package in packages())


def render_state_tables() -> str:
    # scripts/state_tables.py, beside this file (imported by a test, this file's folder is
    # not on the path); it imports the packages, whose tables it draws.
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    from state_tables import render

    return render()


SECTIONS: dict[str, Callable[[], str]] = {"module tables": render_module_tables,
                                          "state tables": render_state_tables}
"""The sections this script renders, by marker name."""


def fill(document: str, sections: dict[str, Callable[[], str]] = SECTIONS) -> str:
    """The document with every section of ``sections`` rendered anew between its markers."""
    for name, render in sections.items():
        begin, end = BEGIN.format(name=name), END.format(name=name)
        head, found, rest = document.partition(begin + "\n")
        if not found:
            raise ValueError(f"{TARGET.name} has no line {begin!r}")
        _, found, tail = rest.partition(end)
        if not found:
            raise ValueError(f"{TARGET.name} has no line {end!r} after {begin!r}")
        document = f"{head}{begin}\n\n{render()}\n\n{end}{tail}"
    return document


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n", 1)[0])
    parser.add_argument("--check", action="store_true",
                        help="fail if docs/architecture.md is stale, write nothing")
    args = parser.parse_args()
    current = TARGET.read_text()
    try:
        wanted = fill(current)
    except (MissingDocstring, ValueError) as error:
        print(error, file=sys.stderr)
        return 1
    if args.check:
        if current != wanted:
            print(f"{TARGET} is stale: run scripts/gen_architecture_docs.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
