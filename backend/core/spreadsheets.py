"""Cells of CSV exports that a spreadsheet opens safely (CSV or formula injection).

A text cell that begins with ``=``, ``+``, ``-`` or ``@`` (or a tab or carriage return,
which some spreadsheets skip before one) is taken by Excel, LibreOffice and Google Sheets
for a formula, which can run commands or send data away. Such cells get a leading
apostrophe, as OWASP advises; numbers are left as they are.
"""

from __future__ import annotations

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(cell: object) -> object:
    """The cell as it is, or a text cell that would start a formula with ``'`` before it."""
    if isinstance(cell, str) and cell.startswith(FORMULA_STARTS):
        return "'" + cell
    return cell
