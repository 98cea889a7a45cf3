import re
from decimal import Decimal

import pandas as pd
import pytest

from pdcalc.core.errors import ConfigError, UnknownNameError
from pdcalc.core.units import GB, GiB
from pdcalc.hardware.cards import card_names
from pdcalc.reality import measurements as M

ENTRIES = M.load()


def _prints(value, quote):
    """Independent check: some number in the quote equals the value (commas between digits dropped)."""
    text = re.sub(r"(?<=\d),(?=\d{3})", "", quote)
    want = Decimal(str(value))
    return any(Decimal(t) == want for t in re.findall(r"\d+(?:\.\d+)?", text))


def test_registry_loads_with_enough_entries():
    assert 15 <= len(ENTRIES) <= 80
    assert all(isinstance(m, M.Measurement) for m in ENTRIES)


def test_ids_unique():
    ids = [m.id for m in ENTRIES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("m", ENTRIES, ids=lambda m: m.id)
def test_quote_prints_the_value(m):
    assert _prints(m.value, m.quote), (m.value, m.quote)


@pytest.mark.parametrize("m", ENTRIES, ids=lambda m: m.id)
def test_entry_has_locator_and_allowed_unit(m):
    assert m.quantity in M.QUANTITIES
    assert m.unit in M.QUANTITY_UNITS[m.quantity]
    assert m.value > 0 and m.scope.strip() and m.source.strip() and m.quote.strip()
    # a locator precise enough to find the text again: an issue/PR number, a path, an arXiv id or a URL
    assert m.url or re.search(r"#\d+|/|arXiv", m.source)


@pytest.mark.parametrize("m", [m for m in ENTRIES if m.card], ids=lambda m: m.id)
def test_card_that_looks_like_a_preset_is_one(m):
    if re.fullmatch(r"[a-z0-9]+(?:[-_][a-z0-9]+)*", m.card):
        assert m.card in card_names()


def test_priority_coverage():
    models = {m.model for m in ENTRIES}
    assert {"DeepSeek-V3", "DeepSeek-R1", "DeepSeek-V4-Flash"} <= models
    engines = {m.engine for m in ENTRIES}
    assert {"vllm-ascend", "vllm", "sglang"} <= engines
    weight = M.frame(quantity="weight_memory_per_card")
    assert (weight["engine"] == "vllm-ascend").sum() >= 2


def test_unit_conversion_exact():
    m = M.get("vllm-ascend-13439-v4flash-weights-per-card")
    assert m.unit == "GiB" and M.to_bytes(m) == 47.4 * 2**30 == m.value_si
    assert m.si_unit == "B"


def test_printed_gb_uses_unit_means_when_engine_code_shows_gib():
    m = M.get("vllm-ascend-2191-v3-w8a8-dp4tp4-weights-per-card")
    assert m.unit == "GB" and m.unit_means == "GiB"
    assert m.value_si == 44.1591 * GiB


def test_decimal_gb_and_non_byte_units(tmp_path):
    p = tmp_path / "m.toml"
    p.write_text(_one(id="a", quantity="kv_cache_memory_per_card", value=2.5, unit="GB",
                      quote="KV size: 2.5 GB") + _one(id="b", quantity="kv_transfer_bandwidth", value=190,
                                                    unit="GB/s", quote="up to 190 GB/s")
                 + _one(id="c", quantity="prefill_throughput", value=73.7, unit="k tokens/s",
                        quote="~73.7k tokens/s") + _one(id="d", quantity="tpot", value=45, unit="ms",
                                                        quote="TPOT 45 ms"))
    a, b, c, d = M.load(p)
    assert M.to_bytes(a) == 2.5 * GB
    assert b.value_si == 190e9 and b.si_unit == "B/s"
    assert c.value_si == pytest.approx(73700) and c.si_unit == "tokens/s"
    assert d.value_si == 45 and d.si_unit == "ms"
    with pytest.raises(ValueError):
        M.to_bytes(d)


def test_get_unknown_lists_known():
    with pytest.raises(UnknownNameError) as exc:
        M.get("no-such-measurement")
    assert "cloudmatrix384-r1-prefill-per-npu" in str(exc.value)
    assert exc.value.known == sorted(m.id for m in ENTRIES)


def test_frame_filters():
    df = M.frame(model="DeepSeek-V4-Flash")
    assert isinstance(df, pd.DataFrame) and len(df) > 0
    assert set(df["model"]) == {"DeepSeek-V4-Flash"}
    both = M.frame(quantity=["prefill_throughput", "decode_throughput"], card="h800")
    assert set(both["quantity"]) == {"prefill_throughput", "decode_throughput"}
    assert {"value_si", "si_unit", "quote", "tp"} <= set(both.columns)
    assert M.frame(engine="no-such-engine").empty
    with pytest.raises(UnknownNameError, match="quantity"):
        M.frame(colour="red")


def _one(**kw):
    base = dict(id="x", quantity="weight_memory_per_card", value=1.5, unit="GiB", scope="per card",
                quote="took 1.5 GiB", source="somewhere #1")
    base.update(kw)
    lines = ["[[measurement]]"]
    for k, v in base.items():
        if v is None:
            continue
        lines.append(f"{k} = {v!r}" if not isinstance(v, str) else f'{k} = "{v}"')
    return "\n".join(lines) + "\n\n"


@pytest.mark.parametrize("overrides,field", [
    (dict(quantity="weight_per_gpu"), "quantity"),
    (dict(value=-3), "value"),
    (dict(value=0), "value"),
    (dict(value="1.5"), "value"),
    (dict(unit="tokens"), "unit"),
    (dict(quantity="tpot", unit="GiB"), "unit"),
    (dict(quote=None), "quote"),
    (dict(source=None), "source"),
    (dict(quote="took some memory"), "quote"),
    (dict(card="h900"), "card"),
    (dict(tp=0), "tp"),
    (dict(gpu_memory_utilization=1.5), "gpu_memory_utilization"),
    (dict(unit_means="GiB", quantity="tpot", unit="ms", quote="1.5 ms"), "unit_means"),
    (dict(colour="red"), "colour"),
    (dict(id="Not A Slug"), "id"),
])
def test_malformed_entry_names_field_and_id(tmp_path, overrides, field):
    p = tmp_path / "bad.toml"
    p.write_text(_one(**overrides))
    with pytest.raises(ConfigError) as exc:
        M.load(p)
    assert exc.value.field == field
    assert str(p) in str(exc.value)
    if field != "id":
        assert "'x'" in str(exc.value)


def test_duplicate_ids_rejected(tmp_path):
    p = tmp_path / "dup.toml"
    p.write_text(_one() + _one())
    with pytest.raises(ConfigError) as exc:
        M.load(p)
    assert exc.value.field == "id" and "duplicate" in str(exc.value)


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        M.load(tmp_path / "absent.toml")
    p = tmp_path / "broken.toml"
    p.write_text("[[measurement]\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        M.load(p)


def test_valid_preset_card_accepted_and_thousands_separators(tmp_path):
    p = tmp_path / "ok.toml"
    p.write_text(_one(card="ascend-910b2") + _one(id="y", quantity="kv_cache_tokens_per_card",
                                                 value=1291904, unit="tokens",
                                                 quote="1,291,904 tokens capacity", card="NVIDIA GB10"))
    a, b = M.load(p)
    assert a.card == "ascend-910b2" and b.value == 1291904
    assert M.get("y", p) == b


def test_measurements_are_frozen():
    with pytest.raises(Exception):
        ENTRIES[0].value = 1.0


# ---------------------------------------------------------------------------------------------------
# throughput entries: conditions a throughput model needs, coverage of phases, vendors and scales
# ---------------------------------------------------------------------------------------------------
THROUGHPUT = [m for m in ENTRIES if m.quantity in ("prefill_throughput", "decode_throughput")]
NVIDIA_PRESETS = {"h100", "h800", "h20", "h200", "b200"}


def _vendor(m):
    card = (m.card or "").lower()
    if card.startswith("ascend") or "atlas" in card or "ascend" in card:
        return "ascend"
    if card in NVIDIA_PRESETS or "nvidia" in card:
        return "nvidia"
    return None


@pytest.mark.parametrize("m", THROUGHPUT, ids=lambda m: m.id)
def test_throughput_entry_states_or_names_every_condition(m):
    # every condition a throughput model needs is either set or named unstated, never both
    assert set(M.missing_conditions(m)) == set(m.unstated), (M.missing_conditions(m), m.unstated)
    if m.unstated:
        assert "not stated" in (m.notes or "").lower()
    assert _vendor(m) is not None
    # the per-card rate is the value over the cards it covers, and the basis is said
    assert m.scope_cards is not None and m.per_card == pytest.approx(m.value_si / m.scope_cards)
    assert m.cards_counted in M.CARDS_COUNTED or "cards_counted" in m.unstated
    assert m.serving in M.SERVING
    if m.cards_counted == "deployment" and m.serving == "disaggregated":
        assert m.prefill_cards and m.decode_cards and m.prefill_cards + m.decode_cards == m.cards
    if m.mtp_draft_tokens is not None:
        assert m.mtp is True


def test_throughput_entries_cover_phases_vendors_and_scales():
    assert len(THROUGHPUT) >= 8
    got = {(_vendor(m), m.quantity) for m in THROUGHPUT}
    assert {("nvidia", "prefill_throughput"), ("nvidia", "decode_throughput"),
            ("ascend", "prefill_throughput"), ("ascend", "decode_throughput")} <= got
    for vendor in ("nvidia", "ascend"):
        scales = {m.cards or m.decode_cards for m in THROUGHPUT if _vendor(m) == vendor} - {None}
        assert len(scales) >= 3, (vendor, scales)
    assert {m.serving for m in THROUGHPUT} == {"disaggregated", "aggregated"}
    # a prediction can be set up for most of them: at most a few conditions left open
    nearly_complete = [m for m in THROUGHPUT if len(m.unstated) <= 2]
    assert len(nearly_complete) >= 8
    assert {_vendor(m) for m in nearly_complete} == {"nvidia", "ascend"}


def test_throughput_entries_that_predictions_read_keep_their_values():
    # the four anchors of pdcalc.reality.published_runs.PUBLISHED_RUNS
    assert M.get("deepseek-prod-h800-prefill-per-node").value_si == pytest.approx(73_700)
    assert M.get("deepseek-prod-h800-decode-per-node").value_si == pytest.approx(14_800)
    assert M.get("cloudmatrix384-r1-prefill-per-npu").value == 6688
    assert M.get("cloudmatrix384-r1-decode-per-npu-tpot50").value == 1943


def test_throughput_conditions_read_as_stated():
    m = M.get("deepseek-prod-h800-decode-per-node")
    assert m.per_card == pytest.approx(1850) and m.tokens_per_s_per_user == (20.0, 22.0)
    assert m.context_tokens == 4989 and m.ep == 144 and m.cards == 144
    h20 = M.get("lmsys-h20-decode-per-gpu-tpot50")
    assert (h20.batch_per_card, h20.tpot_limit_ms, h20.mtp, h20.mtp_draft_tokens) == (32, 50, True, 2)
    a3 = M.get("sglang-ascend-a3-r1-w8a8-32card-pd-3500-1500-tpot50")
    assert a3.card == "ascend-910c" and a3.cards_counted == "deployment"
    assert (a3.prefill_cards, a3.decode_cards, a3.concurrency, a3.tpot_ms) == (16, 16, 832, 48.10)
    assert M.get("vllm-ascend-a3-v31-w8a8-prefill-tp16-per-card").cache_hit == 0.99
    trt = M.get("trtllm-b200-r1-fp4-min-latency-batch1")
    assert trt.per_card == pytest.approx(274.4168 / 8) and trt.batch_per_card == 0.125
    assert M.get("vllm-gb200-decode-per-gpu").value_si == pytest.approx(10_100)
    df = M.frame(quantity=["prefill_throughput", "decode_throughput"])
    assert len(df) == len(THROUGHPUT)
    assert {"scope_cards", "cards", "serving", "unstated", "mtp", "tpot_limit_ms"} <= set(df.columns)
    assert M.frame(quantity="tpot").empty or "unstated" in M.frame(quantity="tpot").columns


def test_missing_conditions_reports_open_conditions_and_is_empty_elsewhere():
    m = M.get("lmsys-h20-decode-per-gpu-tpot70")
    assert M.missing_conditions(m) == ["quantization"]
    assert M.missing_conditions(M.get("mooncake-te-8x400g-roce-bandwidth")) == []
    assert M.condition_names("tpot") == ()
    assert set(M.condition_names("prefill_throughput")) < set(M.condition_names("decode_throughput"))


_TP = """[[measurement]]
id = "t"
quantity = "decode_throughput"
value = 100
unit = "tokens/s"
scope = "per card"
quote = "100 tokens/s"
source = "somewhere #1"
"""


@pytest.mark.parametrize("extra,field", [
    ('serving = "both"', "serving"),
    ('cards_counted = "node"', "cards_counted"),
    ('unstated = ["colour"]', "unstated"),
    ('unstated = ["tp"]\ntp = 8', "unstated"),
    ('unstated = "tp"', "unstated"),
    ('unstated = ["tp", "tp"]', "unstated"),
    ("cache_hit = 1.0", "cache_hit"),
    ("mtp = 1", "mtp"),
    ("mtp_draft_tokens = 2", "mtp_draft_tokens"),
    ("mtp = false\nmtp_draft_tokens = 2", "mtp_draft_tokens"),
    ("cards = 32\nprefill_cards = 16\ndecode_cards = 8", "cards"),
    ("tokens_per_s_per_user = [22, 20]", "tokens_per_s_per_user"),
    ("tokens_per_s_per_user = [1, 2, 3]", "tokens_per_s_per_user"),
    ("tpot_ms = 0", "tpot_ms"),
    ("batch_per_card = true", "batch_per_card"),
    ("scope_cards = 0", "scope_cards"),
    ("concurrency = 2.5", "concurrency"),
])
def test_malformed_throughput_conditions_name_the_field(tmp_path, extra, field):
    p = tmp_path / "bad.toml"
    p.write_text(_TP + extra + "\n")
    with pytest.raises(ConfigError) as exc:
        M.load(p)
    assert exc.value.field == field and "'t'" in str(exc.value)


def test_unstated_only_on_throughput_entries(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text(_one(unstated=None) + 'unstated = ["tp"]\n')
    with pytest.raises(ConfigError) as exc:
        M.load(p)
    assert exc.value.field == "unstated"


def test_well_formed_throughput_conditions_load(tmp_path):
    p = tmp_path / "ok.toml"
    p.write_text(_TP + 'serving = "disaggregated"\ncards = 32\nprefill_cards = 16\ndecode_cards = 16\n'
                 'scope_cards = 1\ncards_counted = "deployment"\nmtp = true\nmtp_draft_tokens = 3\n'
                 'tokens_per_s_per_user = [20, 22]\ncache_hit = 0\nunstated = ["tp", "ep"]\n')
    m = M.load(p)[0]
    assert m.unstated == ("tp", "ep") and m.tokens_per_s_per_user == (20.0, 22.0) and m.cache_hit == 0.0
    assert m.per_card == 100 and set(M.missing_conditions(m)) > {"tp", "ep"}
