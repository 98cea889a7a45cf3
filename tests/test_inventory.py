import pytest

from pdcalc.core.errors import UnknownNameError
from pdcalc.model.config import MODEL_NAMES, load_config
from pdcalc.model.inventory import CATEGORIES, get_inventory

OFFICIAL = ["deepseek-v3", "deepseek-v4-flash", "deepseek-v4-pro"]


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_categories_add_up_to_total(name):
    inv = get_inventory(name)
    c = inv.counts()
    assert sum(c.by_category.values()) == c.total
    assert set(c.by_category) <= set(CATEGORIES)
    assert inv.source


@pytest.mark.parametrize("name", OFFICIAL)
def test_activated_below_total_and_mtp_apart(name):
    inv = get_inventory(name)
    c = inv.counts()
    assert 0 < c.activated < c.total
    assert c.mtp > 0
    assert inv.params(part="all") == c.total + c.mtp
    # nothing of the MTP module leaks into the main model
    assert not any(t.part == "mtp" for t in inv.tensors if t.layer is not None and t.layer < inv.config.num_hidden_layers)


@pytest.mark.parametrize("name", OFFICIAL)
def test_routed_experts_are_the_only_ep_tensors(name):
    inv = get_inventory(name)
    for t in inv.tensors:
        assert (t.shard == "ep") == (t.category == "routed_experts"), t.name
        if t.shard == "ep":
            assert t.count == inv.n_routed_experts


def test_v3_routed_expert_size_from_config():
    cfg = load_config("deepseek-v3")
    inv = get_inventory("deepseek-v3")
    per_expert = 3 * cfg.hidden_size * cfg.moe_intermediate_size
    assert inv.params(category="routed_experts") == per_expert * cfg.n_routed_experts * cfg.n_moe_layers


@pytest.mark.parametrize("name", ["deepseek-v4-flash", "deepseek-v4-pro"])
def test_v4_layer_kinds(name):
    cfg = load_config(name)
    inv = get_inventory(name)
    df = inv.frame()
    main = df[df.part == "main"]
    compressor_layers = set(main[main.category == "kv_compressor"].layer)
    indexer_layers = set(main[main.category == "indexer"].layer)
    assert compressor_layers == {i for i in range(cfg.num_hidden_layers) if cfg.compress_ratios[i]}
    assert indexer_layers == {i for i in range(cfg.num_hidden_layers) if cfg.compress_ratios[i] == 4}
    hash_layers = set(main[main.category == "hash_routing"].layer)
    assert hash_layers == set(range(cfg.num_hash_layers))


@pytest.mark.parametrize("name", ["deepseek-v4-flash", "deepseek-v4-pro"])
def test_v4_lm_head_is_untied(name):
    inv = get_inventory(name)
    assert inv.params(category="lm_head") == inv.params(category="embedding") > 0


def test_config_path_equals_preset(tmp_path):
    from importlib import resources
    src = resources.files("pdcalc").joinpath("data", "models", "deepseek_v4_flash_config.json")
    p = tmp_path / "config.json"
    p.write_text(src.read_text())
    assert get_inventory(str(p)).counts().total == get_inventory("deepseek-v4-flash").counts().total


def test_unknown_model():
    with pytest.raises(UnknownNameError, match="deepseek-v4-flash-article"):
        get_inventory("deepseek-v5")
