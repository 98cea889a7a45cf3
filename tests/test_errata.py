import pytest

from pdcalc.audit import claims, registry, vs_measurements
from pdcalc.audit.errata import ERRATA, errata_table
from pdcalc.reality import validation


def test_errata_table_is_complete_and_from_the_registry():
    t = errata_table()
    assert list(t.index) == list(range(1, len(ERRATA) + 1))
    assert (t.astype(str).map(len) > 0).all().all()
    for e, (_, row) in zip(ERRATA, t.iterrows()):
        c = claims.get_claim(e.claim_id)
        assert row["printed"] == c.printed and row["section"] == c.section and row["id"] == c.id
        assert e.kind in ("arithmetic", "premise", "input")
        # every ranked mistake is an erratum of the registry, with the registry's severity
        assert c.verdict == "erratum", c.id
        assert row["severity"] == c.severity


def test_errata_ranking_follows_severity():
    """The most consequential mistakes are major, and the ranking never puts a lesser severity above a
    greater one."""
    scale = list(registry.SEVERITIES)
    ranks = [scale.index(claims.get_claim(e.claim_id).severity) for e in ERRATA]
    assert ranks == sorted(ranks)
    assert ranks[0] == scale.index("major")
    majors = {c.id for c in claims.claims() if c.verdict == "erratum" and c.severity == "major" and not c.same_as}
    ranked = {e.claim_id for e in ERRATA} | {claims.get_claim(e.claim_id).same_as for e in ERRATA}
    # the ranking names the article's headline mistakes; every one it names as major is major
    assert {"v3-2.3.3-per-card-total", "v4-6.3-b-total"} <= majors & ranked
    assert claims.get_claim("v4-6.1-kv-conservative").severity == "major"


def test_no_ranked_mistake_twice():
    """One quantity appears once in the ranking (a repeat counts as its first occurrence)."""
    firsts = [claims.get_claim(e.claim_id).same_as or e.claim_id for e in ERRATA]
    assert len(firsts) == len(set(firsts))


def test_articles_vs_measurements_ratios():
    df = validation.table()
    a = vs_measurements.articles_vs_measurements(df)
    for _, row in a.iterrows():
        assert row["article / measured"] == pytest.approx(row["article (GB)"] / row["measured (GB)"], rel=1e-12)
        assert row["pdcalc / measured"] == pytest.approx(row["pdcalc (GB)"] / row["measured (GB)"], rel=1e-12)
    v4 = a.iloc[0]
    assert v4["article (GB)"] == registry.printed_value("v4-6.2-p-weight-card")


def test_error_summary_covers_every_group():
    df = validation.table()
    s = validation.error_summary(df)
    assert set(s.index) == set(df.group)
    assert s["predictions"].sum() == len(df)
    for g, row in s.iterrows():
        r = df[df.group == g].ratio
        assert row["worst error (%)"] == pytest.approx(100 * (r - 1).abs().max(), rel=1e-12)
