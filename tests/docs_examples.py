"""The shell examples of the README and the other documents, read from the Markdown.

A fenced block whose info string starts with ``sh`` is an example of a shell session. Its
info string says what becomes of it (docs/user-guide.md, "Examples in these documents"):

- ``sh test=NAME``: tests/test_docs_examples.py runs it against a live system and checks
  what the text says it does with the check called NAME, as root and again as a normal
  user; ``sh test=NAME as=admin``: as root only (an operator's or cluster admin's block);
  ``sh test=NAME alone``: by a test of its own, not in the live system's terminal (a block
  that starts a system itself: ``make run``);
- ``sh no-test=REASON``: it is not run, for the reason given (``starts-the-system``,
  ``needs-kubernetes``, ...); a bare ``no-test`` is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = (
    "README.md",
    "docs/user-guide.md",
    "docs/operations.md",
    "docs/api.md",
    "docs/kubernetes-backend.md",
)
FENCE = re.compile(r"^[ \t]*```(?P<info>[^\n`]*)\n(?P<body>.*?)^[ \t]*```[ \t]*$", re.S | re.M)
SHELLS = ("sh", "bash", "shell", "console")
NOT_RUN = "no-test"
ADMIN_ONLY = "as=admin"
ALONE = "alone"


@dataclass(frozen=True)
class Example:
    document: str
    line: int
    info: str
    body: str

    def _option(self, name: str) -> str | None:
        found = re.search(rf"(?:^|\s){name}(?:=(\S*))?(?=\s|$)", self.info)
        return None if found is None else found.group(1) or ""

    @property
    def check(self) -> str | None:
        """The check's name (``test=NAME``), None for a block not to be run."""
        return self._option("test") or None

    @property
    def not_run(self) -> bool:
        return self._option(NOT_RUN) is not None

    @property
    def reason(self) -> str:
        """Why a ``no-test`` block is not run; empty where the fence gives no reason."""
        return self._option(NOT_RUN) or ""

    @property
    def admin_only(self) -> bool:
        """Run as root only: an operator's or a cluster admin's block."""
        return ADMIN_ONLY in self.info.split()

    @property
    def alone(self) -> bool:
        """Run by a test of its own, not in the live system's terminal."""
        return ALONE in self.info.split()

    def commands(self) -> list[str]:
        """The block's commands, one per logical line (continuations joined, comments and
        blank lines left out)."""
        joined = re.sub(r"\\\n", " ", self.body)
        return [line.strip() for line in joined.splitlines() if line.strip()[:1] not in ("", "#")]

    def __str__(self) -> str:
        return f"{self.document}:{self.line} ({self.info})"


def shell_examples(document: str) -> list[Example]:
    """Every shell block of ``document`` (a path under the repository), in order; a block
    indented under a list item is read without its indent."""
    text = (ROOT / document).read_text()
    found = []
    for fence in FENCE.finditer(text):
        info = fence.group("info").strip()
        if info.split()[:1] and info.split()[0] in SHELLS:
            line = text.count("\n", 0, fence.start()) + 1
            indent = len(fence.group(0)) - len(fence.group(0).lstrip(" \t"))
            body = "".join(
                row[indent:] if row[:indent].isspace() else row
                for row in fence.group("body").splitlines(keepends=True)
            )
            found.append(Example(document, line, info, body))
    return found
