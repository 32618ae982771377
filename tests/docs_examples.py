"""The shell examples of the README and the user guide, read from the Markdown.

A fenced block whose info string starts with ``sh`` is an example of a shell session. Its
info string says what becomes of it (docs/user-guide.md, "Examples in these documents"):

- ``sh test=NAME``: tests/test_docs_examples.py runs it against a live system and checks
  what the text says it does with the check called NAME;
- ``sh no-test``: it is not run (starting the system, a cluster the tests have not), the
  text says why where it is not plain.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = ("README.md", "docs/user-guide.md")
FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<body>.*?)^```[ \t]*$", re.S | re.M)
SHELLS = ("sh", "bash", "shell", "console")
NOT_RUN = "no-test"


@dataclass(frozen=True)
class Example:
    document: str
    line: int
    info: str
    body: str

    @property
    def check(self) -> str | None:
        """The check's name (``test=NAME``), None for a block not to be run."""
        found = re.search(r"(?:^|\s)test=(\S+)", self.info)
        return found.group(1) if found else None

    @property
    def not_run(self) -> bool:
        return NOT_RUN in self.info.split()

    def __str__(self) -> str:
        return f"{self.document}:{self.line} ({self.info})"


def shell_examples(document: str) -> list[Example]:
    """Every shell block of ``document`` (a path under the repository), in order."""
    text = (ROOT / document).read_text()
    found = []
    for fence in FENCE.finditer(text):
        info = fence.group("info").strip()
        if info.split()[:1] and info.split()[0] in SHELLS:
            line = text.count("\n", 0, fence.start()) + 1
            found.append(Example(document, line, info, fence.group("body")))
    return found
