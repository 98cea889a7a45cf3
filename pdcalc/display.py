"""Tables as a chapter shows them: every row, numbers a reader can read, and the data to download.

:func:`table` turns a DataFrame into one HTML block:

- **no truncation**: every row and column is written (pandas' display limits do not apply);
- **numbers that read well**: integers with thousands separators; floats rounded by the precision
  policy (:mod:`pdcalc.precision`, :data:`~pdcalc.precision.SIG` significant figures by default) and
  printed with the decimals the column needs, thousands separators included, never in ``e+07``
  notation; whole-number floats as integers; missing values as an empty cell; booleans as yes/no;
- **no index** unless it means something (``index=True``, or a named index the caller keeps);
- **fits the column**: the table sits in a scroll container by design (``div.pdcalc-table``, horizontal
  scrolling inside the column), so a wide table never widens the page;
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

from pdcalc.precision import SIG, round_sig, tidy

#: Class of the scroll container every table sits in (the site checker accepts a wide table inside it).
SCROLL_CLASS = "pdcalc-table"


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


def format_column(s: pd.Series, sig: int = SIG) -> list[str]:
    """The cells of one column as text (see the module docstring)."""
    if pd.api.types.is_bool_dtype(s.dtype):
        return ["yes" if v else "no" for v in s]
    if pd.api.types.is_integer_dtype(s.dtype):
        return [f"{int(v):,}" for v in s]
    if pd.api.types.is_float_dtype(s.dtype):
        v = s.to_numpy(dtype=float)
        d = _decimals(v, sig)
        return ["" if not math.isfinite(x) else f"{x:,.{d}f}" for x in v]
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
               cell_html: dict[str, list[str]] | None = None, min_widths: dict[str, str] | None = None) -> str:
    """The HTML of :func:`table` (a string).

    ``row_ids`` gives each row an ``id`` (an anchor a link can point to); ``cell_html`` replaces the text
    of a column by ready HTML (e.g. a coloured verdict), one string per row; ``min_widths`` gives a column a
    CSS minimum width (a column of sentences that the browser would otherwise squeeze into a tall strip).
    """
    shown = tidy(df.reset_index() if index else df, sig)
    cols = list(shown.columns)
    texts = {c: format_column(shown[c], sig) for c in cols}
    numeric = {c: pd.api.types.is_numeric_dtype(shown[c].dtype) and not pd.api.types.is_bool_dtype(shown[c].dtype)
               for c in cols}
    parts = [f'<div class="{SCROLL_CLASS}" style="overflow-x:auto;max-width:100%">']
    parts.append('<table class="dataframe pdcalc">')
    if caption:
        parts.append(f"<caption>{html.escape(caption)}</caption>")
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


def tally(ids: list[str]) -> str:
    """One sentence: how many numbers, and how many of each verdict (errata by severity)."""
    from pdcalc import claims

    f = claims.frame(ids=ids)
    counts = f["verdict"].value_counts()
    parts = []
    if counts.get("erratum", 0):
        sev = f.loc[f["verdict"] == "erratum", "severity"].value_counts()
        detail = ", ".join(f"{int(sev[k])} {k}" for k in claims.SEVERITIES if sev.get(k, 0))
        parts.append(f"{int(counts['erratum'])} errata ({detail})")
    parts += [f"{int(counts[v])} {v}" for v in ("rounding", "match", "input", "pending") if counts.get(v, 0)]
    return f"{len(f):,} printed numbers: " + ", ".join(parts) + "."


def audit(ids: list[str], *, page: str | None = None, csv_name: str | None = None):
    """A chapter's audit of the articles' numbers ``ids``, as a reader needs it:

    - errata first, most severe first, then rounding slips, each row anchored (:func:`pdcalc.claims.anchor`)
      so other pages can link to it, its verdict coloured, its explanation on a line of its own under it (so
      the table fits the column);
    - a number whose verdict another page gives first (``page`` is this chapter's, see
      :func:`pdcalc.claims.homes`) points there instead of repeating the explanation;
    - the matches folded into a dropdown.
    """
    from IPython.display import HTML

    from pdcalc import claims

    t = claims.audit_table(ids=ids).reset_index()
    homes = claims.homes()
    section = {c.id: c.section for c in claims.claims()}
    why = []
    for cid, text in zip(t["id"], t["why"]):
        home = homes.get(cid)
        if page and home and home[0] != page:
            sec = section[home[1]]
            why.append(f'Judged in <a href="{home[0]}.html#{claims.anchor(home[1])}">'
                       f'{html.escape(home[0].replace("_", " "))} (§{html.escape(sec)})</a>.')
        else:
            why.append(html.escape(text or ""))
    t = t.assign(why_html=why)
    shown = t[t["verdict"].isin(["erratum", "rounding", "pending"])]
    folded = t[t["verdict"].isin(["match", "input"])]
    name = csv_name or (f"audit-{page}" if page else "audit")
    out = [f'<p class="pdcalc-tally">{html.escape(tally(ids))}</p>']
    if len(shown):
        out.append(_audit_table(shown, name + "-errata"))
    if len(folded):
        out.append(f"<details><summary>{len(folded):,} numbers that match their recomputation</summary>"
                   + _audit_table(folded.assign(why_html=""), name + "-matches") + "</details>")
    return HTML("".join(out))


#: The audit's columns: key in :func:`pdcalc.claims.audit_table` -> header.
_AUDIT_COLUMNS = {"section": "§", "quantity": "quantity", "article": "article prints", "recomputed": "recomputed",
                  "verdict": "verdict"}


def _audit_table(rows: pd.DataFrame, csv_name: str) -> str:
    """Audit rows as a table: one row per number, its explanation on a full-width line under it."""
    from pdcalc import claims

    cols = list(_AUDIT_COLUMNS)
    head = "".join(f'<th style="text-align:left">{html.escape(h)}</th>' for h in _AUDIT_COLUMNS.values())
    body = []
    for r in rows.to_dict("records"):
        cells = "".join(f'<td style="text-align:left">{html.escape(str(r[c]))}</td>' for c in cols[:-1])
        cells += f'<td style="text-align:left">{verdict_badge(r["verdict"], r["severity"])}</td>'
        body.append(f'<tr id="{claims.anchor(r["id"])}">{cells}</tr>')
        if r["why_html"]:
            body.append(f'<tr class="pdcalc-why"><td></td><td colspan="{len(cols) - 1}" '
                        f'style="text-align:left;font-size:0.92em">{r["why_html"]}</td></tr>')
    csv = rows[cols + ["why"]].rename(columns={**_AUDIT_COLUMNS, "why": "why"}).to_csv(index=False).encode("utf-8")
    name = slug(csv_name) + ".csv"
    href = "data:text/csv;charset=utf-8;base64," + base64.b64encode(csv).decode("ascii")
    return (f'<div class="{SCROLL_CLASS}" style="overflow-x:auto;max-width:100%"><table class="dataframe pdcalc">'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
            f'<p class="pdcalc-csv"><a download="{name}" href="{href}">download {name}</a></p></div>')


def inputs(sections: dict[str, tuple[str, ...]], *, csv_name: str = "inputs"):
    """The numbers an article takes as given in ``sections`` (:func:`pdcalc.claims.inputs_table`), folded."""
    from IPython.display import HTML

    from pdcalc import claims

    df = claims.inputs_table(sections).reset_index().rename(columns={"section": "§"})
    if df.empty:
        return HTML("<p>The article takes no number as given here.</p>")
    return HTML(f"<details><summary>{len(df):,} numbers the article takes as given</summary>"
                + table_html(df, numeric_right=False, csv_name=csv_name) + "</details>")
