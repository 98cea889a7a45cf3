"""The findings of each article as the landing page shows them: an HTML list linking each to its
audit row, and the recommendation paragraph.
"""

from __future__ import annotations

import html as _html

from pdcalc.audit.findings import findings


def html(article: str) -> str:
    """The findings of ``article`` as an HTML list, each linking to its audit row."""
    from pdcalc.book.display import verdict_badge

    items = []
    for f in findings(article):
        e = _html.escape
        link = f'<a href="{e(f.page)}.html#{e(f.anchor)}">§{e(f.section)}</a>' if f.page else f"§{e(f.section)}"
        items.append(
            f"<li><p><b>{e(f.quantity[:1].upper() + f.quantity[1:])}</b> ({link}) {verdict_badge('erratum', f.severity)}"
            f"<br>The article says <b>{e(f.says)}</b>. Its own inputs: {e(f.own_inputs)}. "
            f"As it really is: <b>{e(f.real)}</b>.<br>{e(f.changes)}</p></li>")
    return '<ol class="pdcalc-findings">' + "".join(items) + "</ol>"


def answer_html(rec) -> str:
    """The answer for an article's setting (:func:`pdcalc.audit.answers.article_cases`) to both objectives
    (:mod:`pdcalc.plan.objectives`): the most output from the whole cluster, and the fewest cards for the
    article's load; as a paragraph that links to the "what to run" chapter."""
    from pdcalc.book.display import table_html
    from pdcalc.plan import objectives

    e = _html.escape
    if rec.plan is None:
        text, table = e(rec.headline()[:1].upper() + rec.headline()[1:]) + ".", ""
    else:
        line = objectives.headline(rec.plan, "the article's load")
        text = e(line[:1].upper() + line[1:]) + "."
        table = table_html(objectives.answers_table(rec.plan),
                           caption="both objectives on the article's cluster (served model; likely: the 80 % range)")
    return (f"<p><b>What to run instead.</b> {text} The flags, the per-card memory and what limits each answer are "
            f'in <a href="what_to_run.html">What to run</a>.</p>' + table)
