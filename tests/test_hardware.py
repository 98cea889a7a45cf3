from pathlib import Path

import pytest

from pdcalc.core.errors import ConfigError, UnknownNameError
from pdcalc.core.units import GiB, MiB
from pdcalc.hardware.cards import FAMILIES, card_names, get_card

ASCEND = [n for n in card_names() if get_card(n).family == "ascend"]
CARD = ("family = 'nvidia'\nhbm_bytes = 1e11\nhbm_bandwidth_bytes_per_s = 2e12\nflops_per_s = {bf16 = 1e15}\n"
        "intra_node_bytes_per_s = 1e11\nscale_out_bytes_per_s = 1e10\n")


def _file(tmp_path, body, name="mycard.toml"):
    p = tmp_path / name
    p.write_text(body)
    return str(p)


@pytest.mark.parametrize("name", card_names())
def test_every_preset_has_a_source_and_sane_values(name):
    c = get_card(name)
    assert c.source
    assert c.hbm_bytes > 0 and c.hbm_bandwidth_bytes_per_s > 0 and c.flops_per_s
    if c.hbm_bandwidth_bytes_per_s_range:
        lo, hi = c.hbm_bandwidth_bytes_per_s_range
        assert lo <= c.hbm_bandwidth_bytes_per_s <= hi
    if c.hbm_visible_bytes:
        assert c.hbm_visible_bytes < c.hbm_bytes


@pytest.mark.parametrize("name", card_names())
def test_every_figure_a_preset_sets_has_a_source(name):
    c = get_card(name)
    figures = c.figures()
    assert {"hbm_bytes", "hbm_bandwidth_bytes_per_s", "intra_node_bytes_per_s", "scale_out_bytes_per_s",
            "cards_per_node"} <= set(figures)
    assert {f"flops_per_s.{k}" for k in c.flops_per_s} <= set(figures)
    missing = [f for f in figures if not c.source_of(f).strip()]
    assert not missing, f"{name}: no source for {missing}"
    # an assumed figure still says what was assumed; a sourced one is not silently marked assumed
    for row in c.provenance():
        assert row["source"] and row["unit"] and min(row["value"] if isinstance(row["value"], tuple)
                                                     else (row["value"],)) > 0
        assert row["assumed"] == (row["figure"] in c.assumed)


def test_assumed_figures_are_listed_and_explained():
    assumed = {n: get_card(n).assumed for n in card_names() if get_card(n).assumed}
    assert assumed == {
        "ascend-910b4-32g": ("hbm_bandwidth_bytes_per_s", "intra_node_bytes_per_s", "scale_out_bytes_per_s"),
        "h800": ("hbm_bytes",),
    }
    for n in assumed:
        c = get_card(n)
        assert len(c.assumption) > 40
        assert all(c.source_of(f) for f in c.assumed)
        assert [r["figure"] for r in c.provenance() if r["assumed"]] == list(c.assumed)


def test_910b2_has_64_gib_not_64_gb():
    assert get_card("ascend-910b2").hbm_bytes == 64 * GiB


def test_h200_memory_is_what_nvidia_smi_reports():
    c = get_card("h200")
    assert c.hbm_bytes == 143_771 * MiB == 150_754_820_096
    assert c.hbm_marketed_bytes == 141e9 and c.hbm_bytes > c.hbm_marketed_bytes
    assert "143771MiB" in c.source_of("hbm_bytes")
    assert c.hbm_visible_bytes == pytest.approx(139.72 * GiB, abs=0.005 * GiB)


@pytest.mark.parametrize("name, mib, marketed", [("h100", 81_559, 80e9), ("h800", 81_559, 80e9),
                                                 ("h20", 97_871, 96e9), ("b200", 183_359, 180e9)])
def test_nvidia_memory_is_the_nvidia_smi_total(name, mib, marketed):
    c = get_card(name)
    assert c.hbm_bytes == mib * MiB
    assert c.hbm_marketed_bytes == marketed
    assert f"{mib}MiB" in c.source_of("hbm_bytes")


def test_h100_sxm_preset():
    c = get_card("h100")
    assert c.family == "nvidia" and c.cards_per_node == 8
    assert c.hbm_bytes == 81_559 * MiB and c.hbm_visible_bytes == 85_045_477_376
    assert c.hbm_bandwidth_bytes_per_s == 3.35e12
    assert c.flops_per_s == {"bf16": 989e12, "fp16": 989e12, "fp8": 1979e12, "int8": 1979e12}
    assert c.intra_node_bytes_per_s == 900e9 / 2        # NVLink 900 GB/s bidirectional
    assert c.scale_out_bytes_per_s == 400e9 / 8          # one 400 Gb/s NIC per GPU
    assert not c.assumed


@pytest.mark.parametrize("name", ASCEND)
def test_every_ascend_preset_can_run_w8a8_and_bf16(name):
    c = get_card(name)
    assert {"int8", "bf16"} <= set(c.flops_per_s)
    assert c.flops("int8") == 2 * c.flops("fp16")        # every Ascend source gives INT8 = 2 x FP16
    assert c.flops("bf16") <= c.flops("fp16")


@pytest.mark.parametrize("name, fp16, bf16, int8", [("ascend-910b3", 313e12, 294.9e12, 626e12),
                                                    ("ascend-910b4", 280e12, 245.8e12, 560e12),
                                                    ("ascend-910b4-32g", 280e12, 245.8e12, 560e12),
                                                    ("ascend-910c", 752e12, 752e12, 1504e12)])
