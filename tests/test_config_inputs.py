"""Bad model configs and card files end in one-line errors that name the file, the field and what is allowed."""

import builtins
import dataclasses
import json
import math
from importlib import resources

import pytest

from pdcalc.core.errors import ConfigError, PdcalcError, UnknownNameError
from pdcalc.hardware.cards import (MAX_BYTES, MAX_BYTES_PER_S, MAX_FLOPS_PER_S, MIN_BYTES, MIN_FLOPS_PER_S,
                                   MIN_HBM_BYTES_PER_S, MIN_LINK_BYTES_PER_S, get_card)
from pdcalc.model.config import LIMITS, MAX_COMPRESS_ENTRIES, MODEL_NAMES, load_config, load_config_file
from pdcalc.model.inventory import MAX_PARAMS, build_inventory, get_inventory

MODELS = resources.files("pdcalc").joinpath("data", "models")


def _preset_dict(name: str) -> dict:
    return json.loads(MODELS.joinpath(name).read_text())


@pytest.fixture
def v3():
    return _preset_dict("deepseek_v3_config.json")


@pytest.fixture
def v4():
    return _preset_dict("deepseek_v4_flash_config.json")


def _same(cfg, preset) -> bool:
    """Every architecture field equal (the name and source differ: a file against a preset)."""
    return dataclasses.replace(cfg, name=preset.name, source=preset.source) == preset


def _write(tmp_path, data, name="config.json"):
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return p


def _error(path, field=None, *parts, kind=ConfigError, load=load_config):
    """The error loading ``path``: of ``kind``, one line, naming the file, ``field`` and every part."""
    with pytest.raises(kind) as exc:
        load(str(path))
    msg = str(exc.value)
    assert "\n" not in msg
    assert str(path) in msg
    if field:
        assert exc.value.field == field and f"field {field!r}" in msg
    for part in parts:
        assert part in msg, msg
    return msg


# ---- the file itself --------------------------------------------------------------------------

@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32", "utf-8-sig"])
def test_config_in_any_json_encoding_loads_as_utf8(tmp_path, v3, encoding):
    p = tmp_path / "config.json"
    p.write_bytes(json.dumps(v3).encode(encoding))
    assert _same(load_config(str(p)), load_config("deepseek-v3"))


def test_latin1_config_is_refused(tmp_path):
    p = tmp_path / "config.json"
    p.write_bytes(b'{"model_type": "deepseek_v3", "note": "caf\xe9"}')
    _error(p, None, "not UTF-8, UTF-16 or UTF-32 text", "byte 0xe9")


def test_binary_config_is_refused(tmp_path):
    p = tmp_path / "config.json"
    p.write_bytes(bytes(range(256)) * 4)
    _error(p, None, "not")


def test_folder_is_refused(tmp_path):
    d = tmp_path / "config.json"
    d.mkdir()
    _error(d, None, "is a folder, not a file")
    _error(tmp_path, None, "is a folder, not a file")


def test_device_is_refused_without_reading_it():
    _error("/dev/zero", None, "not a regular file")


def test_unreadable_config_is_refused(tmp_path, v3, monkeypatch):
    p = _write(tmp_path, v3)

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(p))

    monkeypatch.setattr(builtins, "open", denied)
    _error(p, None, "cannot read: permission denied")


def test_oversized_file_is_refused(tmp_path):
    p = tmp_path / "config.json"
    with p.open("wb") as fh:
        fh.truncate(17 * 2**20)
    _error(p, None, "larger than 16,777,216 bytes")


