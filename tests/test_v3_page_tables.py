"""The V3 article's rebuilt tables as the page shows them (pdcalc.audit.v3_deploy.page_frame / page_table):
every printed number is still there as printed, lost tables still say they are reconstructed, errata keep
their severity, and the layout fits a column (no more than seven columns)."""

import pytest

from pdcalc import claims
from pdcalc.audit import v3_deploy as v3

P = claims.printed_value
CONSISTENT = {"kv_units", "tp_same_basis"}


@pytest.fixture(scope="module")
def tables():
    return {name: fn() for name, fn in v3.TABLES.items()}


@pytest.mark.parametrize("name", sorted(v3.TABLES))
def test_every_printed_number_is_shown_as_printed(tables, name):
    df = tables[name]
    out, _ = v3.page_frame(df, transpose=name in CONSISTENT)
    shown = set(out.astype(str).to_numpy().ravel())
    for _, _, _, cid in df.attrs["cells"]:
        printed = f"{P(cid):,.{v3._decimals(claims.get_claim(cid).printed, P(cid))}f}"
        assert printed in shown, (cid, printed)


@pytest.mark.parametrize("name", sorted(v3.TABLES))
def test_the_page_layout_fits_a_column(tables, name):
    out, sev = v3.page_frame(tables[name], transpose=name in CONSISTENT)
    assert out.shape[1] <= 8 and len(sev) == len(out)


@pytest.mark.parametrize("name", sorted(v3.TABLES))
def test_page_table_keeps_the_caption_and_the_reconstructed_mark(tables, name):
    df = tables[name]
    html = v3.page_table(df, transpose=name in CONSISTENT).data
    assert df.attrs["caption"].split(".")[0] in html
    if df.attrs["reconstructed"]:
        assert "Reconstructed from the prose" in html and "the article&#x27;s table is lost" in html


def test_errata_rows_carry_their_severity(tables):
    out, sev = v3.page_frame(tables["per_card"])
    row = list(out["item"]).index("per-card total")
    assert out["verdict"][row] == "erratum" and sev[row] == claims.get_claim("v3-2.3.3-per-card-total").severity
    html = v3.page_table(tables["per_card"]).data
    assert f"erratum · {sev[row]}" in html


def test_wide_tables_become_one_row_per_number(tables):
    out, _ = v3.page_frame(tables["tp_comparison"])
    assert list(out.columns) == ["TP", "quantity", "article", "recomputed", "verdict"]
    slip = out[(out["TP"] == "16") & (out["quantity"] == "all-reduce (ms)")].iloc[0]
    assert slip["article"] == "49.0" and slip["verdict"] == "erratum"


def test_yes_no_columns_become_one_row_naming_what_holds(tables):
    out, _ = v3.page_frame(tables["replicas"])
    meets = out[out["quantity"].str.startswith("meets")]
    assert len(meets) == 4 and meets["recomputed"].iloc[-1] == "peak, expected, conservative"
    assert meets["recomputed"].iloc[0] == "none"


def test_consistent_tables_transposed(tables):
    out, _ = v3.page_frame(tables["tp_same_basis"], transpose=True)
    assert list(out.columns) == ["quantity", "4", "8", "16"]
