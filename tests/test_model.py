import json
from importlib import resources

import pytest

from pdcalc.core.errors import ConfigError, UnknownNameError
from pdcalc.model.config import CONFIG_PRESETS, load_config

REF = str(resources.files("pdcalc").joinpath("data", "models"))


@pytest.mark.parametrize("name", list(CONFIG_PRESETS))
def test_presets_load_and_carry_source(name):
    cfg = load_config(name)
    assert cfg.source and cfg.name == name


def test_v3_structure():
    cfg = load_config("deepseek-v3")
    assert cfg.n_moe_layers == cfg.num_hidden_layers - cfg.first_k_dense_replace


def test_v4_compress_ratios_cover_main_and_mtp_layers():
    cfg = load_config("deepseek-v4-flash")
    assert len(cfg.compress_ratios) == cfg.num_hidden_layers + cfg.num_nextn_predict_layers
    assert set(cfg.compress_ratios) == {0, 4, 128}


def test_unknown_model_lists_presets():
    with pytest.raises(UnknownNameError, match="known: deepseek-v2, deepseek-v2-lite, deepseek-v3,"):
        load_config("deepseek-v9")


def _write(tmp_path, data):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(data))
    return p


@pytest.fixture
def v3_dict():
    with open(f"{REF}/deepseek_v3_config.json") as fh:
        return json.load(fh)


def test_path_to_config_json(tmp_path, v3_dict):
    v3_dict["num_hidden_layers"] = 10
    cfg = load_config(str(_write(tmp_path, v3_dict)))
    assert cfg.num_hidden_layers == 10


@pytest.mark.parametrize("field,value,message", [
    ("n_routed_experts", -3, "must be an integer in 1..65,536, got -3"),
    ("n_routed_experts", 2.5, "must be an integer in 1..65,536, got 2.5"),
    ("hidden_size", "7168", "must be an integer in 1..1,048,576, got '7168'"),
    ("num_experts_per_tok", 300, "exceeds n_routed_experts=256 (allowed: 1..256)"),
    ("model_type", "llama", "unsupported model_type 'llama'"),
])
def test_bad_fields_name_file_and_field(tmp_path, v3_dict, field, value, message):
    v3_dict[field] = value
    path = _write(tmp_path, v3_dict)
    with pytest.raises(ConfigError) as exc:
        load_config(str(path))
    assert str(path) in str(exc.value) and field in str(exc.value) and message in str(exc.value)


def test_missing_field(tmp_path, v3_dict):
    del v3_dict["kv_lora_rank"]
    with pytest.raises(ConfigError, match="'kv_lora_rank': missing"):
        load_config(str(_write(tmp_path, v3_dict)))


def test_not_json(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("{oops")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(str(p))
