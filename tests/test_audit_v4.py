"""The V4 article's §6-§8 recomputations: the diagnoses in the explanations hold."""

import pytest

from pdcalc.audit import budgets, claims, mooncake, pd_split
from pdcalc.audit.registry import judge, printed_value
from pdcalc.core.units import GB
from pdcalc.model.kv_cache import article_kv_bytes


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


# ---- the 44 KB per token, judged against what the engine stores -------------------------------------------
KV_44 = ("v4-1.2-kv-per-token", "v4-6.1-kv-conservative", "v4-6.2-kv-per-token", "v4-6.3-kv-per-token",
         "v4-7.2-kv-per-token", "v4-8.2-kv-per-token")


def test_44_kb_per_token_is_one_erratum_wherever_printed():
    from pdcalc.model.kv_cache import kv_bytes

    slope = kv_bytes("deepseek-v4-flash", 1, "vllm-ascend").per_token_bytes_asymptotic
    cs = [claims.get_claim(i) for i in KV_44]
    assert {c.value for c in cs} == {44}
    for c in cs:
        assert c.verdict == "erratum" and c.severity == "major", c.id
        assert c.recomputed == pytest.approx(slope / 1000, rel=1e-12)    # KB of 1000 B, as the article scales them
    # every repeat names the first occurrence (§1.2)
    assert {c.same_as for c in cs[1:]} == {KV_44[0]}


@pytest.mark.parametrize("where,tokens", list(budgets.article_contexts().items()))
def test_44_kb_explanation_gives_the_average_at_each_context_the_article_uses(where, tokens):
    from pdcalc.model.kv_cache import kv_bytes

    avg = kv_bytes("deepseek-v4-flash", tokens, "vllm-ascend").per_token_bytes_average / 1000
    text = claims.get_claim("v4-6.1-kv-conservative").explanation
    assert f"{avg:.2f} KB at {tokens:,} tokens ({where})" in text
    # the average never comes near the article's figure at any context it uses
    assert avg < printed_value("v4-6.1-kv-conservative") / 2


def test_44_kb_is_the_uncompressed_bound():
    """43 layers x 1,024 B (one raw BF16 entry of 512 values) = 44.0 KB: the article's estimate is what a cache
    without the compression would store."""
    from pdcalc.model.config import load_config

    c = load_config("deepseek-v4-flash")
    assert c.num_hidden_layers * c.head_dim * 2 / 1000 == pytest.approx(printed_value("v4-6.1-kv-conservative"),
                                                                          abs=0.05)


def test_p_card_kv_keeps_a_whole_prompt():
    """§6.2's 0.2 GB is one batch of 4,096 tokens; a P card prefilling a max-model-len prompt in chunks holds
    the whole prompt's cache (at the article's own 44 KB per token)."""
    ctx = printed_value("v4-6.2-max-model-len")
    whole = article_kv_bytes(ctx, budgets.kb_per_token()) / GB
    batch = article_kv_bytes(printed_value("v4-6.2-batched-tokens"), budgets.kb_per_token()) / GB
    assert judge("0.2 GB", 0.2, batch)[0] == "match"                    # the arithmetic holds
    for i in ("v4-6.2-p-kv", "v4-6.4-p-kv", "v4-6.5-p-kv", "v4-8.1-p-kv"):
        c = claims.get_claim(i)
        assert c.recomputed == pytest.approx(whole, rel=1e-12) and c.verdict == "erratum", i
    mb = claims.get_claim("v4-6.2-p-kv-mb")
    assert mb.recomputed == pytest.approx(whole * 1000, rel=1e-12) and mb.verdict == "erratum"
    assert mb.severity == claims.get_claim("v4-6.2-p-kv").severity


@pytest.mark.parametrize("tensor", ["wo-a", "wo-b", "wkv-b"])
def test_a_tensor_printed_three_times_has_one_verdict(tensor):
    """§1.3 prints the shape, §1.4 and §5.2.3 the count: the same tensor, judged against the official block."""
    cs = [claims.get_claim(f"v4-{s}-{tensor}") for s in ("1.3", "1.4", "5.2.3")]
    assert {c.verdict for c in cs} == {"erratum"}
    assert len({c.recomputed for c in cs}) == 1
