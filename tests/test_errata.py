import pytest

from pdcalc import claims, validation
from pdcalc.errata import ERRATA, errata_table


def test_errata_table_is_complete_and_from_the_registry():
    t = errata_table()
    assert list(t.index) == list(range(1, len(ERRATA) + 1))
    assert (t.astype(str).map(len) > 0).all().all()
    for e, (_, row) in zip(ERRATA, t.iterrows()):
        c = claims.get_claim(e.claim_id)
        assert row["printed"] == c.printed and row["section"] == c.section
        # the kind of mistake agrees with the audit: an arithmetic one fails it, a wrong premise passes it
        assert c.verdict == {"arithmetic": "erratum", "premise": "match", "input": "input"}[e.kind] or (
            e.kind == "input" and c.verdict == "erratum")


def test_articles_vs_measurements_ratios():
    df = validation.table()
    a = validation.articles_vs_measurements(df)
    for _, row in a.iterrows():
        assert row["article / measured"] == pytest.approx(row["article (GB)"] / row["measured (GB)"], rel=1e-12)
        assert row["pdcalc / measured"] == pytest.approx(row["pdcalc (GB)"] / row["measured (GB)"], rel=1e-12)
    v4 = a.iloc[0]
    assert v4["article (GB)"] == claims.printed_value("v4-6.2-p-weight-card")


def test_error_summary_covers_every_group():
    df = validation.table()
    s = validation.error_summary(df)
    assert set(s.index) == set(df.group)
    assert s["predictions"].sum() == len(df)
    for g, row in s.iterrows():
        r = df[df.group == g].ratio
        assert row["worst error (%)"] == pytest.approx(100 * (r - 1).abs().max(), rel=1e-12)
