"""The API reference in docs/ is the one the current schema generates."""

from io import StringIO
from pathlib import Path

from django.core.management import call_command

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_api_reference_matches_the_schema():
    generated = StringIO()
    call_command("api_reference", stdout=generated)
    assert generated.getvalue() == (DOCS / "api.md").read_text(), "run `make schema`"