def test_ascend_peaks(name, fp16, bf16, int8):
    assert get_card(name).flops_per_s == {"fp16": fp16, "bf16": bf16, "int8": int8}


def test_ascend_memory():
    assert get_card("ascend-910b3").hbm_visible_bytes == get_card("ascend-910b4").hbm_visible_bytes == 65455301591
    assert 65455301591 == int(60.96 * GiB)
    assert get_card("ascend-910b4-32g").hbm_visible_bytes is None       # no public figure
    c = get_card("ascend-910c")
    assert c.hbm_bytes == 2 * 64 * GiB and c.hbm_marketed_bytes == 128e9


def test_every_preset_has_a_family():
    assert {get_card(n).family for n in card_names()} == set(FAMILIES)
    assert {n for n in card_names() if get_card(n).family == "nvidia"} == {"h100", "h800", "h20", "h200", "b200",
                                                                          "b300", "gb200", "gb300"}
    assert {n for n in card_names() if get_card(n).family == "ascend"} == {
        "ascend-910b2", "ascend-910b3", "ascend-910b4", "ascend-910b4-32g", "ascend-910c", "ascend-910c-die"}


def test_a_card_file_named_like_a_preset_is_not_the_preset(tmp_path):
    """A user's card is never taken for a preset by its file name: published figures measured on the preset
    reach it only as carried shares (pdcalc.perf.kernels.nearest_card), and it keeps its own device counts."""
    import tomllib

    from pdcalc.perf.kernels import nearest_card

    raw = tomllib.loads((Path(__file__).parents[1] / "pdcalc" / "data" / "hardware.toml").read_text())["ascend-910c"]
    raw = {k: v for k, v in raw.items() if k not in ("sources", "ranks_per_card", "scale_up_cards")}
    f = tmp_path / "ascend-910c.toml"
    f.write_text("\n".join(f"{k} = {v!r}" if not isinstance(v, dict) else
                           f"{k} = {{ {', '.join(f'{a} = {b!r}' for a, b in v.items())} }}" for k, v in raw.items()))
    mine, preset = get_card(str(f)), get_card("ascend-910c")
    assert mine.name == preset.name == "ascend-910c" and preset.preset and not mine.preset
    assert (mine.ranks, mine.scale_up_domain) == (1, 8) and (preset.ranks, preset.scale_up_domain) == (2, 384)
    assert nearest_card(preset, {"ascend-910c", "h800"}) == "ascend-910c"
    assert nearest_card(mine, {"ascend-910c", "h800"}) == "ascend-910c"     # carried from the family's card
    assert nearest_card(mine, {"h800"}) == "h800"


def test_required_presets_exist():
    assert {"ascend-910b2", "ascend-910c", "h100", "h800", "h20", "h200", "b200"} <= set(card_names())


def test_unknown_card_lists_known():
    with pytest.raises(UnknownNameError, match="ascend-910b2"):
        get_card("tpu-v9")


@pytest.mark.parametrize("body,field", [
    (CARD.replace("hbm_bytes = 1e11", "hbm_bytes = -1"), "hbm_bytes"),
    (CARD.replace("= 2e12", "= 0"), "hbm_bandwidth_bytes_per_s"),
    (CARD.replace("hbm_bandwidth_bytes_per_s = 2e12\n", ""), "hbm_bandwidth_bytes_per_s"),
    (CARD.replace("family = 'nvidia'", "family = 'amd'"), "family"),
    (CARD.replace("family = 'nvidia'", "family = 3"), "family"),
    (CARD + "hbm_marketed_bytes = -5\n", "hbm_marketed_bytes"),
    (CARD + "assumed = ['hbm_bytes']\n", "assumption"),
    (CARD + "assumed = ['flops_per_s.int8']\nassumption = 'x'\n", "assumed"),
    (CARD + "assumed = 'hbm_bytes'\nassumption = 'x'\n", "assumed"),
    (CARD + "assumption = 'nothing listed'\n", "assumed"),
    (CARD + "[sources]\nhbm_bytez = 'typo'\n", "sources.hbm_bytez"),
    (CARD + "[sources]\nhbm_bytes = ''\n", "sources.hbm_bytes"),
    (CARD + "sources = 5\n", "sources"),
])
def test_user_card_file_errors_name_file_and_field(tmp_path, body, field):
    p = _file(tmp_path, body)
    with pytest.raises(ConfigError) as exc:
        get_card(p)
    msg = str(exc.value)
    assert p in msg and f"field {field!r}" in msg and "\n" not in msg


def test_card_file_without_family_fails_with_one_line_naming_it(tmp_path):
    p = _file(tmp_path, CARD.replace("family = 'nvidia'\n", ""))
    with pytest.raises(ConfigError) as exc:
        get_card(p)
    msg = str(exc.value)
    assert msg.startswith(f"{p}: field 'family': missing") and "ascend, nvidia" in msg and "\n" not in msg


def test_user_card_file_loads(tmp_path):
    p = _file(tmp_path, CARD + "source = 'my lab'\nassumed = ['flops_per_s.bf16']\nassumption = 'half the FP8 peak'\n"
                     "[sources]\nhbm_bytes = 'nvidia-smi here'\n")
    c = get_card(p)
    assert c.flops("bf16") == 1e15 and c.family == "nvidia"
    assert c.source_of("hbm_bytes") == "nvidia-smi here"
    assert c.source_of("flops_per_s.bf16") == "assumed: half the FP8 peak"
    assert c.source_of("scale_out_bytes_per_s") == ""
