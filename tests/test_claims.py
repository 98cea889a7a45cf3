import json
import subprocess
import sys

import pytest

from pdcalc import claims
from pdcalc.claims import judge


@pytest.mark.parametrize("printed,value,recomputed,verdict", [
    ("34.63 GB", 34.63, 34.6282, "match"),           # rounds to the printed digits
    ("34.63 GB", 34.63, 34.6249, "rounding"),         # one unit in the last digit
    ("5.90 GB", 5.9, 5.8951, "match"),                # trailing zero counts as a digit
    ("5.90 GB", 5.9, 5.891, "rounding"),
    ("~5.9 GB", 5.9, 5.84, "rounding"),               # one unit in the last digit
    ("~5.9 GB", 5.9, 5.35, "erratum"),                # "~" does not widen the tolerance
    ("~280GB", 280, 284.3, "match"),                  # trailing zeros are not significant
    ("3,170M", 3170, 3167.55, "match"),
    ("~0.2B", 0.2, 0.055, "erratum"),                 # approximate, but 4x off
    ("1 KB", 1, 0.128, "erratum"),                    # within one unit of "1", but 8x off
    ("~2 KB/token", 2, 1.024, "erratum"),
    ("25,165,824", 25165824, 25165824, "match"),
    ("277,071,310,848", 277071310848, 277025390592, "erratum"),
    ("<0.02 GB", 0.02, 0.0054, "match"),              # a bound that holds
    ("<0.02 GB", 0.02, 0.035, "erratum"),
    ("21~42 GB", (21, 42), (21.1, 42.2), "match"),
    ("21~42 GB", (21, 42), (21.1, 45.0), "erratum"),
    ("数百GB", (100, 999), 178.2, "match"),             # one number inside a printed range
    ("数百GB", (100, 999), 42.0, "erratum"),
])
def test_judge(printed, value, recomputed, verdict):
    assert judge(printed, value, recomputed)[0] == verdict


@pytest.mark.parametrize("printed,unit,recomputed,verdict", [
    ("Expert 10(Card 1)", "count", 0, "erratum"),     # a card index is exact
    ("6份", "count", 5, "erratum"),
    ("8个", "experts", 8, "match"),
    ("~13B", "B params", 13.27, "match"),             # not an exact unit
])
def test_exact_units(printed, unit, recomputed, verdict):
    value = 1 if "Card 1" in printed else int("".join(ch for ch in printed if ch.isdigit()) or 0) or 13
    assert judge(printed, value, recomputed, unit)[0] == verdict


def test_judge_delta_sign():
    assert judge("10 GB", 10, 12)[1] == pytest.approx(2)
    assert judge("数百GB", (100, 999), 42.0)[1] == pytest.approx(-58)   # distance below the range
    assert judge("数百GB", (100, 999), 178.2)[1] == 0


def test_judge_range_length_mismatch():
    with pytest.raises(TypeError, match="same length"):
        judge("21~42 GB", (21, 42), (21.1, 42.2, 50.0))


def test_every_claim_has_required_fields_and_unique_id():
    cs = claims.claims()
    assert cs, "the registry is empty"
    ids = [c.id for c in cs]
    assert len(ids) == len(set(ids))
    for c in cs:
        assert c.section and c.quantity and c.printed and c.unit and c.kind in ("input", "derived"), c.id
        assert c.verdict in claims.VERDICTS
        if c.kind == "derived":
            assert c.formula, f"{c.id}: derived claim without the article's formula"


@pytest.mark.parametrize("article", list(claims.ARTICLES))
def test_both_articles_extracted(article):
    assert len(claims.claims(article)) > 50


def test_no_unexplained_errata_and_no_stale_explanations():
    assert claims.problems() == []


def test_recomputed_claims_have_a_method():
    for c in claims.claims():
        if c.recomputed is not None:
            assert c.method, c.id


def test_cli_claims_json_contract():
    out = subprocess.run([sys.executable, "-m", "pdcalc.cli", "claims", "--json"], capture_output=True, text=True,
                         check=True).stdout
    rows = json.loads(out)
    assert len(rows) == len(claims.claims())
    for key in ("id", "article", "section", "quantity", "article_value", "article_unit", "recomputed_value",
                "verdict", "explanation"):
        assert key in rows[0]


@pytest.mark.parametrize("article", ["v4", "v3"])
def test_every_number_is_in_a_chapter(article):
    """Each claim is recomputed by a chapter's audit module, or is an input of a section a chapter covers."""
    from pdcalc import audit
    from pdcalc.audit import architecture, budgets, mooncake, pd_split, per_card, v3_deploy

    mods = (architecture, budgets, mooncake, pd_split, per_card, v3_deploy)
    recomputed = {i for m in mods for i in m.CLAIM_IDS}
    covered = [(a, s) for m in mods for a, secs in m.SECTIONS.items() for s in secs]
    assert len(covered) == len(set(covered)), "a section is claimed by two chapters"
    missing = [c.id for c in claims.claims(article)
               if c.id not in recomputed and not (c.verdict == "input" and (article, c.section) in covered)]
    assert missing == []
    assert audit.__name__ == "pdcalc.audit"
