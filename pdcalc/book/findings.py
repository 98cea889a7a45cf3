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


#: How the landing page and What to run name each article's model.
MODEL_NAMES = {"deepseek-v4-flash": "DeepSeek-V4-Flash", "deepseek-v3": "DeepSeek-V3"}


def cluster_text(rec) -> str:
    """An article's setting in a few words: model, cluster and prompt length."""
    from pdcalc.hardware.cards import get_card

    s = rec.setup
    name = MODEL_NAMES.get(str(s.model), str(s.model))
    return (f"{name}, {s.cards:,} x {get_card(s.card).label.split(' (')[0]}, prompts of "
            f"{rec.workload.prompt_tokens:,} tokens")


def answers_html(cases: dict) -> str:
    """What to run on each article's cluster, as the landing page opens with it: one short line per cluster
    (:func:`pdcalc.plan.objectives.headline`) over one table of both objectives for every cluster
    (:func:`pdcalc.plan.objectives.answers_table`), the targets and a link to What to run."""
    import pandas as pd

    from pdcalc.book.display import table_html
    from pdcalc.plan import objectives

    e = _html.escape
    lines, frames = [], []
    for key, rec in cases.items():
        if rec.plan is None:
            lines.append(f"<b>{e(cluster_text(rec))}:</b> {e(rec.headline())}.")
            continue
        line = objectives.headline(rec.plan, "the article's load")
        lines.append(f"<b>{e(cluster_text(rec))}:</b> {e(line[:1].upper() + line[1:])}.")
        frames.append(objectives.answers_table(rec.plan).assign(
            objective=lambda d, k=key: k.upper() + ", " + d["objective"]))
    tg = next((r.plan.targets for r in cases.values() if r.plan is not None), None)
    if tg is not None and tg.ttft_s and tg.tpot_s:
        lines.append(f"Targets: TTFT at most {objectives.seconds_text(tg.ttft_s)} and TPOT at most "
                     f"{1e3 * tg.tpot_s:g} ms ({e(tg.short_source('TTFT'))}). The flags, the per-card memory and what "
                     'limits each answer are in <a href="what_to_run.html">What to run</a>.')
    table = table_html(pd.concat(frames), caption="each article's cluster, both objectives (served model; likely: "
                                                  "the 80 % range)") if frames else ""
    return "<p>" + "<br>".join(lines) + "</p>" + table


def answer_html(rec) -> str:
    """One article's answer as :func:`answers_html` gives it (the landing page answers every article at once)."""
    return answers_html({str(rec.setup.model): rec})
