"""Tables and lines as text for a terminal or a file: box-drawn tables, paragraphs wrapped to a width.

A view (``dsdsim.export.render``) builds a ``Table`` or a ``Group`` of tables and lines; the command line turns it
into text with ``to_text``. Words in a line may carry the marks ``[bold]...[/bold]`` and ``[red]...[/red]`` (or
``[/]`` to close the last one): on a terminal they are ANSI styles, in a file or a pipe they are dropped. Any other
text in brackets (a JSON list, ``[1, 20, 3]``) is text.

The layout is the usual one for figures in a terminal: a heavy-ruled header, each cell padded by one space, a
title centred above the table. A table wider than the page narrows its wrapping columns, widest first; a
``no_wrap`` column (a name, a figure) is never narrowed or cut, so such a table may run past the page rather than
lose a character. A word longer than its column is folded onto the next line, never cut short.
"""
from __future__ import annotations

import re
from typing import Iterable, Optional, Sequence, Union

__all__ = ["Table", "Group", "to_text"]

# styles the views use, as ANSI select-graphic-rendition codes
_SGR = {"bold": "1", "dim": "2", "italic": "3", "red": "31"}
_MARK = re.compile(r"\[(/?)(bold|dim|italic|red)?\]")

# the heavy-head box: (left, horizontal, cross, right) for each rule, and the vertical of head and body rows
_TOP, _HEAD_RULE, _SECTION_RULE, _BOTTOM = ("┏", "━", "┳", "┓"), ("┡", "━", "╇", "┩"), ("├", "─", "┼", "┤"), \
    ("└", "─", "┴", "┘")
_LIGHT_TOP = ("┌", "─", "┬", "┐")                # the top of a table without a header
_HEAD_BAR, _BODY_BAR = "┃", "│"
_PAD = 1                                  # spaces each side of a cell


class _Column:
    __slots__ = ("header", "justify", "no_wrap", "min_width", "max_width")

    def __init__(self, header: str, justify: str, no_wrap: bool, min_width: Optional[int],
                 max_width: Optional[int]) -> None:
        if justify not in ("left", "right", "center"):
            raise ValueError(f"justify is left, right or center, not {justify!r}")
        self.header, self.justify, self.no_wrap = header, justify, no_wrap
        self.min_width, self.max_width = min_width, max_width


class Table:
    """Columns and rows of marked-up strings, drawn in a box (``box=False``: aligned columns, no rules)."""

    def __init__(self, title: Optional[str] = None, *, caption: Optional[str] = None, show_header: bool = True,
                 box: bool = True) -> None:
        self.title, self.caption, self.show_header, self.box = title, caption, show_header, box
        self.columns: list[_Column] = []
        self.rows: list[list[str]] = []
        self._section_after: set[int] = set()          # row indices followed by a rule

    def add_column(self, header: str = "", *, justify: str = "left", no_wrap: bool = False,
                   min_width: Optional[int] = None, max_width: Optional[int] = None) -> None:
        """A column; ``min_width`` and ``max_width`` bound its content, in characters."""
        self.columns.append(_Column(header, justify, no_wrap, min_width, max_width))

    def add_row(self, *cells: str, end_section: bool = False) -> None:
        if len(cells) > len(self.columns):
            raise ValueError(f"a row of {len(cells)} cells in a table of {len(self.columns)} columns")
        self.rows.append([*cells, *([""] * (len(self.columns) - len(cells)))])
        if end_section:
            self._section_after.add(len(self.rows) - 1)


class Group:
    """Lines and tables shown one below the other; a group inside a group is shown as its parts."""

    def __init__(self, *parts: Union[str, Table, "Group"]) -> None:
        self.parts = tuple(q for p in parts for q in (p.parts if isinstance(p, Group) else (p,)))


Renderable = Union[str, Table, Group]


def to_text(renderable: Renderable, width: int = 140, *, styled: bool = False) -> str:
    """The text of a table, a line or a group, lines no wider than ``width`` where words allow; ``styled`` keeps
    the marks as ANSI codes (a terminal), else they are dropped. Ends with a newline."""
    lines: list[str] = []
    for part in (renderable.parts if isinstance(renderable, Group) else (renderable,)):
        if isinstance(part, Table):
            lines += _table_lines(part, width, styled)
        else:
            for paragraph in str(part).split("\n"):
                lines += _styled_lines(paragraph, width, styled)
    return "".join(line.rstrip() + "\n" for line in lines)


# --- marked-up text --------------------------------------------------------------------------------------


def _parse(markup: str) -> tuple[str, list[tuple[int, int, str]]]:
    """The plain text of ``markup`` and its styled spans (start, end, style) in that text."""
    plain: list[str] = []
    spans: list[tuple[int, int, str]] = []
    open_: list[tuple[str, int]] = []
    at, pos = 0, 0
    for m in _MARK.finditer(markup):
        closing, style = m.group(1), m.group(2)
        if not closing and style is None:               # "[]" is text
            continue
        plain.append(markup[at:m.start()])
        pos += m.start() - at
        at = m.end()
        if not closing:
            open_.append((style, pos))
            continue
        for i in range(len(open_) - 1, -1, -1):          # "[/]" or "[/style]" closes the latest (matching) one
            if style is None or open_[i][0] == style:
                s, start = open_.pop(i)
                spans.append((start, pos, s))
                break
        else:
            plain.append(m.group(0))                   # a close with nothing open is text
            pos += len(m.group(0))
    plain.append(markup[at:])
    pos += len(markup) - at
    spans += [(start, pos, s) for s, start in open_]
    return "".join(plain), spans


def plain(markup: str) -> str:
    """``markup`` without its marks."""
    return _parse(markup)[0]


