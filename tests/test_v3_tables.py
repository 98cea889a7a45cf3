"""The V3 article's tables as rebuilt by pdcalc.audit.v3_tables: every printed cell is the registry's printed
value, every recomputed cell the registered recomputation, and each lost table says it is reconstructed."""

import math

import pandas as pd
import pytest

from pdcalc.audit import claims, v3_article, v3_memory, v3_tp
from pdcalc.audit import registry as registry_
from pdcalc.audit import registry as registry__
from pdcalc.audit import v3_tables as v3
from pdcalc.book import rebuilt
from pdcalc.core.units import GB, GiB, MiB, TiB
from pdcalc.hardware.cards import get_card
from pdcalc.model.config import load_config

P = registry_.printed_value
CFG = load_config("deepseek-v3")
RECONSTRUCTED = {"tp_comparison", "replicas", "card_options", "expert_tiers", "per_card", "storage_plan"}
CONSISTENT = {"kv_units", "tp_same_basis"}
PRINTED = set(v3.TABLES) - RECONSTRUCTED - CONSISTENT
REL = 1e-12   # recomputed cells are the registry's own floats: equal up to float noise


@pytest.fixture(scope="module")
def tables():
    return {name: fn() for name, fn in v3.TABLES.items()}


@pytest.fixture(scope="module")
def registry():
    return {c.id: c for c in claims.claims("v3")}


def _verdict_col(df):
    return ("verdict", "") if isinstance(df.columns, pd.MultiIndex) else "verdict"


# ------------------------------------------------------------------ provenance
@pytest.mark.parametrize("name", sorted(v3.TABLES))
def test_every_table_states_its_provenance(tables, name):
    df = tables[name]
    kind = "reconstructed" if name in RECONSTRUCTED else "consistent" if name in CONSISTENT else "printed"
    assert df.attrs["kind"] == kind
    assert df.attrs["reconstructed"] is (kind == "reconstructed")
    cap = df.attrs["caption"]
    assert ("Reconstructed from the prose of §" in cap) is (kind == "reconstructed")
    assert ("Not a table of the article" in cap) is (kind == "consistent")
    assert ("As printed in §" in cap) is (kind == "printed")
    assert df.attrs["section"] in v3_article.SECTIONS["v3"]


@pytest.mark.parametrize("name", sorted(RECONSTRUCTED))
def test_the_styled_reconstructed_tables_carry_the_mark(tables, name):
    html = rebuilt.styled(tables[name]).to_html()
    assert "Reconstructed from the prose of §" in html
    assert f'id="T_{tables[name].attrs["id"]}"' in html


def test_table_ids_are_unique(tables):
    ids = [df.attrs["id"] for df in tables.values()]
    assert len(ids) == len(set(ids))


# ------------------------------------------------------------------ printed and recomputed cells
@pytest.mark.parametrize("name", sorted(set(v3.TABLES) - CONSISTENT))
def test_printed_cells_are_the_registry_values(tables, registry, name):
    df = tables[name]
    assert df.attrs["cells"], name
    for row, a, r, cid in df.attrs["cells"]:
        assert cid in registry, cid
        assert df.loc[row, a] == float(P(cid)), (name, row, cid)


@pytest.mark.parametrize("name", sorted(set(v3.TABLES) - CONSISTENT))
def test_recomputed_cells_are_the_registered_recomputations(tables, registry, name):
    df = tables[name]
    for row, a, r, cid in df.attrs["cells"]:
        if r is None:
            # shown as printed only: an input, or a repeat judged where its quantity is first printed
            assert registry[cid].verdict == "input" or registry[cid].same_as, cid
            continue
        c = registry[cid]
        expected = float(P(cid)) if c.recomputed is None else float(c.recomputed)
        assert df.loc[row, r] == pytest.approx(expected, rel=REL, abs=1e-12), (name, row, cid)


