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
    """The recommendation for an article's setting (:func:`pdcalc.audit.answers.article_cases`), as a paragraph that
    links to the "what to run" chapter."""
    text, trade = rec.headline(), rec.trade_off()
    if rec.published_issue:  # said once, in the headline
        trade = trade.replace(f" The article's deployment {rec.published_issue}.", "")
    return (f"<p><b>What to run instead.</b> {_html.escape(text[:1].upper() + text[1:])}. {_html.escape(trade)} "
            f'The flags, the per-card memory and what limits the split are in <a href="what_to_run.html">What to '
            f"run</a>.</p>")
