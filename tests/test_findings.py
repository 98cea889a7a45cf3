"""The landing page's findings: built from the registry, each linking to an audit row that exists."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pdcalc.audit import claims, findings
from pdcalc.book import findings as findings_

BOOK = Path(__file__).resolve().parent.parent / "book"


@pytest.mark.parametrize("article", ["v4", "v3"])
def test_five_to_eight_findings_per_article_all_errata(article):
    fs = findings.findings(article)
    assert 5 <= len(fs) <= 8
    assert len({f.claim_id for f in fs}) == len(fs)
    for f in fs:
        c = claims.get_claim(f.claim_id)
        assert c.article == article and c.verdict == "erratum" and f.severity == c.severity
        assert f.says == c.printed and f.own_inputs and f.real and f.changes
        assert f.page == claims.pages()[f.claim_id] and f.anchor == claims.anchor(f.claim_id)


def _outputs(page: str) -> str:
    nb = json.loads((BOOK / f"{page}.ipynb").read_text(encoding="utf-8"))
    return "".join("".join(v) if isinstance(v, list) else str(v)
                   for c in nb["cells"] for o in c.get("outputs", []) for v in o.get("data", {}).values())


@pytest.mark.parametrize("article", ["v4", "v3"])
def test_every_finding_links_to_a_row_its_page_shows(article):
    for f in findings.findings(article):
        assert f'id="{f.anchor}"' in _outputs(f.page), f"{f.page} shows no row {f.anchor} ({f.claim_id})"


def test_the_landing_page_leads_with_the_findings():
    html = _outputs("intro")
    links = re.findall(r'<a href="([a-z_0-9]+)\.html#(claim-[a-z0-9-]+)">', html)
    assert len(links) >= 6
    assert {(f.page, f.anchor) for a in ("v4", "v3") for f in findings.findings(a)} <= set(links)
    assert html.count('href="what_to_run.html"') == 1  # the answers, above the findings


def test_the_landing_page_opens_with_both_answers_for_each_cluster():
    """One short line per cluster over one table of both objectives: each answer's layout and output in all, or
    that nothing meets the targets; the same table What to run shows."""
    from pdcalc.audit.answers import article_cases
    from pdcalc.plan import objectives

    cases = article_cases()
    h = findings_.answers_html(cases)
    assert h.count('href="what_to_run.html"') == 1
    for rec in cases.values():
        assert findings_.cluster_text(rec) in h
        table = objectives.answers_table(rec.plan)
        in_all = next(c for c in table.columns if c.startswith("tokens/s in all"))
        for _, row in table.iterrows():
            assert row["layout"] in h
            if row["layout"] != "nothing meets the targets":
                assert str(row[in_all]) in h and " to " in str(row[in_all])
    intro = _outputs("intro")
    assert intro.index("each article&#x27;s cluster, both objectives") < intro.index('class="pdcalc-findings"')