@pytest.mark.parametrize("name", sorted(set(v3.TABLES) - CONSISTENT))
def test_row_verdict_is_the_worst_of_its_claims(tables, registry, name):
    df = tables[name]
    rank = ("input", "match", "rounding", "erratum")
    by_row: dict = {}
    for row, _, _, cid in df.attrs["cells"]:
        by_row.setdefault(row, []).append(registry[cid].verdict)
    for row in df.index:
        got = df.loc[row, _verdict_col(df)]
        want = max(by_row[row], key=rank.index) if row in by_row else v3.NOT_PRINTED
        assert got == want, (name, row)


@pytest.mark.parametrize("name", sorted(CONSISTENT))
def test_consistent_tables_print_nothing_and_judge_nothing(tables, name):
    df = tables[name]
    assert df.attrs["cells"] == []
    assert "verdict" not in df.columns


def test_shown_keeps_the_printed_decimals(tables):
    kv = rebuilt.shown(tables["kv_requirement"])
    assert kv.loc["MLA KV per token", "article"] == "0.070"           # not 0.07
    assert kv.loc["compression ratio", "article"] == "23.8"
    tp = rebuilt.shown(tables["tp_comparison"])
    assert tp.loc[16, ("all-reduce (ms)", "article")] == "49.0"
    assert tp.loc[4, ("communication share (%)", "article")] == "—"   # not printed for TP=4


def test_printed_values_for_glue():
    pv = v3.printed_values()
    assert pv["a_2_3_1_kv_mla_per_token"] == "0.070"
    assert pv["a_2_2_2_comm_bytes_per_layer"] == "2,348,810,240"
    assert pv["a_2_2_2_overlap_rate_range_lo"] == "70" and pv["a_2_2_2_overlap_rate_range_hi"] == "80"
    in_sections = [c for c in claims.claims("v3") if c.section in v3_article.SECTIONS["v3"]]
    assert len(pv) == sum(2 if isinstance(c.value, tuple) else 1 for c in in_sections)


# ------------------------------------------------------------------ the consistent-basis numbers, by hand
def test_kv_units_locate_the_printed_figures(tables):
    df = tables["kv_units"]
    trad, latent, mla = df.index
    assert df["per token (B)"].tolist() == [2 * 7168 * 61 * 2, 512 * 61 * 2, (512 + 64) * 61 * 2]
    col = f"{128 * 1024:,} tokens (GiB)"
    assert df.loc[trad, col] == pytest.approx(P("v3-1.2.2-kv-traditional-128k"), abs=0.05)   # 213.5 is GiB
    assert df.loc[latent, col] == pytest.approx(P("v3-1.2.2-kv-mla-128k"), abs=0.05)         # 7.6 is the latent
    assert df.loc[mla, "per token (MB)"] == pytest.approx(P("v3-2.3.1-kv-mla-per-token"), abs=5e-4)  # 0.070 is MB
    assert df.loc[mla, "per token (MiB)"] == pytest.approx(70_272 / 2**20, rel=REL)


def test_tp_same_basis_ratio_does_not_depend_on_tokens(tables):
    df = tables["tp_same_basis"]
    for tp in v3.TP_DEGREES:
        r80 = v3.allreduce_ms(tp, 80) / v3.compute_ms(80)
        r_big = v3.allreduce_ms(tp, 80 * 2048) / v3.compute_ms(80 * 2048)
        assert r80 == pytest.approx(r_big, rel=1e-12)
        assert df.loc[tp, "same tokens: all-reduce / compute (x)"] == pytest.approx(r_big, rel=REL)
        assert df.loc[tp, "same tokens: communication share (%)"] == pytest.approx(v3_tp.matched_comm_share(tp), rel=REL)
        assert 20 < df.loc[tp, "same tokens: communication share (%)"] < 30      # a quarter, not 99.9%
        assert df.loc[tp, "article's basis: all-reduce / compute (x)"] > 600


def test_tp_share_without_a_printed_value_uses_the_printed_times(tables):
    df = tables["tp_comparison"]
    assert math.isnan(df.loc[4, ("communication share (%)", "article")])
    assert df.loc[4, ("communication share (%)", "recomputed")] == pytest.approx(39.3 / (39.3 + 0.0645) * 100, rel=1e-12)


