import copy
import math
import tomllib
from importlib import resources

import pytest

from pdcalc.core.errors import ConfigError, UnknownNameError
from pdcalc.core.quotes import number_in_text
from pdcalc.layout.served import spec_from_dict
from pdcalc.reality import served_runs as sr

RUNS = sr.load()
RAW = tomllib.loads(resources.files("pdcalc").joinpath("data", "served.toml").read_text(encoding="utf-8"))["run"]

RUN_TOML = """
[[run]]
id = "test-run"
source_id = "doc"
source = "a document"
url = "https://example.org/doc"
locator = "table 1"
date = "2026-01-01"
kind = "measured"
model_stated = "DeepSeek-R1"
card_stated = "8x H200"
engine_version = "v1"
client = "vllm bench serve"
graph_mode = "not stated"
unstated = []
notes = "a test"

[run.spec]
model = "deepseek-v3"
card = "h200"
quant = "fp8"
engine = "vllm"
[run.spec.serve]
tp = 8
[run.spec.workload]
prompt = 1000
output = 1000
concurrency = 16

[[run.metric]]
name = "output_tokens_per_s"
value = 795.3
quote = "Output token throughput (tok/s):          795.30"
scope = "deployment"
kind = "measured"
"""


def _file(tmp_path, text):
    p = tmp_path / "served.toml"
    p.write_text(text, encoding="utf-8")
    return p


def _error(tmp_path, text) -> str:
    with pytest.raises(ConfigError) as exc:
        sr.load_file(_file(tmp_path, text))
    msg = str(exc.value)
    assert "\n" not in msg and "run test-run" in msg
    return msg


# ------------------------------------------------------------------ the corpus meets its floor
def test_the_corpus_meets_its_floor():
    s = sr.summary()
    assert s["runs"] == len(RUNS) == len(RAW) >= 80
    assert s["ascend"] >= 20 and s["v4"] >= 15 and s["engines"] >= 3 and s["sources"] >= 10
    assert s["ascend_910b"] >= 2                       # A2 servers, not only A3
    assert s["predictable"] >= 60
    assert sum(s["by_vendor"].values()) == s["runs"] and set(s["by_vendor"]) <= {"ascend", "nvidia", "amd"}
    assert set(s["by_model_family"]) <= set(sr.MODEL_FAMILIES)
    assert {"vllm", "vllm-ascend", "sglang", "trtllm"} <= set(s["by_engine"])


def test_ids_are_unique_and_every_run_has_a_source_and_a_metric():
    ids = [r["id"] for r in RAW]
    assert len(set(ids)) == len(ids)
    for run in RUNS:
        assert run.source_id and run.source and run.url.startswith("http") and run.locator
        assert run.metrics and run.kind in sr.KINDS


def test_every_quote_prints_its_value():
    for raw in RAW:
        for m in raw["metric"]:
            assert number_in_text(m["value"], m["quote"]), (raw["id"], m["name"], m["value"])
            assert m["scope"] in sr.SCOPES and m["kind"] in sr.KINDS and m["name"] in sr.METRIC_NAMES


def test_every_predictable_run_has_a_spec_that_validates():
    predictable = [r for r in RUNS if r.predictable]
    assert predictable
    for run in predictable:
        assert run.spec is not None and run.spec_error is None, run.id
        assert run.spec.quant is not None and run.spec.cards == run.cards > 0
        # the table as written validates on its own, and to the same spec
        again = spec_from_dict(copy.deepcopy(next(r["spec"] for r in RAW if r["id"] == run.id)), "again")
        assert again == run.spec
        for role in run.spec.roles().values():
            assert role.cards_per_instance == role.tp * role.dp


def test_every_not_predictable_run_says_why():
    rest = [r for r in RUNS if not r.predictable]
    assert rest
    for run in rest:
        assert run.not_predictable.strip() and len(run.not_predictable) > 10, run.id
        assert (run.spec is None) == (run.spec_error is not None)
    # a spec that does not validate is only ever a not-predictable run's
    assert all(not r.predictable for r in RUNS if r.spec is None)
    reasons = " ".join(r.not_predictable for r in rest)
    for why in ("no AMD card preset", "NVFP4", "W4A8"):
        assert why in reasons


def test_spec_names_are_presets_or_absent():
    for raw in RAW:
        spec = raw["spec"]
        if "card" in spec:
            assert spec["card"] in sr.card_names(), raw["id"]
        assert spec.get("model") in (None, *sr.PRESET_FAMILY)
    # DeepSeek-V4-Pro runs name the deepseek-v4-pro preset; those left unpredicted say why, and no reason
    # still claims the preset is missing
    v4pro = [r for r in RUNS if "v4-pro" in r.model_stated.lower() or "v4 pro" in r.model_stated.lower()]
    assert v4pro and all(r.spec_table.get("model") == "deepseek-v4-pro" for r in v4pro)
    assert any(r.predictable for r in v4pro) and any(not r.predictable for r in v4pro)
    assert not any("no preset for DeepSeek-V4-Pro" in (r.not_predictable or "") for r in RUNS)


# ------------------------------------------------------------------ conversions that must hold
def test_sglang_layouts_are_counted_per_dp_rank():
    run = sr.get("sglang-ascend-a3-r1-w8a8-pd-p32-d32-3500-1500-c832")
    d = run.spec.decode                     # --tp-size 32 --dp-size 32 --enable-dp-attention, 832 running
    assert (d.tp, d.dp, d.ep, d.max_num_seqs) == (1, 32, 32, 26)
    p = run.spec.prefill                    # two instances of --tp-size 16 --dp-size 2, 8 running each
    assert (p.instances, p.tp, p.dp, p.max_num_seqs) == (2, 8, 2, 4)
    assert run.spec.cards == 64 and run.vendor == "ascend" and run.card == "ascend-910c-die"


