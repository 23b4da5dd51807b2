"""Tables of numbers that stay readable at the terminal's width: never a number cut to "337.…".

A table is declared as groups of columns, the first column of the first group being each row's
key (the concurrency, say). `fitted` lays it out as the width allows: one table of every column
(headers on one line, else on two); else one table per group, each starting with the key column;
else, on a very narrow terminal, each row as its own list of name and value (built here, printed by
the caller).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from rich.table import Table

if TYPE_CHECKING:
    from rich.console import Console


@dataclass(frozen=True)
class Col:
    name: str  # the header of the wide table, and the name in the list layout
    short: str  # the header when tables are split: two short lines ("TPS\n/GPU")
    value: Callable[[Any], str]


def num(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _table(rows: list[Any], cols: list[Col], *, narrow: bool, title: str | None = None) -> Table:
    t = Table(title=title, title_justify="left")
    for c in cols:
        t.add_column(c.short if narrow else c.name, justify="right", no_wrap=True)
    for r in rows:
        t.add_row(*(c.value(r) for c in cols))
    return t


def fitted(
    console: Console, rows: list[Any], groups: list[list[Col]], *, titles: list[str], label: Callable[[Any], str]
) -> list[Table]:
    """The renderables that show `rows` whole at `console.width` (see the module's docstring).
    `titles`: one per group, for the split tables; `label`: a row's title in the list layout."""
    key, columns = groups[0][0], [c for g in groups for c in g][1:]
    unbounded = console.options.update_width(1 << 16)  # measured as wide as it likes: its natural width

    def fits(t: Table) -> bool:
        return console.measure(t, options=unbounded).maximum <= console.width

    for narrow in (False, True):
        whole = _table(rows, [key, *columns], narrow=narrow)
        if fits(whole):
            return [whole]
    split = [_table(rows, g if i == 0 else [key, *g], narrow=True, title=titles[i]) for i, g in enumerate(groups)]
    if all(fits(t) for t in split):
        return split
    lists = []
    for r in rows:
        t = Table(title=label(r), title_justify="left", show_header=False, box=None, padding=(0, 1, 0, 2))
        t.add_column(overflow="fold")
        t.add_column(justify="right", overflow="fold")
        for c in columns:
            t.add_row(c.name, c.value(r))
        lists.append(t)
    return lists