def test_integer_of_more_than_4300_digits(tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{"model_type": "deepseek_v3", "hidden_size": ' + "9" * 5000 + "}")
    _error(p, None, "more digits than Python converts (4,300)")


def test_json_nested_100000_deep(tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{"model_type": "deepseek_v3", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    _error(p, None, "nested too deeply")


@pytest.mark.parametrize("body", ["[1, 2]", '"config"', "7", "null"])
def test_top_level_must_be_an_object(tmp_path, body):
    p = tmp_path / "config.json"
    p.write_text(body)
    _error(p, None, "expected a JSON object")


def test_empty_model_name_is_unknown_not_the_current_folder():
    with pytest.raises(UnknownNameError) as exc:
        load_config("")
    assert str(exc.value).startswith("unknown model ''; known: deepseek-v2, deepseek-v2-lite, deepseek-v3")
    with pytest.raises(UnknownNameError):
        get_inventory("")


def test_model_presets_do_not_need_the_inventory():
    import subprocess
    import sys

    code = ("import sys, pdcalc.model.config as m; m.load_config('deepseek-v3'); "
            "assert 'pdcalc.model.inventory' not in sys.modules, 'model imported inventory'\n"
            "try:\n    m.load_config('deepseek-v9')\nexcept m.UnknownNameError as e:\n    print(e)\n"
            "assert 'pdcalc.model.inventory' not in sys.modules")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ("unknown model 'deepseek-v9'; known: deepseek-v2, deepseek-v2-lite, deepseek-v3, "
                           "deepseek-v3-article, deepseek-v3.2-exp, deepseek-v4-flash, deepseek-v4-flash-article, "
                           "deepseek-v4-pro, kimi-k2")
    assert set(MODEL_NAMES) == {"deepseek-v2", "deepseek-v2-lite", "deepseek-v3", "deepseek-v3-article",
                                "deepseek-v3.2-exp", "deepseek-v4-flash", "deepseek-v4-flash-article",
                                "deepseek-v4-pro", "kimi-k2"}


# ---- field types ------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["false", "true", 0, 1, None, [False]])
def test_booleans_must_be_json_booleans(tmp_path, v3, value):
    v3["tie_word_embeddings"] = value
    _error(_write(tmp_path, v3), "tie_word_embeddings", "must be true or false")


@pytest.mark.parametrize("value", [True, False])
def test_json_booleans_are_read(tmp_path, v3, value):
    v3["tie_word_embeddings"] = value
    cfg = load_config(str(_write(tmp_path, v3)))
    assert cfg.tie_word_embeddings is value
    names = {t.name for t in build_inventory(cfg).tensors}
    assert ("head.weight" in names) is (not value)


def test_whole_number_floats_become_ints(tmp_path, v3):
    for key in ("hidden_size", "n_routed_experts", "num_hidden_layers", "moe_intermediate_size"):
        v3[key] = float(v3[key])
    cfg = load_config(str(_write(tmp_path, v3)))
    assert type(cfg.hidden_size) is int and cfg.hidden_size == 7168
    counts, ref = build_inventory(cfg).counts(), get_inventory("deepseek-v3").counts()
    assert type(counts.total) is int and (counts.total, counts.activated, counts.mtp) == (ref.total, ref.activated, ref.mtp)


@pytest.mark.parametrize("field,value", [
    ("hidden_size", 7168.5), ("hidden_size", "7168"), ("hidden_size", True), ("hidden_size", [7168]),
    ("hidden_size", None), ("hidden_size", {"a": 1}), ("vocab_size", float("nan")), ("vocab_size", float("inf")),
    ("num_hidden_layers", 1e300), ("n_shared_experts", -1), ("kv_lora_rank", 0), ("moe_layer_freq", None),
    ("num_key_value_heads", "128"), ("first_k_dense_replace", 2.5), ("max_position_embeddings", "long"),
])
def test_number_fields_refuse_other_types(tmp_path, v3, field, value):
    v3[field] = value
    low, high = LIMITS[field]
    _error(_write(tmp_path, v3), field, f"must be an integer in {low:,}..{high:,}, got")


@pytest.mark.parametrize("field,value,allowed", [
    ("torch_dtype", 5, "must be a string"),
    ("torch_dtype", None, "must be a string"),
    ("quantization_config", [1, 2], "must be an object (a JSON {...} table) or null"),
    ("quantization_config", "fp8", "must be an object (a JSON {...} table) or null"),
    ("model_type", ["deepseek_v3"], "supported: deepseek_v2, deepseek_v3, deepseek_v32, kimi_k2, deepseek_v4"),
])
def test_other_field_types(tmp_path, v3, field, value, allowed):
    v3[field] = value
    _error(_write(tmp_path, v3), field, allowed)


def test_quantization_config_may_be_null(tmp_path, v3):
    v3["quantization_config"] = None
    assert load_config(str(_write(tmp_path, v3))).quantization_config is None


@pytest.mark.parametrize("value", [[0, "4"] + [4] * 43, [0, 4.5] + [4] * 43, [0, None] + [4] * 43, [0, True] + [4] * 43,
                                   [0, False] + [4] * 43, [0, 1] + [4] * 43, [0, -4] + [4] * 43, [0, 2**21] + [4] * 43])
def test_compress_ratio_entries(tmp_path, v4, value):
    v4["compress_ratios"] = value
    _error(_write(tmp_path, v4), "compress_ratios", "entry 1 is", "0 (no compression) or an integer ratio in 2..1,048,576")


@pytest.mark.parametrize("value,allowed", [
    ("4,128", "must be a list of integers"), ({"0": 4}, "must be a list of integers"),
    ([4] * 10, "fewer than num_hidden_layers=43"), ([4] * (MAX_COMPRESS_ENTRIES + 1), "at most 1,088"),
])
def test_compress_ratios_shape(tmp_path, v4, value, allowed):
    v4["compress_ratios"] = value
    _error(_write(tmp_path, v4), "compress_ratios", allowed)


def test_whole_float_compress_ratios_are_ints(tmp_path, v4):
    v4["compress_ratios"] = [float(r) for r in v4["compress_ratios"]]
    cfg = load_config(str(_write(tmp_path, v4)))
    assert _same(cfg, load_config("deepseek-v4-flash")) and all(type(r) is int for r in cfg.compress_ratios)


# ---- ranges -----------------------------------------------------------------------------------

@pytest.mark.parametrize("field,value", [
    ("n_routed_experts", 10**12), ("num_hidden_layers", 10**6), ("num_hidden_layers", 10**7), ("num_hidden_layers", 0),
    ("hidden_size", 2**20 + 1), ("vocab_size", 2**24 + 1), ("num_nextn_predict_layers", 65),
    ("num_attention_heads", 2**16 + 1), ("moe_intermediate_size", 10**9), ("n_shared_experts", 1025),
    ("intermediate_size", 2**40), ("q_lora_rank", 2**20 + 1), ("max_position_embeddings", 2**31),
    ("hidden_size", 10**200),
])
def test_fields_out_of_range_say_the_allowed_range(tmp_path, v3, field, value):
    v3[field] = value
    low, high = LIMITS[field]
    _error(_write(tmp_path, v3), field, f"must be an integer in {low:,}..{high:,}")


@pytest.mark.parametrize("field,value", [
    ("hc_mult", 257), ("sliding_window", 2**30 + 1), ("index_topk", 0), ("o_groups", 2**16 + 1),
    ("head_dim", 2**16 + 1), ("num_hash_layers", 1025),
])
def test_v4_fields_out_of_range(tmp_path, v4, field, value):
    v4[field] = value
    low, high = LIMITS[field]
    _error(_write(tmp_path, v4), field, f"must be an integer in {low:,}..{high:,}")


@pytest.mark.parametrize("field,value,allowed", [
    ("num_experts_per_tok", 257, "allowed: 1..256"),
    ("first_k_dense_replace", 62, "allowed: 0..61"),
])
def test_relations_between_fields(tmp_path, v3, field, value, allowed):
    v3[field] = value
    _error(_write(tmp_path, v3), field, allowed)


def test_v4_relations(tmp_path, v4):
    v4["num_hash_layers"] = 44
    _error(_write(tmp_path, v4), "num_hash_layers", "allowed: 0..43")
    v4["num_hash_layers"] = 3
    v4["o_groups"] = 7
    _error(_write(tmp_path, v4), "o_groups", "is not divisible by o_groups=7")


@pytest.mark.parametrize("preset", ["deepseek_v3_config.json", "deepseek_v4_flash_config.json"])
def test_largest_accepted_config_builds_a_bounded_inventory(tmp_path, preset):
    d = _preset_dict(preset)
    d.update(num_hidden_layers=LIMITS["num_hidden_layers"][1], num_nextn_predict_layers=LIMITS["num_nextn_predict_layers"][1],
             n_routed_experts=LIMITS["n_routed_experts"][1], num_experts_per_tok=LIMITS["n_routed_experts"][1])
    if "compress_ratios" in d:
        d["compress_ratios"] = [4, 128] * (MAX_COMPRESS_ENTRIES // 2)
    inv = build_inventory(load_config(str(_write(tmp_path, d))))
    n_blocks = d["num_hidden_layers"] + d["num_nextn_predict_layers"]
    assert len(inv.tensors) < 40 * n_blocks
    assert inv.counts().total < MAX_PARAMS


def test_too_many_parameters_is_refused(tmp_path, v3):
    v3.update(hidden_size=2**20, moe_intermediate_size=2**20, n_routed_experts=2**16)
    p = _write(tmp_path, v3)
    msg = _error(p, None, "more than the 9.01e+15 (2**53)", "routed_experts",
                 "n_routed_experts x moe_intermediate_size x hidden_size", load=get_inventory)
    assert "1.28e+19" in msg


def test_config_error_source_with_a_newline_stays_one_line(tmp_path, v3):
    v3["hidden_size"] = "x"
    with pytest.raises(ConfigError) as exc:
        load_config_file(_write(tmp_path, v3), source="a\nb")
    assert "\n" not in str(exc.value) and "'a\\nb'" in str(exc.value)


# ---- card files -------------------------------------------------------------------------------

CARD = ("family = 'nvidia'\nhbm_bytes = 1e11\nhbm_bandwidth_bytes_per_s = 2e12\nflops_per_s = {bf16 = 1e15}\n"
        "intra_node_bytes_per_s = 1e11\nscale_out_bytes_per_s = 1e10\n")


def _card_file(tmp_path, body, name="mycard.toml"):
    p = tmp_path / name
    p.write_text(body)
    return p


def _set(key, value):
    """The card body with ``key = value`` (replacing a line of the same key)."""
    lines = [ln for ln in CARD.splitlines() if not ln.startswith(f"{key} =")]
    return "\n".join(lines + [f"{key} = {value}"]) + "\n"


@pytest.mark.parametrize("name", ["", " "])
def test_empty_card_name_is_unknown(name):
    with pytest.raises(UnknownNameError, match=r"unknown card '\s*'; known: ascend-910b2"):
        get_card(name)


def test_card_folder_and_unreadable_and_non_utf8(tmp_path, monkeypatch):
    d = tmp_path / "cards.toml"
    d.mkdir()
    _error(d, None, "is a folder, not a file", load=get_card)
    _error(tmp_path, None, "is a folder, not a file", load=get_card)
    p = tmp_path / "latin.toml"
    p.write_bytes(CARD.encode() + b'label = "caf\xe9"\n')
    _error(p, None, "not UTF-8 text", "byte 0xe9", "TOML files are UTF-8", load=get_card)
    deep = _card_file(tmp_path, CARD + "x = " + "[" * 100_000 + "]" * 100_000 + "\n", "deep.toml")
    _error(deep, None, "nested too deeply", load=get_card)
    ok = _card_file(tmp_path, CARD, "ok.toml")
    get_card("h200")  # the presets are read (and cached) before open is replaced

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(ok))

    monkeypatch.setattr(builtins, "open", denied)
    _error(ok, None, "cannot read: permission denied", load=get_card)


@pytest.mark.parametrize("key,value,allowed", [
    ("hbm_bandwidth_bytes_per_s_range", "5", f"must be [low, high]: two finite numbers in {MIN_HBM_BYTES_PER_S:,.0f}..{MAX_BYTES_PER_S:,}"),
    ("hbm_bandwidth_bytes_per_s_range", "[1e12]", "must be [low, high]"),
    ("hbm_bandwidth_bytes_per_s_range", "[1e12, 3e12, 4e12]", "must be [low, high]"),
    ("hbm_bandwidth_bytes_per_s_range", "[3e12, 1e12]", "with low <= high, got low 3e+12 > high 1e+12"),
    ("hbm_bandwidth_bytes_per_s_range", "[1e12, 1.5e12]", "must contain hbm_bandwidth_bytes_per_s (2e+12)"),
    ("hbm_bandwidth_bytes_per_s_range", "['a', 'b']", "must be [low, high]"),
    ("flops_per_s_range", "[1e14, inf]", f"two finite numbers in {MIN_FLOPS_PER_S:,.0f}..{MAX_FLOPS_PER_S:,}"),
    ("flops_per_s_range", "[-1e14, 1e15]", "two finite numbers"),
    ("hbm_visible_bytes", '"x"', f"must be a finite number in {MIN_BYTES:,.0f}..{MAX_BYTES:,} (bytes), got 'x'"),
    ("hbm_visible_bytes", "2e11", "must be at most hbm_bytes"),
    ("cards_per_node", "8.5", "must be an integer in 1..65,536, got 8.5"),
    ("cards_per_node", "0", "must be an integer in 1..65,536"),
    ("cards_per_node", "true", "must be an integer in 1..65,536"),
    ("label", "3", "must be a string, got 3"),
    ("label", '""', "must not be empty"),
    ("source", "[1]", "must be a string"),
    ("flops_per_s", "5", "must be a non-empty table of dtype = FLOP/s"),
    ("flops_per_s", "{}", "must be a non-empty table of dtype = FLOP/s"),
    ("hbm_bytes", "inf", f"must be a finite number in {MIN_BYTES:,.0f}..{MAX_BYTES:,} (bytes), got inf"),
    ("hbm_bytes", "nan", f"must be a finite number in {MIN_BYTES:,.0f}..{MAX_BYTES:,} (bytes), got nan"),
    ("hbm_bytes", "1e16", f"must be a finite number in {MIN_BYTES:,.0f}..{MAX_BYTES:,} (bytes), got 1e+16"),
    ("hbm_bytes", '"80GB"', "must be a finite number"),
    ("hbm_bytes", "1979-05-27", "must be a finite number"),
    ("hbm_bandwidth_bytes_per_s", "-inf", f"must be a finite number in {MIN_HBM_BYTES_PER_S:,.0f}..{MAX_BYTES_PER_S:,} (bytes/s)"),
    ("scale_out_bytes_per_s", "false", "must be a finite number"),
    ("intra_node_bytes_per_s", "0", f"must be a finite number in {MIN_LINK_BYTES_PER_S:,.0f}.."),
])
def test_card_fields(tmp_path, key, value, allowed):
    _error(_card_file(tmp_path, _set(key, value)), key, allowed, load=get_card)


@pytest.mark.parametrize("value", ["inf", "nan", "1e19", '"x"', "{ x = 1 }", "0"])
def test_card_flops_entries(tmp_path, value):
    _error(_card_file(tmp_path, _set("flops_per_s", f"{{ bf16 = {value} }}")), "flops_per_s.bf16",
           f"must be a finite number in {MIN_FLOPS_PER_S:,.0f}..{MAX_FLOPS_PER_S:,} (FLOP/s)", load=get_card)


def test_good_card_file_keeps_its_values(tmp_path):
    c = get_card(str(_card_file(tmp_path, _set("cards_per_node", "16.0") + "hbm_bandwidth_bytes_per_s_range = [1e12, 3e12]\n")))
    assert c.cards_per_node == 16 and type(c.cards_per_node) is int
    assert c.hbm_bandwidth_bytes_per_s_range == (1e12, 3e12) and c.label == "mycard"
    assert all(math.isfinite(v) for v in (c.hbm_bytes, c.hbm_bandwidth_bytes_per_s, c.flops("bf16")))


def test_every_error_is_a_pdcalc_error(tmp_path, v3):
    v3["num_hidden_layers"] = 10**7
    with pytest.raises(PdcalcError):
        load_config(str(_write(tmp_path, v3)))
