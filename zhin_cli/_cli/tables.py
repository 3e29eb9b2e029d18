"""Tables of figures laid out to the terminal's width with every cell whole (issue 31 §3).

A table is boxed where it fits with each header on one line; else unboxed — one space between columns, each
column as wide as its longest cell or its header's longest word (headers wrap between words), as ``report
window``'s; where even that does not fit, the caller prints one block per row instead (``fits`` says which).
Identifiers and numbers are never cut nor folded: a column is never narrower than its longest cell.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from rich.cells import cell_len

if TYPE_CHECKING:
    from rich.table import Table


def column_widths(headers: Sequence[str], rows: Sequence[Sequence[str]], *, headers_wrap: bool) -> list[int]:
    """Each column's width: its longest cell, and its header (its longest word when headers wrap)."""
    heads = [max(map(cell_len, header.split()), default=0) if headers_wrap else cell_len(header) for header in headers]
    return [max([head] + [cell_len(row[index]) for row in rows]) for index, head in enumerate(heads)]


def boxed_width(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> int:
    """Cells of a boxed table: the columns, a space either side of each and the rules between them."""
    return sum(column_widths(headers, rows, headers_wrap=False)) + 3 * len(headers) + 1


def unboxed_width(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> int:
    """Cells of an unboxed table: the columns and one space between two."""
    return sum(column_widths(headers, rows, headers_wrap=True)) + len(headers) - 1


def fits(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> bool:
    """Whether the table (boxed or not) fits ``width`` cells with every cell whole."""
    return unboxed_width(headers, rows) <= width


def wrapped(header: str, width: int) -> str:
    """``header`` broken between words into lines of at most ``width`` cells (a word longer stays whole)."""
    lines: list[str] = []
    for word in header.split():
        if lines and cell_len(lines[-1]) + 1 + cell_len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "\n".join(lines)


def figures_table(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int, *, title: str | None = None,
                  numeric: Collection[int] = ()) -> Table:
    """A rich table of plain-text ``rows`` (escaped by the caller for the terminal; markup is not read), boxed when
    that fits ``width``, else unboxed; columns in ``numeric`` are right-aligned. Call only when :func:`fits`."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    boxed = boxed_width(headers, rows) <= width
    widths = column_widths(headers, rows, headers_wrap=not boxed)
    table = Table(title=None if title is None else Text(title, style="table.title"), title_justify="left",
                  box=box.HEAVY_HEAD if boxed else None, pad_edge=boxed, padding=(0, 1), collapse_padding=not boxed)
    for index, (header, size) in enumerate(zip(headers, widths, strict=True)):
        table.add_column(header if boxed else wrapped(header, size), justify="right" if index in numeric else "left", min_width=size, max_width=size,
                         no_wrap=True)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    return table
