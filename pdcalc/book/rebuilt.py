"""A rebuilt article table as a page shows it: printed numbers with their printed decimals, recomputed
ones with two more, verdicts coloured, laid out to fit the column.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from pdcalc.audit.registry import printed_decimals
from pdcalc.audit.v3_common import P
from pdcalc.audit.v3_tables import NOT_PRINTED, v3_claims, verdict_of


def _fmt(x, decimals: int | None = None) -> str:
    if isinstance(x, str):
        return x
    if isinstance(x, (bool, np.bool_)):
        return "yes" if x else "no"
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    x = float(x)
    if x.is_integer():
        return f"{x:,.0f}"
    if decimals is not None:
        return f"{x:,.{decimals}f}"
    a = abs(x)
    return f"{x:,.1f}" if a >= 100 else f"{x:.3f}" if a >= 1 else f"{x:.4g}"


def shown(df: pd.DataFrame) -> pd.DataFrame:
    """A rebuilt table as text: printed numbers with their printed decimals, recomputed ones with two more,
    empty cells as "—"."""
    out = df.map(_fmt).astype(object)
    for row, a, r, cid in df.attrs["cells"]:
        i = df.index.get_loc(row)
        d = printed_decimals(v3_claims()[cid].printed, P(cid))
        out.iat[i, df.columns.get_loc(a)] = f"{P(cid):,.{d}f}"
        if r is not None:
            out.iat[i, df.columns.get_loc(r)] = _fmt(df.iat[i, df.columns.get_loc(r)], min(d + 2, 6))
    return out


def styled(df: pd.DataFrame):
    """A rebuilt table for display: :func:`shown` with the caption from ``df.attrs`` (a pandas Styler
    with a fixed id, so that the page is the same on every run)."""
    out = (shown(df).style.set_caption(df.attrs["caption"]).set_uuid(df.attrs["id"])
           .set_table_attributes('class="dataframe"'))
    if isinstance(df.columns, pd.MultiIndex):    # article | recomputed pairs: a smaller font to fit the column
        out = out.set_table_styles([{"selector": "", "props": [("font-size", "0.85em")]}])
    return out


def _severity(ids: list[str]) -> str:
    """The most severe severity among the errata of ``ids`` ("" without an erratum)."""
    from pdcalc.audit.registry import SEVERITIES

    claims = v3_claims()
    sev = [claims[i].severity for i in ids if claims[i].verdict == "erratum"]
    return min(sev, key=list(SEVERITIES).index, default="")


def _label(key) -> str:
    if isinstance(key, tuple):
        return ", ".join(str(k) for k in key if str(k))
    return str(key)


def page_frame(df: pd.DataFrame, *, transpose: bool = False) -> tuple[pd.DataFrame, list[str]]:
    """A rebuilt table laid out to fit a page column, as text (:func:`shown`: printed numbers with their
    printed decimals, recomputed ones with two more, an empty cell where nothing is printed), and the
    severity of each row's verdict (for its colour).

    - a table of article | recomputed pairs (MultiIndex columns) becomes one row per printed quantity:
      the table's row label, the quantity, the article's value, the recomputation and that number's verdict;
    - ``transpose`` turns a table of one row per case into one row per quantity (for the tables that are
      not the article's, which judge nothing);
    - otherwise the rows stay as they are, the index as the first column(s).
    """
    text = shown(df).replace("—", "")
    names = [n or "" for n in df.index.names]
    if isinstance(df.columns, pd.MultiIndex):
        cell_ids = {(row, a): cid for row, a, r, cid in df.attrs["cells"]}
        rows, sev = [], []
        for key in df.index:
            for q in dict.fromkeys(c[0] for c in df.columns if c[0] != "verdict"):
                subs = [c[1] for c in df.columns if c[0] == q]
                if "article" in subs and "recomputed" in subs:
                    cid = cell_ids.get((key, (q, "article")))
                    rows.append({"row": key, "quantity": q, "article": text.loc[key, (q, "article")],
                                 "recomputed": text.loc[key, (q, "recomputed")],
                                 "verdict": verdict_of(cid) if cid else NOT_PRINTED})
                    sev.append(_severity([cid]) if cid else "")
                    continue
                flags = [text.loc[key, (q, s)] for s in subs]
                if len(subs) > 1 and all(f in ("yes", "no") for f in flags):   # several yes/no: one row
                    rows.append({"row": key, "quantity": q, "article": "",
                                 "recomputed": ", ".join(s for s, f in zip(subs, flags) if f == "yes") or "none",
                                 "verdict": ""})
                    sev.append("")
                    continue
                for s in subs:
                    cid = cell_ids.get((key, (q, s)))
                    side = "article" if s == "article" else "recomputed"
                    rows.append({"row": key, "quantity": q if s in ("", "article") else f"{q}: {s}",
                                 "article": text.loc[key, (q, s)] if side == "article" else "",
                                 "recomputed": text.loc[key, (q, s)] if side == "recomputed" else "",
                                 "verdict": verdict_of(cid) if cid else ("input" if side == "article" else "")})
                    sev.append(_severity([cid]) if cid else "")
        out = pd.DataFrame(rows)
        out.insert(0, _label(tuple(names)) or "row", [_label(k) for k in out.pop("row")])
        return out, sev
    if transpose:
        out = text.T
        out.columns = [_label(c) for c in out.columns]
        out.index.name = "quantity"
        return out.reset_index(), [""] * len(out)
    ids = {}
    for row, a, r, cid in df.attrs["cells"]:
        ids.setdefault(row, []).append(cid)
    sev = [_severity(ids.get(k, [])) for k in df.index]
    out = text.reset_index()
    if isinstance(df.index, pd.MultiIndex):
        out.columns = [_label(c) for c in out.columns]
    return out, sev


def page_table(df: pd.DataFrame, *, transpose: bool = False, csv_name: str | None = None):
    """A rebuilt table as a page shows it (:func:`pdcalc.book.display.table`): laid out by :func:`page_frame`
    to fit the column, numbers right-aligned as text so that each keeps the decimals it is printed with,
    verdicts coloured (an erratum with its severity), the caption from ``df.attrs`` (a reconstructed table
    says it is reconstructed, and from which sections) and a CSV of what is shown."""
    import html

    from pdcalc.book.display import table, verdict_badge

    out, sev = page_frame(df, transpose=transpose)
    numeric = re.compile(r"^-?[\d,]*\.?\d+$")
    cells = {}
    for col in out.columns:
        values = [str(v) for v in out[col]]
        if col == "verdict":
            cells[col] = [verdict_badge(v, s) if v in ("match", "rounding", "erratum", "input") else html.escape(v)
                          for v, s in zip(values, sev)]
        elif col != out.columns[0] and any(numeric.match(v) for v in values):   # numbers right-aligned, cell by cell
            cells[col] = [f'<span style="display:block;text-align:right">{html.escape(v)}</span>' if numeric.match(v)
                          else html.escape(v) for v in values]
    quotes = tuple(c for c in out.columns if str(c).startswith("article"))   # the article's digits, verbatim
    return table(out.astype(str), caption=df.attrs["caption"], csv_name=csv_name or df.attrs["id"], cell_html=cells,
                 quotes=quotes)
