"""The job-states picture in docs/architecture.md is the transitions table, edge for edge."""

import re
from pathlib import Path

from backend.jobs.transitions import ALLOWED, INITIAL

DOT = Path(__file__).resolve().parents[3] / "docs" / "images" / "job-states.dot"
EDGE = re.compile(r"(\w+)\s*->\s*(\w+)")


def drawn_edges() -> set[tuple[str, str]]:
    text = "\n".join(line.split("//")[0] for line in DOT.read_text().splitlines())
    return set(EDGE.findall(text))


def test_the_picture_draws_every_allowed_transition_and_no_other():
    table = {(str(src), str(dst)) for src, targets in ALLOWED.items() for dst in targets}
    table |= {("submitted", str(status)) for status in INITIAL}
    drawn = drawn_edges()
    assert drawn - table == set(), "drawn but not allowed"
    assert table - drawn == set(), "allowed but not drawn"


def test_the_edge_reader_sees_a_changed_picture():
    assert ("queued", "scheduling") in drawn_edges()
    assert ("finished", "queued") not in drawn_edges()
