"""Tables as a chapter shows them: every row, numbers a reader can read, and the data to download.

:func:`table` turns a DataFrame into one HTML block:

- **no truncation**: every row and column is written (pandas' display limits do not apply);
- **numbers that read well**: integers with thousands separators; floats rounded by the precision
  policy (:mod:`pdcalc.core.precision`, :data:`~pdcalc.core.precision.SIG` significant figures by default) and
  printed with the decimals the column needs, thousands separators included, never in ``e+07``
  notation; whole-number floats as integers, and in a column whose other values need decimals a whole
  number of two or more digits (or zero) still prints without them (``73,700``, not ``73,700.00``);
  missing values as an empty cell; booleans as yes/no;
- **no index** unless it means something (``index=True``, or a named index the caller keeps);
- **fits the column**: the table sits in a scroll container by design (``div.pdcalc-table``, horizontal
  scrolling inside the column), so a wide table never widens the page; a table that must be wider than
  the column says why (``wide="..."``: the class :data:`WIDE_CLASS` on the table and a caption line of the
  class :data:`WIDE_WHY_CLASS`, which ``make check-site`` requires of any table wider than the column);
- **quotes kept verbatim**: a column named in ``quotes`` holds what a source prints, each cell marked
  :data:`QUOTE_CLASS` (``make check-site`` does not hold a quote to the book's number style);
- **a CSV download** of exactly what is shown (``data:`` link, works offline).

The HTML is deterministic (no random ids), so nbval compares it run to run.
"""

from __future__ import annotations

import base64
import html
import math
import re

import numpy as np
import pandas as pd

from pdcalc.core.precision import SIG, round_sig, tidy

#: Class of the scroll container every table sits in.
SCROLL_CLASS = "pdcalc-table"
#: Class of a table that is wider than the book's column on purpose, and of the visible line that says why
#: (``tools/check_site.py`` fails on a wider table without both).
WIDE_CLASS = "pdcalc-wide"
WIDE_WHY_CLASS = "pdcalc-wide-why"
#: Class of a cell's text quoted verbatim from a source (``tools/check_site.py`` does not check its numbers).
QUOTE_CLASS = "pdcalc-quote"


def _decimals(values: np.ndarray, sig: int) -> int:
    """Decimals that show every value of the column as rounded to ``sig`` significant figures (at most 6):
    the most any value needs, so that the column's points line up and no digit is made up or dropped."""
    from decimal import Decimal

    out = 0
    for v in values[np.isfinite(values)]:
        r = round_sig(float(v), sig)
        if r != 0 and r != round(r):
            out = max(out, -Decimal(repr(r)).normalize().as_tuple().exponent)
    return int(min(out, 6))


def _bare_whole(x: float, decimals: int) -> bool:
    """Whether ``x``, printed with ``decimals`` decimals, would show only zeros after the point although no
    digit there is significant: a whole number of two or more digits, or zero (``73,700.00``, ``0.00``). A
    single-digit whole number keeps the column's decimals (a ratio of ``1.00`` at three figures)."""
    r = round(x, decimals)
    return decimals > 0 and r == round(r) and (abs(r) >= 10 or r == 0)


def format_column(s: pd.Series, sig: int = SIG) -> list[str]:
    """The cells of one column as text (see the module docstring)."""
    if pd.api.types.is_bool_dtype(s.dtype):
        return ["yes" if v else "no" for v in s]
    if pd.api.types.is_integer_dtype(s.dtype):
        return [f"{int(v):,}" for v in s]
    if pd.api.types.is_float_dtype(s.dtype):
        v = s.to_numpy(dtype=float)
        d = _decimals(v, sig)
        return ["" if not math.isfinite(x) else f"{x:,.{0 if _bare_whole(x, d) else d}f}" for x in v]
    out = []
    for v in s:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            out.append("")
        elif isinstance(v, (bool, np.bool_)):
            out.append("yes" if v else "no")
        elif isinstance(v, (int, np.integer)):
            out.append(f"{int(v):,}")
        elif isinstance(v, (float, np.floating)):
            out.append("" if not math.isfinite(v) else format_column(pd.Series([float(v)]), sig)[0])
        else:
            out.append(str(v))
    return out


def slug(text: str) -> str:
    """A file or anchor name from ``text`` (lowercase ASCII letters, digits and dashes)."""
    s = re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")
    return s or "table"


def _header(name) -> str:
    if isinstance(name, tuple):
        name = " · ".join(str(p) for p in name if str(p))
    return html.escape(str(name))


