"""The V4 article's §6-§8 recomputations: the diagnoses in the explanations hold."""

import pytest

from pdcalc import claims
from pdcalc.audit import budgets, mooncake, pd_split
from pdcalc.claims import judge, printed_value
from pdcalc.kv_cache import article_kv_bytes
from pdcalc.units import GB


def test_no_v4_claim_pending_and_no_problems():
    assert claims.problems() == []
    assert [c.id for c in claims.claims("v4") if c.verdict == "pending"] == []


@pytest.mark.parametrize("name", "ABCD")
def test_scenario_kv_printed_with_k_as_1000_tokens(name):
    """Each printed scenario KV is reproduced exactly by reading "K" as 1000 tokens (the diagnosis)."""
    s = budgets.scenarios()[name]
    as_1000 = s.seqs * article_kv_bytes(s.context_tokens // 1024 * 1000, budgets.kb_per_token()) / GB
    printed = printed_value(s.printed_kv_id)
    assert judge(f"{printed} GB", printed, as_1000)[0] == "match"
    assert judge(f"{printed} GB", printed, budgets.scenario_kv_gb(name))[0] == "erratum"


def test_transfer_128k_printed_with_k_as_1000_tokens():
    k = printed_value("v4-7.2-ctx-128k") // 1024
    gb = mooncake.article_transfer_bytes(k * 1000) / GB
    assert judge("5.6 GB", printed_value("v4-7.2-kv-transfer-128k"), gb)[0] == "match"


def test_article_p_plan_parts_are_its_inputs():
    p = budgets.p_plan()
    assert p.parts["activations"] == printed_value("v4-6.2-p-act") * GB
    assert p.parts["framework"] == printed_value("v4-6.2-p-framework") * GB
    assert p.usable_bytes == pytest.approx(printed_value("v4-6.2-card-hbm") * printed_value("v4-6.2-mem-util") * GB)
    assert p.total_bytes == pytest.approx(sum(p.parts.values()))


def test_scenario_b_is_over_budget_on_its_own_inputs():
    assert not budgets.d_plan("B").fits
    assert budgets.d_plan("A").fits


def test_every_module_lists_its_claims():
    for mod in (budgets, mooncake, pd_split):
        assert mod.CLAIM_IDS and all(i.startswith("v4-") for i in mod.CLAIM_IDS)