def test_tp_chart_rows_match_the_same_basis_table(tables):
    rows = v3.tp_chart_rows()
    assert len(rows) == 4 * len(v3.TP_DEGREES)
    df = tables["tp_same_basis"]
    got = rows[rows.series == "compute, 163,840 tokens"].set_index("tp")["ms"]
    assert got.tolist() == pytest.approx(df["compute, 163,840 tokens (ms)"].tolist(), rel=REL)


def test_replicas_expected_throughput_and_the_target(tables):
    df = tables["replicas"]
    q = ("expected, 40% MFU (tokens/s)", "recomputed")
    for n in (1, 2):
        assert df.loc[n, q] == pytest.approx(n * 1203.2e12 / 74e9, rel=1e-12)
    met = "meets 50,000 tokens/s"
    assert df.loc[3, (met, "peak")] and not df.loc[3, (met, "expected")]     # 3 replicas: only at the peak
    assert df[(met, "expected")].tolist() == [False, False, False, True]
    assert df.loc[2, ("cards", "recomputed")] == 16 and math.isnan(df.loc[2, ("cards", "article")])


def test_card_options_latency_against_throughput(tables):
    df = tables["card_options"]
    col = ("80 users at the latency target (tokens/s)", "")
    assert df[col].tolist() == pytest.approx([80 / 10.5e-3, 80 / 7.9e-3], rel=1e-12)
    assert (df[("verdict", "")] == "erratum").all()
    assert v3.headroom_24_pct() == pytest.approx((48_778 / 50_000 - 1) * 100, rel=1e-12)


def test_resource_baselines_checks(tables):
    df = tables["resource_baselines"]
    assert df.loc["availability", "the article's own plan"] == pytest.approx(720 / 720.5 * 100, rel=1e-12)
    assert df.loc["availability", "consistent"] == "yes"
    assert df.loc["memory utilisation", "consistent"] == "no"
    assert df.loc["network bandwidth utilisation", "the article's own plan"] == pytest.approx(
        v3.comm_share_pct(8) * 0.8, rel=1e-12)
    assert (df["verdict"] == "input").all()


def test_kv_requirement_exact_columns(tables):
    df = tables["kv_requirement"]
    exact = "exact, from bytes"
    assert df.loc["MLA KV per user (2,048 tokens)", exact] == pytest.approx(70_272 * 2048 / GiB, rel=REL)
    assert df.loc["MLA KV, 80 users", exact] == pytest.approx(80 * 70_272 * 2048 / GiB, rel=REL)
    assert df.loc["compression ratio", exact] == pytest.approx(1_748_992 / 70_272, rel=REL)
    assert df.loc["MLA KV per user (2,048 tokens)", "exact, in MB / GB (10^6 / 10^9 B)"] == pytest.approx(
        70_272 * 2048 / GB, rel=REL)


def test_expert_tiers_are_one_layer(tables):
    df = tables["expert_tiers"]
    assert df.loc["total", ("experts", "recomputed")] == CFG.n_routed_experts
    col = (f"in all {CFG.n_moe_layers} MoE layers (GiB)", "")
    assert df.loc["total", col] == pytest.approx(256 * 58 * 84.0 * MiB / GiB, rel=REL)
    assert df.loc["total", col] == pytest.approx(sum(df[col].iloc[:3]), rel=REL)
    assert df.loc["total", col] == pytest.approx(P("v3-2.3.2-expert-weight-total"), rel=0.01)


def test_per_card_with_all_weights(tables):
    df = tables["per_card"]
    col = [c for c in df.columns if c.startswith("with all weights")][0]
    total = (46.2 + 1224.4) / 8 + 1.14 + 1.86 + 5.59
    assert df.loc["per-card total", col] == pytest.approx(total, rel=1e-12)
    assert v3_memory.per_card_all_weights_gib() == pytest.approx(total, rel=1e-12)
    hbm = get_card("ascend-910b2").hbm_bytes / GiB
    assert df.loc["HBM per card", col] == hbm == 64
    assert df.loc["headroom", col] == pytest.approx(hbm - total, rel=1e-12) and df.loc["headroom", col] < 0
    parts = df[col].iloc[:5]
    assert parts.sum() == pytest.approx(df.loc["per-card total", col], rel=1e-12)


