import re
from decimal import Decimal

import pandas as pd
import pytest

from pdcalc import measurements as M
from pdcalc.errors import ConfigError, UnknownNameError
from pdcalc.hardware import card_names
from pdcalc.units import GB, GiB

ENTRIES = M.load()


def _prints(value, quote):
    """Independent check: some number in the quote equals the value (commas between digits dropped)."""
    text = re.sub(r"(?<=\d),(?=\d{3})", "", quote)
    want = Decimal(str(value))
    return any(Decimal(t) == want for t in re.findall(r"\d+(?:\.\d+)?", text))


def test_registry_loads_with_enough_entries():
    assert 15 <= len(ENTRIES) <= 40
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
    (dict(card="h100"), "card"),
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
