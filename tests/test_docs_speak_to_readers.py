"""Documents, docstrings and comments speak to readers: they say what is true and why,
never which issue asked for it (a reader has the code, not the tracker)."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
ISSUE_NUMBER = re.compile(r"\bissues?\s+#?\d+|\(#\d+\)", re.IGNORECASE)


def _texts() -> list[pathlib.Path]:
    docs = list((ROOT / "docs").glob("*.md"))  # benchmarks.md too: the bench's own notes
    code = [p for top in ("runtime", "host", "protocol", "scripts") for p in (ROOT / top).rglob("*")
            if p.is_file() and (p.suffix == ".py" or p.parent.name == "scripts")]
    return [ROOT / "README.md", *docs, *code]


def test_no_document_or_docstring_names_an_issue_number() -> None:
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in _texts()
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if ISSUE_NUMBER.search(line)]
    assert not found, "say the fact, not the issue:\n" + "\n".join(found)
