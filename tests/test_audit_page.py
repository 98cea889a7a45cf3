import re

from pdcalc.core.precision import too_precise


def test_audit_leads_with_errata_anchors_rows_and_folds_matches():
    from pdcalc.audit import claims, per_card, registry
    from pdcalc.book.audit_page import audit

    ids = claims.chapter_ids(per_card)
    h = audit(ids, page="per_card").data
    head, _, folded = h.partition("<details>")
    f = claims.frame(ids=ids)
    shown = f[f.verdict.isin(["erratum", "rounding"])]
    assert all(f'id="{claims.anchor(c)}"' in head for c in shown["id"])
    assert all(f'id="{claims.anchor(c)}"' in folded for c in f.loc[f.verdict == "match", "id"])
    assert "match</span>" not in head
    first_verdicts = re.findall(r'class="pdcalc-verdict"[^>]*>([^<]+)<', head)
    worst = next(k for k in registry.SEVERITIES if (f.severity == k).any())
    assert first_verdicts[0] == f"erratum · {worst}"  # the most severe first
    assert f"{len(f):,} printed numbers" in h and too_precise(h) == []


def test_audit_points_to_the_page_that_first_judged_a_repeat():
    from pdcalc.audit import claims
    from pdcalc.book.audit_page import audit

    ids = claims.chapter_ids(pd_split_module())
    homes = claims.homes()
    order = [p for _, p in claims.CHAPTER_PAGES]
    h = audit(ids, page="pd_split").data
    verdict = {c.id: c.verdict for c in claims.claims()}
    elsewhere = [c for c in ids if homes[c][0] != "pd_split" and verdict[c] in ("erratum", "rounding")]
    assert elsewhere, "pd_split repeats verdicts given in earlier chapters"
    for c in elsewhere:
        page, row = homes[c]
        assert f'href="{page}.html#{claims.anchor(row)}"' in h
        assert order.index(page) < order.index("pd_split")  # a repeat points back, never forward
    assert h.count('class="pdcalc-why"') >= len(elsewhere)  # explanations on a line of their own


def pd_split_module():
    from pdcalc.audit import pd_split

    return pd_split