def table_html(df: pd.DataFrame, *, index: bool = False, sig: int = SIG, caption: str | None = None,
               csv_name: str | None = None, numeric_right: bool = True, row_ids: list[str] | None = None,
               cell_html: dict[str, list[str]] | None = None, min_widths: dict[str, str] | None = None,
               wide: str | None = None, quotes: tuple = (), texts: dict[str, list[str]] | None = None) -> str:
    """The HTML of :func:`table` (a string).

    ``row_ids`` gives each row an ``id`` (an anchor a link can point to); ``cell_html`` replaces the text
    of a column by ready HTML (e.g. a coloured verdict), one string per row; ``min_widths`` gives a column a
    CSS minimum width (a column of sentences that the browser would otherwise squeeze into a tall strip).
    ``wide`` says why the table may be wider than the book's column (a caption line "Wide table, scroll
    sideways: ..." and the class :data:`WIDE_CLASS`); ``quotes`` names the columns whose cells are quoted
    verbatim (:data:`QUOTE_CLASS`); ``texts`` gives a column's cells as ready text, one string per row (a
    number at its own precision, e.g. :func:`pdcalc.book.report.readable`), shown and written to the CSV in
    place of the column's own formatting, aligned as the column's values are.
    """
    shown = tidy(df.reset_index() if index else df, sig)
    cols = list(shown.columns)
    texts = {c: list(texts[c]) if texts and c in texts else format_column(shown[c], sig) for c in cols}
    numeric = {c: pd.api.types.is_numeric_dtype(shown[c].dtype) and not pd.api.types.is_bool_dtype(shown[c].dtype)
               for c in cols}
    parts = [f'<div class="{SCROLL_CLASS}" style="overflow-x:auto;max-width:100%">']
    parts.append(f'<table class="dataframe pdcalc{f" {WIDE_CLASS}" if wide else ""}">')
    if caption or wide:
        why = (f'<span class="{WIDE_WHY_CLASS}">Wide table, scroll sideways: {html.escape(wide)}</span>'
               if wide else "")
        parts.append(f"<caption>{html.escape(caption or '')}{'<br>' if caption and wide else ''}{why}</caption>")
    widths = min_widths or {}
    parts.append("<thead><tr>" + "".join(
        f'<th style="text-align:{"right" if numeric[c] and numeric_right else "left"}'
        f'{f";min-width:{widths[c]}" if c in widths else ""}">{_header(c)}</th>' for c in cols)
        + "</tr></thead><tbody>")
    for i in range(len(shown)):
        rid = f' id="{html.escape(row_ids[i])}"' if row_ids else ""
        cells = []
        for c in cols:
            body = cell_html[c][i] if cell_html and c in cell_html else html.escape(texts[c][i])
            if c in quotes and body:
                body = f'<span class="{QUOTE_CLASS}">{body}</span>'
            align = "right" if numeric[c] and numeric_right else "left"
            cells.append(f'<td style="text-align:{align}">{body}</td>')
        parts.append(f"<tr{rid}>" + "".join(cells) + "</tr>")
    parts.append("</tbody></table>")
    if csv_name:
        data = pd.DataFrame({c: texts[c] for c in cols}).to_csv(index=False).encode("utf-8")
        href = "data:text/csv;charset=utf-8;base64," + base64.b64encode(data).decode("ascii")
        name = slug(csv_name) + ".csv"
        parts.append(f'<p class="pdcalc-csv"><a download="{name}" href="{href}">download {name}</a></p>')
    parts.append("</div>")
    return "".join(parts)


def table(df: pd.DataFrame, *, index: bool = False, sig: int = SIG, caption: str | None = None,
          csv_name: str | None = None, **kw):
    """``df`` as a chapter shows it (module docstring), as an IPython HTML object.

    ``csv_name`` names the CSV download (default: the caption, or ``table``); ``csv_name=""`` leaves the
    download out.
    """
    from IPython.display import HTML

    name = (caption or "table") if csv_name is None else csv_name
    return HTML(table_html(df, index=index, sig=sig, caption=caption, csv_name=name or None, **kw))


# ---------------------------------------------------------------------------------------------
# audit tables
# ---------------------------------------------------------------------------------------------
#: Background and text colours of each verdict (and of an erratum by severity).
VERDICT_STYLE = {
    "major": ("#b2182b", "#fff"), "moderate": ("#ef8a62", "#000"), "minor": ("#fddbc7", "#000"),
    "cosmetic": ("#e0e0e0", "#000"), "rounding": ("#d1e5f0", "#000"), "match": ("#d9f0d3", "#000"),
    "input": ("#f0f0f0", "#000"), "pending": ("#ffffbf", "#000"),
}


def verdict_badge(verdict: str, severity: str = "") -> str:
    """A verdict as a coloured label; an erratum carries its severity (``erratum · major``)."""
    key = severity if verdict == "erratum" and severity else verdict
    bg, fg = VERDICT_STYLE.get(key, ("#f0f0f0", "#000"))
    text = f"{verdict} · {severity}" if verdict == "erratum" and severity else verdict
    return (f'<span class="pdcalc-verdict" style="background:{bg};color:{fg};padding:0 .35em;border-radius:3px;'
            f'white-space:nowrap">{html.escape(text)}</span>')


def figure_text(value, sig: int = 4) -> str:
    """A figure for a terminal: integers exact, other numbers at ``sig`` significant figures, thousands
    separators; anything else as it is."""
    import math

    from pdcalc.core.precision import round_sig

    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return str(value)
    if float(value).is_integer():
        return f"{int(value):,}"
    v = round_sig(float(value), sig)
    return f"{v:,.{max(0, sig - 1 - math.floor(math.log10(abs(v))))}f}"


def terminal_pad(text, width: int) -> str:
    """``text`` padded to ``width`` terminal columns (a CJK character takes two)."""
    import unicodedata

    text = str(text)
    cols = sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)
    return f"{text}{' ' * max(width - cols, 0)}"