def test_prefill_delay_passes_follow_each_launch():
    """A run's prefill_delay_passes is its launch's --enable-prefill-delayer, with the launch's pass count or
    SGLang's default; a launch without the flag has none."""
    import re

    from pdcalc.layout.served import SGLANG_PREFILL_DELAY_PASSES

    delayed = 0
    for r in RUNS:
        if r.spec is None:
            continue
        for role, flags in r.launch:
            got = getattr(r.spec, role).prefill_delay_passes if getattr(r.spec, role, None) else None
            if "--enable-prefill-delayer" not in flags:
                assert got is None, r.id
                continue
            delayed += 1
            stated = re.search(r"--prefill-delayer-max-delay-passes[ =](\d+)", flags)
            assert got == (int(stated.group(1)) if stated else SGLANG_PREFILL_DELAY_PASSES), r.id
    assert delayed


def test_a2_runs_use_the_910b2_preset_and_say_so():
    a2 = [r for r in RUNS if (r.card or "").startswith("ascend-910b")]
    assert a2 and all(r.card == "ascend-910b2" and "910b2" in r.notes for r in a2)


def test_ci_baselines_are_marked():
    baselines = [r for r in RUNS if r.kind == "baseline"]
    assert baselines and all(r.engine == "vllm-ascend" for r in baselines)
    assert all(m.kind == "baseline" for r in baselines for m in r.metrics)


def test_get_and_metric():
    run = sr.get("sglang-cookbook-r1-b200-tp8-1k1k-c16")
    assert run.metric("output_tokens_per_s").value == 795.3 and run.metric("no_such_metric") is None
    assert (run.vendor, run.model_family, run.serving) == ("nvidia", "v3", "colocated")
    with pytest.raises(UnknownNameError, match="served run"):
        sr.get("no-such-run")


def test_frame():
    df = sr.frame()
    assert len(df) == len(RUNS) and list(df["id"]) == [r.id for r in RUNS]
    for col in ("vendor", "model_family", "engine", "card", "serving", "cards", "prompt", "output", "concurrency",
                "request_rate", "num_prompts", "dataset", "draft_tokens", "kind", "predictable", *sr.FRAME_METRICS):
        assert col in df.columns
    assert df["predictable"].sum() == sr.summary()["predictable"]
    assert set(df["serving"]) == {"colocated", "disaggregated"}
    row = df.set_index("id").loc["sglang-cookbook-r1-b200-tp8-1k1k-c1"]
    assert row["output_tokens_per_s"] == 105.24 and row["tpot_ms_mean"] == 9.16 and row["cards"] == 8
    assert math.isnan(row["output_tokens_per_s_per_card"]) and row["request_rate"] == math.inf


# ------------------------------------------------------------------ malformed entries
def test_the_template_run_loads(tmp_path):
    (run,) = sr.load_file(_file(tmp_path, RUN_TOML))
    assert run.predictable and run.spec.cards == 8 and run.metric("output_tokens_per_s").value == 795.3


def test_a_quote_without_its_value_is_an_error(tmp_path):
    msg = _error(tmp_path, RUN_TOML.replace("795.30", "79.53"))
    assert "metric[0].quote" in msg and "795.3" in msg


def test_an_unknown_spec_field_is_an_error(tmp_path):
    msg = _error(tmp_path, RUN_TOML.replace("tp = 8", "tp = 8\ntensor_parallel = 8"))
    assert "spec.serve.tensor_parallel" in msg and "unknown field" in msg
    msg = _error(tmp_path, RUN_TOML.replace('engine = "vllm"', 'engine = "vllm"\nmodel_path = "x"'))
    assert "spec.model_path" in msg


@pytest.mark.parametrize("old, new, field", [
    ('card = "h200"', 'card = "h999"', "card"),                         # spec checked by spec_from_dict
    ("tp = 8", "tp = 3", "[serve] tp"),                                  # 3 does not divide 128 heads
    ('quant = "fp8"\n', "", "spec.quant"),                               # a predictable run states its scheme
    ("concurrency = 16", "", "[workload]"),
    ('scope = "deployment"', 'scope = "per rack"', "metric[0].scope"),
    ('name = "output_tokens_per_s"', 'name = "output_tok_s"', "metric[0].name"),
    ('kind = "measured"\nmodel', 'kind = "baseline"\nmodel', "kind"),   # metrics are measured
    ('notes = "a test"', 'notes = "a test"\nnot_predictable = " "', "not_predictable"),
    ('notes = "a test"', 'notes = "a test"\ncomment = "x"', "comment"),
])
def test_malformed_entries_name_the_run_and_the_field(tmp_path, old, new, field):
    assert old in RUN_TOML
    assert f"'{field}" in _error(tmp_path, RUN_TOML.replace(old, new, 1))


def test_a_not_predictable_run_may_have_an_incomplete_spec(tmp_path):
    text = RUN_TOML.replace('model = "deepseek-v3"\n', "").replace(
        'notes = "a test"', 'notes = "a test"\nnot_predictable = "no preset for the model"')
    (run,) = sr.load_file(_file(tmp_path, text))
    assert run.spec is None and "model" in run.spec_error and not run.predictable
    assert run.card == "h200" and run.vendor == "nvidia" and run.cards == 8
    # ... but still only known fields
    _error(tmp_path, text.replace("tp = 8", "tp = 8\npp = 2"))


def test_duplicate_ids_are_an_error(tmp_path):
    msg = _error(tmp_path, RUN_TOML + RUN_TOML)
    assert "duplicate id" in msg
