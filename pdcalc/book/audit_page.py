"""The audit of the articles' numbers as a chapter shows it: errata first, by severity, coloured, each row
anchored; repeats linking to the page that judged them first; matches and inputs folded.

Built on :mod:`pdcalc.audit.claims` (the registry and its verdicts) and :mod:`pdcalc.book.display` (tables).
"""

from __future__ import annotations

import base64
import html

import pandas as pd

from pdcalc.audit import claims
from pdcalc.audit.registry import SEVERITIES
from pdcalc.book.display import QUOTE_CLASS, SCROLL_CLASS, slug, table_html, verdict_badge


def tally(ids: list[str]) -> str:
    """One sentence: how many numbers, and how many of each verdict (errata by severity)."""
    f = claims.frame(ids=ids)
    counts = f["verdict"].value_counts()
    parts = []
    if counts.get("erratum", 0):
        sev = f.loc[f["verdict"] == "erratum", "severity"].value_counts()
        detail = ", ".join(f"{int(sev[k])} {k}" for k in SEVERITIES if sev.get(k, 0))
        parts.append(f"{int(counts['erratum'])} errata ({detail})")
    parts += [f"{int(counts[v])} {v}" for v in ("rounding", "match", "input", "pending") if counts.get(v, 0)]
    return f"{len(f):,} printed numbers: " + ", ".join(parts) + "."


def audit(ids: list[str], *, page: str | None = None, csv_name: str | None = None):
    """A chapter's audit of the articles' numbers ``ids``, as a reader needs it:

    - errata first, most severe first, then rounding slips, each row anchored (:func:`pdcalc.audit.claims.anchor`)
      so other pages can link to it, its verdict coloured, its explanation on a line of its own under it (so
      the table fits the column);
    - a number whose verdict another page gives first (``page`` is this chapter's, see
      :func:`pdcalc.audit.claims.homes`) points there instead of repeating the explanation;
    - the matches folded into a dropdown.
    """
    from IPython.display import HTML

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


#: The audit's columns: key in :func:`pdcalc.audit.claims.audit_table` -> header.
_AUDIT_COLUMNS = {"section": "§", "quantity": "quantity", "article": "article prints", "recomputed": "recomputed",
                  "verdict": "verdict"}


def _cell(col: str, value) -> str:
    """An audit cell: the article's printed text marked as a verbatim quote (its digits are the article's)."""
    text = html.escape(str(value))
    return f'<span class="{QUOTE_CLASS}">{text}</span>' if col == "article" and text else text


def _audit_table(rows: pd.DataFrame, csv_name: str) -> str:
    """Audit rows as a table: one row per number, its explanation on a full-width line under it."""
    cols = list(_AUDIT_COLUMNS)
    head = "".join(f'<th style="text-align:left">{html.escape(h)}</th>' for h in _AUDIT_COLUMNS.values())
    body = []
    for r in rows.to_dict("records"):
        cells = "".join(f'<td style="text-align:left">{_cell(c, r[c])}</td>' for c in cols[:-1])
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
    """The numbers an article takes as given in ``sections`` (:func:`pdcalc.audit.claims.inputs_table`), folded."""
    from IPython.display import HTML

    df = claims.inputs_table(sections).reset_index().rename(columns={"section": "§"})
    if df.empty:
        return HTML("<p>The article takes no number as given here.</p>")
    return HTML(f"<details><summary>{len(df):,} numbers the article takes as given</summary>"
                + table_html(df, numeric_right=False, csv_name=csv_name) + "</details>")