def test_per_card_card_parameter_changes_only_the_consistent_column():
    a, b = v3.per_card_table("ascend-910b2"), v3.per_card_table("ascend-910b4")
    pd.testing.assert_frame_equal(a[["article", "recomputed", "verdict"]], b[["article", "recomputed", "verdict"]])


def test_storage_plan_needs(tables):
    df = tables["storage_plan"]
    need = "what the article puts there, by its own numbers"
    assert df.loc["SSD", need] == pytest.approx(1224.4 * GiB / TiB, rel=1e-12)
    assert df.loc["CPU memory", need] == pytest.approx(16 * 84.0 * MiB / GiB, rel=1e-12)
    assert df.loc["GPU HBM, per card", need] == pytest.approx(v3_memory.per_card_all_weights_gib(), rel=1e-12)


def test_memory_helpers_by_hand():
    assert v3.article_full_weights_gib() == pytest.approx(46.2 + 1224.4, rel=1e-12)
    assert v3.full_weights_min_tp() == math.ceil((46.2 + 1224.4) / 53.6) == 24
    assert v3.kv_room_with_all_weights_gib() == pytest.approx((59.6 - 1270.6 / 8) * 8 * 0.8, rel=1e-12)
    assert v3.kv_room_with_all_weights_gib() < 0


# ------------------------------------------------------------------ as the page shows them (page_frame, page_table)


@pytest.mark.parametrize("name", sorted(v3.TABLES))
def test_every_printed_number_is_shown_as_printed(tables, name):
    df = tables[name]
    out, _ = rebuilt.page_frame(df, transpose=name in CONSISTENT)
    shown = set(out.astype(str).to_numpy().ravel())
    for _, _, _, cid in df.attrs["cells"]:
        printed = f"{P(cid):,.{registry__.printed_decimals(claims.get_claim(cid).printed, P(cid))}f}"
        assert printed in shown, (cid, printed)


@pytest.mark.parametrize("name", sorted(v3.TABLES))
def test_the_page_layout_fits_a_column(tables, name):
    out, sev = rebuilt.page_frame(tables[name], transpose=name in CONSISTENT)
    assert out.shape[1] <= 8 and len(sev) == len(out)


@pytest.mark.parametrize("name", sorted(v3.TABLES))
def test_page_table_keeps_the_caption_and_the_reconstructed_mark(tables, name):
    df = tables[name]
    html = rebuilt.page_table(df, transpose=name in CONSISTENT).data
    assert df.attrs["caption"].split(".")[0] in html
    if df.attrs["reconstructed"]:
        assert "Reconstructed from the prose" in html and "the article&#x27;s table is lost" in html


def test_errata_rows_carry_their_severity(tables):
    out, sev = rebuilt.page_frame(tables["per_card"])
    row = list(out["item"]).index("per-card total")
    assert out["verdict"][row] == "erratum" and sev[row] == claims.get_claim("v3-2.3.3-per-card-total").severity
    html = rebuilt.page_table(tables["per_card"]).data
    assert f"erratum · {sev[row]}" in html


def test_wide_tables_become_one_row_per_number(tables):
    out, _ = rebuilt.page_frame(tables["tp_comparison"])
    assert list(out.columns) == ["TP", "quantity", "article", "recomputed", "verdict"]
    slip = out[(out["TP"] == "16") & (out["quantity"] == "all-reduce (ms)")].iloc[0]
    assert slip["article"] == "49.0" and slip["verdict"] == "erratum"


def test_yes_no_columns_become_one_row_naming_what_holds(tables):
    out, _ = rebuilt.page_frame(tables["replicas"])
    meets = out[out["quantity"].str.startswith("meets")]
    assert len(meets) == 4 and meets["recomputed"].iloc[-1] == "peak, expected, conservative"
    assert meets["recomputed"].iloc[0] == "none"


def test_consistent_tables_transposed(tables):
    out, _ = rebuilt.page_frame(tables["tp_same_basis"], transpose=True)
    assert list(out.columns) == ["quantity", "4", "8", "16"]
