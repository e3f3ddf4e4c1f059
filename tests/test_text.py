"""dsdsim.export.text: tables and lines drawn as text, checked against layouts written out by hand."""
from __future__ import annotations

import pytest

from dsdsim.export.text import Group, Table, plain, to_text


def _table(*rows, title=None, **columns):
    t = Table(title=title)
    for name, kw in columns.items():
        t.add_column(name, **kw)
    for r in rows:
        t.add_row(*r)
    return t


def test_a_table_is_drawn_with_a_heavy_head_and_padded_cells():
    t = _table(("1", "3"), ("16", "[red]no[/red]"), batch={"justify": "right"}, K={})
    assert to_text(t) == (
        "┏━━━━━━━┳━━━━┓\n"
        "┃ batch ┃ K  ┃\n"
        "┡━━━━━━━╇━━━━┩\n"
        "│     1 │ 3  │\n"
        "│    16 │ no │\n"
        "└───────┴────┘\n")


def test_the_title_is_centred_over_the_table_and_sections_are_ruled():
    t = Table(title="ab")
    t.add_column("x")
    t.add_row("1", end_section=True)
    t.add_row("2", end_section=True)           # no rule after the last row
    assert to_text(t) == " ab\n┏━━━┓\n┃ x ┃\n┡━━━┩\n│ 1 │\n├───┤\n│ 2 │\n└───┘\n"


def test_lines_wrap_at_spaces_and_a_long_word_is_folded_not_cut():
    assert to_text("aaa bbb ccc", 7) == "aaa bbb\nccc\n"
    assert to_text("abcdefghij", 4) == "abcd\nefgh\nij\n"
    assert to_text(Group("one", "two\nthree"), 20) == "one\ntwo\nthree\n"


def test_a_table_wider_than_the_page_narrows_its_widest_wrapping_column():
    t = _table(("name-that-stays", "a few words that wrap"), name={"no_wrap": True}, what={})
    lines = to_text(t, 36).splitlines()
    assert all(len(line) <= 36 for line in lines)
    assert any("│ name-that-stays │" in line for line in lines)
    body = [line.split("│")[2].strip() for line in lines if line.startswith("│")]
    assert " ".join(body) == "a few words that wrap"


def test_a_no_wrap_column_is_never_narrowed_even_past_the_page():
    t = _table(("x" * 30, "y" * 30), a={"no_wrap": True}, b={"no_wrap": True})
    assert ("│ " + "x" * 30 + " │ " + "y" * 30 + " │") in to_text(t, 20)


def test_min_and_max_width_bound_a_column():
    t = _table(("ab",), c={"min_width": 5})
    assert "│ ab    │" in to_text(t)
    t = _table(("abcdefgh",), c={"max_width": 4})
    assert to_text(t).splitlines()[3:5] == ["│ abcd │", "│ efgh │"]


def test_a_table_without_box_or_header_aligns_its_columns():
    t = Table(show_header=False, box=False)
    t.add_column("k", no_wrap=True)
    t.add_column("v")
    t.add_row("a", "1")
    t.add_row("long", "2")
    assert to_text(t) == " a     1\n long  2\n"


def test_marks_are_dropped_in_plain_text_and_styled_on_a_terminal():
    assert plain("[bold]llama[/bold] on [red]h100[/]") == "llama on h100"
    assert plain("K table: [[1, 20, 3]]") == "K table: [[1, 20, 3]]"    # brackets that are not marks stay
    styled = to_text("[bold]a[/bold] b", styled=True)
    assert styled == "\x1b[1ma\x1b[0m b\n"
    header = to_text(_table(("1",), n={}), styled=True).splitlines()[1]
    assert header == "┃ \x1b[1mn\x1b[0m ┃"


def test_a_mark_inside_a_cell_does_not_count_towards_its_width():
    t = _table(("[red]no[/red]",), fits={})
    assert to_text(t).splitlines()[3] == "│ no   │"


def test_a_row_longer_than_the_columns_is_refused():
    t = _table(a={})
    with pytest.raises(ValueError, match="2 cells in a table of 1 columns"):
        t.add_row("1", "2")


def test_one_percent_formatter():
    from dsdsim.units import format_percent

    assert (format_percent(0.0123), format_percent(0.0123, 2), format_percent(-0.05, signed=True)) == (
        "1.2%", "1.23%", "-5.0%")
    assert format_percent(0.05, signed=True) == "+5.0%"
    assert (format_percent(None), format_percent(float("nan"), missing="n/a"), format_percent(float("inf"))) == (
        "-", "n/a", "-")


def test_one_json_writer():
    """dsdsim.files.to_json: numpy numbers and arrays, enums and paths as plain values; anything else refused (a
    report once wrote str() of what it could not encode)."""
    import json
    from pathlib import Path

    import numpy as np
    import pytest

    from dsdsim.files import to_json
    from dsdsim.units import DType

    doc = json.loads(to_json({"a": np.float64(1.5), "b": np.arange(3), "c": DType.fp8, "d": Path("/x/y")}))
    assert doc == {"a": 1.5, "b": [0, 1, 2], "c": "fp8", "d": "/x/y"}
    with pytest.raises(TypeError, match="not JSON serialisable: set"):
        to_json({"e": {1, 2}})
