import json
import subprocess
import sys

import pytest

from pdcalc.audit import claims, registry
from pdcalc.audit.registry import judge


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
        assert c.verdict in registry.VERDICTS
        if c.kind == "derived":
            assert c.formula, f"{c.id}: derived claim without the article's formula"


@pytest.mark.parametrize("article", list(registry.ARTICLES))
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
                "verdict", "severity", "severity_reason", "explanation", "same_as"):
        assert key in rows[0]
    by_id = {r["id"]: r for r in rows}
    for c in claims.claims():
        assert by_id[c.id]["verdict"] == c.verdict
        assert by_id[c.id]["severity"] == (c.severity if c.verdict == "erratum" else "")


def test_cli_claims_severity_filter():
    run = [sys.executable, "-m", "pdcalc.cli", "claims", "--json"]
    major = json.loads(subprocess.run(run + ["--severity", "major"], capture_output=True, text=True, check=True).stdout)
    assert major and {r["severity"] for r in major} == {"major"} and {r["verdict"] for r in major} == {"erratum"}
    assert len(major) == sum(c.verdict == "erratum" and c.severity == "major" for c in claims.claims())
    two = json.loads(subprocess.run(run + ["--severity", "major", "--severity", "cosmetic", "--article", "v3"],
                                    capture_output=True, text=True, check=True).stdout)
    assert {r["severity"] for r in two} == {"major", "cosmetic"} and {r["article"] for r in two} == {"v3"}
    bad = subprocess.run(run + ["--severity", "fatal"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


@pytest.mark.parametrize("article", ["v4", "v3"])
def test_every_number_is_in_a_chapter(article):
    """Each claim is recomputed by a chapter's audit module, or is an input of a section a chapter covers."""
    from pdcalc import audit
    from pdcalc.audit import architecture, budgets, mooncake, pd_split, per_card, v3_article

    mods = (architecture, budgets, mooncake, pd_split, per_card, v3_article)
    audited = {i for m in mods for i in claims.chapter_ids(m)}
    covered = [(a, s) for m in mods for a, secs in m.SECTIONS.items() for s in secs]
    assert len(covered) == len(set(covered)), "a section is claimed by two chapters"
    missing = [c.id for c in claims.claims(article)
               if c.id not in audited and not (c.verdict == "input" and (article, c.section) in covered)]
    assert missing == []
    assert audit.__name__ == "pdcalc.audit"


def test_chapter_ids_add_the_repeats_judged_in_the_chapters_sections():
    from pdcalc.audit import budgets

    ids = claims.chapter_ids(budgets)
    assert set(budgets.CLAIM_IDS) <= set(ids)
    # §6.2 prints the 44 KB again: judged by §6.1's recomputation, audited in the chapter that covers §6.2
    assert "v4-6.2-kv-per-token" not in budgets.CLAIM_IDS and "v4-6.2-kv-per-token" in ids
    order = [c.id for c in claims.claims("v4")]
    assert ids == sorted(ids, key=order.index)


# ---- one quantity, one verdict ------------------------------------------------------------------------
def _groups(cs):
    out = {}
    for c in cs:
        out.setdefault(c.same_as or c.id, []).append(c)
    return out


def test_one_printed_quantity_has_one_verdict():
    """A quantity printed again with the same value (``same_as`` in the data) has one verdict and one
    severity wherever it is printed."""
    groups = [g for g in _groups(claims.claims()).values() if len(g) > 1]
    assert len(groups) > 100
    for g in groups:
        assert len({c.verdict for c in g}) == 1, [(c.id, c.verdict) for c in g]
        assert len({(c.severity, c.severity_reason) for c in g}) == 1, [(c.id, c.severity) for c in g]
        assert len({(c.value, c.unit, c.article) for c in g}) == 1, [c.id for c in g]


@pytest.mark.parametrize("first,repeat,verdict", [
    ("v3-1.2-hbm-per-card", "v3-2.2.1-hbm-per-card", "erratum"),       # 59.6 GiB, wherever printed
    ("v3-2.2.2-dense-params", "v3-2.3.1-dense-params", "erratum"),      # 24.8B dense
    ("v4-abstract-card-hbm", "v4-6.2-card-hbm", "erratum"),             # the 64 "GB" card
    ("v4-1.2-kv-per-token", "v4-7.2-kv-per-token", "erratum"),          # 44 KB per token
    ("v4-1.3-wo-a", "v4-5.2.3-wo-a", "erratum"),                        # wo_a at half its size
    ("v3-2.2.3-dp3-throughput", "v3-2.2.8-peak-throughput-24", "rounding"),
])
def test_repeats_take_their_quantitys_verdict(first, repeat, verdict):
    a, b = claims.get_claim(first), claims.get_claim(repeat)
    assert b.same_as == first
    assert a.verdict == b.verdict == verdict
    assert a.recomputed == b.recomputed


def test_a_quantity_with_two_verdicts_is_a_defect():
    from dataclasses import replace

    from pdcalc.audit.registry import defects

    cs = claims.claims("v3")
    assert defects(cs) == []
    i = next(k for k, c in enumerate(cs) if c.id == "v3-2.2.3-hbm-per-card")
    broken = cs[:i] + [replace(cs[i], verdict="input", severity="", severity_reason="")] + cs[i + 1:]
    assert any("one quantity, two verdicts" in p and p.startswith("v3-2.2.3-hbm-per-card") for p in defects(broken))


@pytest.mark.parametrize("same_as,message", [
    ("v3-no-such-claim", "is not a claim"),
    ("v3-2.3.3-hbm-per-card", "earlier claim"),             # points forward
    ("v3-2.2.1-hbm-per-card", "itself a repeat"),            # points to a repeat, not the first
    ("v3-1.2-fp16-tflops-per-card", "but prints"),           # another value
])
def test_a_bad_same_as_is_a_defect(same_as, message):
    from dataclasses import replace

    from pdcalc.audit.registry import defects

    cs = claims.claims("v3")
    i = next(k for k, c in enumerate(cs) if c.id == "v3-2.2.2-hbm-per-card")
    broken = cs[:i] + [replace(cs[i], same_as=same_as)] + cs[i + 1:]
    assert any(message in p for p in defects(broken) if p.startswith("v3-2.2.2-hbm-per-card"))


def test_identical_quantities_are_declared_one():
    """Claims of one article that describe their quantity in the same words and print the same value in the
    same unit are one quantity: the data says so with ``same_as``."""
    seen = {}
    for c in claims.claims():
        key = (c.article, c.quantity.lower(), c.unit, c.value)
        seen.setdefault(key, set()).add(c.same_as or c.id)
    assert [k for k, firsts in seen.items() if len(firsts) > 1] == []


# ---- severity -------------------------------------------------------------------------------------------
def test_every_erratum_has_a_severity_on_the_scale():
    errata = [c for c in claims.claims() if c.verdict == "erratum"]
    assert errata
    for c in errata:
        assert c.severity in registry.SEVERITIES, c.id
        assert c.severity_reason, c.id
    for c in claims.claims():
        if c.verdict != "erratum":
            assert not c.severity or c.same_as, c.id


@pytest.mark.parametrize("severity,reason,message", [
    ("", "", "severity ''"),
    ("catastrophic", "a reason", "severity 'catastrophic'"),
    ("major", "", "without a reason"),
])
def test_an_erratum_without_a_valid_severity_is_a_defect(severity, reason, message):
    from dataclasses import replace

    from pdcalc.audit.registry import defects

    cs = claims.claims("v4")
    i = next(k for k, c in enumerate(cs) if c.id == "v4-6.3-a-kv")
    assert cs[i].verdict == "erratum"
    broken = cs[:i] + [replace(cs[i], severity=severity, severity_reason=reason)] + cs[i + 1:]
    assert any(message in p for p in defects(broken) if p.startswith("v4-6.3-a-kv"))


def test_a_severity_on_a_number_that_is_not_an_erratum_is_a_defect():
    from dataclasses import replace

    from pdcalc.audit.registry import defects

    cs = claims.claims("v4")
    i = next(k for k, c in enumerate(cs) if c.verdict == "match" and not c.same_as)
    broken = cs[:i] + [replace(cs[i], severity="minor", severity_reason="a reason")] + cs[i + 1:]
    assert any("stale severity" in p for p in defects(broken))


def test_frame_carries_severity_only_for_errata():
    df = claims.frame()
    assert {"severity", "severity_reason", "same_as"} <= set(df.columns)
    errata = df[df.verdict == "erratum"]
    assert errata.severity.isin(list(registry.SEVERITIES)).all() and (errata.severity_reason != "").all()
    assert (df[df.verdict != "erratum"].severity == "").all()


# ---- the chapter view -----------------------------------------------------------------------------------
def test_audit_table_leads_with_the_errata_by_severity():
    t = claims.audit_table(article="v4", sections=("6",))
    rank = {v: i for i, v in enumerate(registry.VERDICT_ORDER)}
    sev = {s: i for i, s in enumerate(registry.SEVERITIES)}
    keys = [(rank[v], sev[s] if v == "erratum" else 0) for v, s in zip(t.verdict, t.severity)]
    assert keys == sorted(keys)
    assert t.verdict.iloc[0] == "erratum" and t.severity.iloc[0] == "major"
    assert {"id", "severity"} <= set(t.columns)
    # within one verdict and severity the rows keep the article's order
    order = [c.id for c in claims.claims("v4")]
    for _, part in t.groupby([t.verdict, t.severity], sort=False):
        assert list(part.id) == sorted(part.id, key=order.index)
    # every claim of the sections, each once
    assert sorted(t.id) == sorted(claims.frame("v4", sections=("6",)).id)


def test_audit_table_leaves_the_recomputed_cell_of_an_input_empty():
    t = claims.audit_table(ids=["v4-6.2-batched-tokens", "v4-6.2-p-kv"])
    assert list(t.verdict) == ["erratum", "input"]
    assert t.recomputed.iloc[1] == "" and t.recomputed.iloc[0].endswith(" GB")
