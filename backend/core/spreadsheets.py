"""Cells of CSV exports that a spreadsheet opens safely (CSV or formula injection).

A text cell that begins with ``=``, ``+``, ``-`` or ``@`` (or a tab or carriage return,
which some spreadsheets skip before one) is taken by Excel, LibreOffice and Google Sheets
for a formula, which can run commands or send data away. Such cells get a leading
apostrophe, as OWASP advises; numbers are left as they are.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence

from django.http import HttpResponse

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(cell: object) -> object:
    """The cell as it is, or a text cell that would start a formula with ``'`` before it."""
    if isinstance(cell, str) and cell.startswith(FORMULA_STARTS):
        return "'" + cell
    return cell


def csv_response(
    rows: Iterable[Mapping[str, object]], columns: Sequence[str], filename: str
) -> HttpResponse:
    """The rows as a CSV download: a header of ``columns``, an empty cell for a missing
    or null value, every cell spreadsheet-safe."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(columns)
    for row in rows:
        writer.writerow(
            ["" if row.get(name) is None else spreadsheet_safe(row[name]) for name in columns]
        )
    response = HttpResponse(buffer.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
