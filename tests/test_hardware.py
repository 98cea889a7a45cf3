import pytest

from pdcalc.errors import ConfigError, UnknownNameError
from pdcalc.hardware import card_names, get_card
from pdcalc.units import GiB


@pytest.mark.parametrize("name", card_names())
def test_every_preset_has_a_source_and_sane_values(name):
    c = get_card(name)
    assert c.source
    assert c.hbm_bytes > 0 and c.hbm_bandwidth_bytes_per_s > 0 and c.flops_per_s
    if c.hbm_bandwidth_bytes_per_s_range:
        lo, hi = c.hbm_bandwidth_bytes_per_s_range
        assert lo <= c.hbm_bandwidth_bytes_per_s <= hi


def test_910b2_has_64_gib_not_64_gb():
    assert get_card("ascend-910b2").hbm_bytes == 64 * GiB


def test_required_presets_exist():
    assert {"ascend-910b2", "ascend-910c", "h800", "h20", "h200", "b200"} <= set(card_names())


def test_unknown_card_lists_known():
    with pytest.raises(UnknownNameError, match="ascend-910b2"):
        get_card("tpu-v9")


@pytest.mark.parametrize("body,field", [
    ("hbm_bytes = -1\nhbm_bandwidth_bytes_per_s = 1e12\nflops_per_s = {bf16 = 1e15}\n"
     "intra_node_bytes_per_s = 1e11\nscale_out_bytes_per_s = 1e10\n", "hbm_bytes"),
    ("hbm_bytes = 1e11\nhbm_bandwidth_bytes_per_s = 0\nflops_per_s = {bf16 = 1e15}\n"
     "intra_node_bytes_per_s = 1e11\nscale_out_bytes_per_s = 1e10\n", "hbm_bandwidth_bytes_per_s"),
    ("hbm_bytes = 1e11\nflops_per_s = {bf16 = 1e15}\n"
     "intra_node_bytes_per_s = 1e11\nscale_out_bytes_per_s = 1e10\n", "hbm_bandwidth_bytes_per_s"),
])
def test_user_card_file_errors_name_file_and_field(tmp_path, body, field):
    p = tmp_path / "mycard.toml"
    p.write_text(body)
    with pytest.raises(ConfigError) as exc:
        get_card(str(p))
    assert str(p) in str(exc.value) and field in str(exc.value)


def test_user_card_file_loads(tmp_path):
    p = tmp_path / "mycard.toml"
    p.write_text("hbm_bytes = 1e11\nhbm_bandwidth_bytes_per_s = 2e12\nflops_per_s = {bf16 = 1e15}\n"
                 "intra_node_bytes_per_s = 1e11\nscale_out_bytes_per_s = 1e10\nsource = 'my lab'\n")
    assert get_card(str(p)).flops("bf16") == 1e15