def _wrap(text: str, width: int) -> list[tuple[int, int]]:
    """(start, end) of each line of ``text`` wrapped at spaces to ``width``; a longer word is folded."""
    width = max(1, width)
    out: list[tuple[int, int]] = []
    n, start = len(text), 0
    while True:
        while start < n and text[start] == " " and out:  # a continuation line starts at a word
            start += 1
        if n - start <= width:
            out.append((start, n))
            return out
        cut = text.rfind(" ", start, start + width + 1)
        if cut <= start:                                  # no space in reach: fold the word
            out.append((start, start + width))
            start += width
        else:
            end = cut
            while end > start and text[end - 1] == " ":
                end -= 1
            out.append((start, end))
            start = cut + 1


def _render_span(text: str, spans: Sequence[tuple[int, int, str]], start: int, end: int, styled: bool,
                 base: str = "") -> str:
    """``text[start:end]`` with the styles that cover it (and ``base`` over all of it) as ANSI codes."""
    if not styled or (not spans and not base):
        return text[start:end]
    cuts = sorted({start, end, *(p for s, e, _ in spans for p in (s, e) if start < p < end)})
    out = []
    for a, b in zip(cuts, cuts[1:]):
        codes = [_SGR[base]] if base else []
        codes += [_SGR[st] for s, e, st in spans if s <= a and b <= e]
        piece = text[a:b]
        out.append(f"\x1b[{';'.join(codes)}m{piece}\x1b[0m" if codes and piece else piece)
    return "".join(out)


def _styled_lines(markup: str, width: int, styled: bool, base: str = "") -> list[str]:
    text, spans = _parse(markup)
    return [_render_span(text, spans, s, e, styled, base) for s, e in _wrap(text, width)]


# --- tables ----------------------------------------------------------------------------------------------


def _widths(table: Table, width: int) -> list[int]:
    """The content width of each column: its widest cell within min/max_width, then, where the table would run
    past ``width``, the widest wrapping column narrowed one character at a time (a ``no_wrap`` column keeps its
    width)."""
    rows = ([[c.header for c in table.columns]] if table.show_header else []) + table.rows
    natural, floor = [], []
    for j, col in enumerate(table.columns):
        texts = [plain(row[j]) for row in rows]
        w = max((len(line) for t in texts for line in t.split("\n")), default=0)
        if col.max_width is not None:
            w = min(w, col.max_width)
        if col.min_width is not None:
            w = max(w, col.min_width)
        natural.append(max(w, 1))
        floor.append(natural[-1] if col.no_wrap else max(1, col.min_width or 1))
    frame = len(table.columns) + 1 if table.box else 0
    excess = sum(natural) + 2 * _PAD * len(natural) + frame - width
    widths = list(natural)
    while excess > 0:
        shrinkable = [j for j, w in enumerate(widths) if w > floor[j]]
        if not shrinkable:
            break
        j = max(shrinkable, key=lambda i: widths[i])
        widths[j] -= 1
        excess -= 1
    return widths


def _cell_lines(markup: str, width: int, justify: str, styled: bool, base: str = "") -> list[str]:
    lines = []
    for paragraph in markup.split("\n"):
        text, spans = _parse(paragraph)
        for s, e in _wrap(text, width):
            gap = width - (e - s)
            left = gap if justify == "right" else gap // 2 if justify == "center" else 0
            lines.append(" " * left + _render_span(text, spans, s, e, styled, base) + " " * (gap - left))
    return lines


def _rule(parts: tuple[str, str, str, str], widths: Iterable[int]) -> str:
    left, horizontal, cross, right = parts
    return left + cross.join(horizontal * (w + 2 * _PAD) for w in widths) + right


def _row_lines(cells: Sequence[str], table: Table, widths: Sequence[int], bar: str, styled: bool,
               base: str = "") -> list[str]:
    columns = [_cell_lines(c, w, col.justify, styled, base) for c, w, col in zip(cells, widths, table.columns)]
    height = max((len(c) for c in columns), default=1)
    out = []
    for i in range(height):
        pieces = [" " * _PAD + (c[i] if i < len(c) else " " * w) + " " * _PAD for c, w in zip(columns, widths)]
        out.append(bar + bar.join(pieces) + bar if table.box else "".join(pieces))
    return out


def _table_lines(table: Table, width: int, styled: bool) -> list[str]:
    widths = _widths(table, width)
    total = sum(widths) + 2 * _PAD * len(widths) + (len(widths) + 1 if table.box else 0)
    lines: list[str] = []
    if table.title:
        lines += [_centred(line, total) for line in _styled_lines(table.title, total, styled, "italic")]
    if table.box:
        lines.append(_rule(_TOP, widths) if table.show_header else _rule(_LIGHT_TOP, widths))
    if table.show_header:
        lines += _row_lines([c.header for c in table.columns], table, widths, _HEAD_BAR if table.box else "",
                            styled, "bold")
        if table.box:
            lines.append(_rule(_HEAD_RULE, widths))
    for i, row in enumerate(table.rows):
        lines += _row_lines(row, table, widths, _BODY_BAR, styled)
        if table.box and i in table._section_after and i < len(table.rows) - 1:
            lines.append(_rule(_SECTION_RULE, widths))
    if table.box:
        lines.append(_rule(_BOTTOM, widths))
    if table.caption:
        lines += [_centred(line, total) for line in _styled_lines(table.caption, total, styled, "dim")]
    return lines


def _centred(line: str, width: int) -> str:
    visible = len(re.sub(r"\x1b\[[0-9;]*m", "", line))
    return " " * max(0, (width - visible) // 2) + line
