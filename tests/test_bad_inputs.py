"""Regression cases: bad inputs a user gave, each with the one line it must now get (exit status 2), and
inputs that must be accepted with the right result. The property-based tests (test_properties.py)
generate many more of the same kinds."""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path

import pytest
from cli_harness import assert_clean, assert_refused, run_cli

V4, V3 = "deepseek-v4-flash", "deepseek-v3"
MEM = ("--card", "ascend-910b2", "--ep", "8", "--json")
PLAN = ("plan", "--card", "ascend-910b2", "--prompt", "4096", "--output", "1024", "--costs", "roofline")
ROOT = os.geteuid() == 0 if hasattr(os, "geteuid") else False


def config(name: str = V3) -> dict:
    file = {"deepseek-v3": "deepseek_v3_config.json", "deepseek-v4-flash": "deepseek_v4_flash_config.json"}[name]
    return json.loads(resources.files("pdcalc").joinpath("data", "models", file).read_text(encoding="utf-8"))


def card() -> str:
    """The ascend-910b2 preset as a user's TOML file."""
    return ('label = "my card"\nfamily = "ascend"\nhbm_bytes = 68719476736\nhbm_visible_bytes = 65455301591\n'
            'hbm_bandwidth_bytes_per_s = 1.6e12\nhbm_bandwidth_bytes_per_s_range = [1.2e12, 2.0e12]\n'
            'flops_per_s = { fp16 = 376e12, bf16 = 353.9e12, int8 = 752e12 }\n'
            'intra_node_bytes_per_s = 196e9\nscale_out_bytes_per_s = 25e9\ncards_per_node = 8\n')


@pytest.fixture
def write(tmp_path):
    def _write(name: str, content: str | bytes) -> str:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
        return str(path)
    return _write


# -- card files -----------------------------------------------------------------------------------
def test_a_valid_card_file_is_accepted(write):
    assert_clean(run_cli("memory", V4, "--card", write("my.toml", card()), "--ep", "8", "--json"))


@pytest.mark.parametrize("content, fragments", [
    (card().replace("hbm_bandwidth_bytes_per_s_range = [1.2e12, 2.0e12]", "hbm_bandwidth_bytes_per_s_range = 5"),
     ["hbm_bandwidth_bytes_per_s_range"]),
    (card().replace("hbm_visible_bytes = 65455301591", 'hbm_visible_bytes = "x"'), ["hbm_visible_bytes"]),
    (card().replace("hbm_bytes = 68719476736", "hbm_bytes = inf"), ["hbm_bytes"]),
    (card().replace("hbm_bytes = 68719476736", "hbm_bytes = nan"), ["hbm_bytes"]),
    (card().replace("cards_per_node = 8", "cards_per_node = 8.5"), ["cards_per_node"]),
    (card().replace('label = "my card"', "label = 3"), ["label"]),
    (card().replace("flops_per_s = { fp16 = 376e12, bf16 = 353.9e12, int8 = 752e12 }", "flops_per_s = 5"),
     ["flops_per_s"]),
    (card().replace("scale_out_bytes_per_s = 25e9\n", ""), ["scale_out_bytes_per_s", "missing"]),
    ("hbm_bytes = [[[[", ["not valid TOML"]),
    # below any real card: a bandwidth of 1e-300 B/s made step times infinite and shares "nan%"
    (card().replace("hbm_bandwidth_bytes_per_s = 1.6e12", "hbm_bandwidth_bytes_per_s = 1e-300")
     .replace("hbm_bandwidth_bytes_per_s_range = [1.2e12, 2.0e12]\n", ""), ["hbm_bandwidth_bytes_per_s", "10,000,000,000"]),
    (card().replace("hbm_bytes = 68719476736", "hbm_bytes = 1"), ["hbm_bytes", "1,000,000,000"]),
    (card().replace("hbm_visible_bytes = 65455301591", "hbm_visible_bytes = 1e-5"), ["hbm_visible_bytes"]),
    (card().replace("intra_node_bytes_per_s = 196e9", "intra_node_bytes_per_s = 5e-324"), ["intra_node_bytes_per_s"]),
    (card().replace("scale_out_bytes_per_s = 25e9", "scale_out_bytes_per_s = 1e3"), ["scale_out_bytes_per_s"]),
    (card().replace("int8 = 752e12", "int8 = 1e-300"), ["flops_per_s.int8"]),
    (card().replace("[1.2e12, 2.0e12]", "[1e-300, 2.0e12]"), ["hbm_bandwidth_bytes_per_s_range"]),
    (card() + "flops_per_s_range = [1, 376e12]\n", ["flops_per_s_range"]),
    (card() + "ranks_per_card = 0\n", ["ranks_per_card"]),
    (card() + "scale_up_cards = 0\n", ["scale_up_cards"]),
    # a misspelt field is refused, with the close name, not ignored
    (card().replace("hbm_visible_bytes", "hbm_visable_bytes"), ["'hbm_visable_bytes'", "did you mean 'hbm_visible_bytes'"]),
    (card() + "cards_per_nodes = 16\n", ["cards_per_nodes", "did you mean 'cards_per_node'"]),
    (card().replace("bf16 = 353.9e12", "bf61 = 353.9e12"), ["flops_per_s.bf61", "did you mean 'bf16'"]),
    (card() + "extra = 1\n", ["'extra'", "unknown field"]),
])
def test_bad_card_fields_name_the_file_and_field(write, content, fragments):
    path = write("bad.toml", content)
    for cmd in (("memory", V4, "--card", path, "--ep", "8", "--json"),
                ("throughput", V3, "--card", path, "--tp", "8", "--dp", "4", "--context", "2048",
                 "--concurrency", "80", "--json")):
        assert_refused(run_cli(*cmd), path, *fragments)


def test_card_files_are_named_as_given(write, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write("cards/mine.toml", card().replace(", int8 = 752e12", ""))
    given = os.path.join("cards", "mine.toml")
    # a card without the scheme's compute dtype: the file as given, the flag to change and what it can run
    line = assert_refused(run_cli(*PLAN, "--card", given, "--cards", "16", "--concurrency", "64"),
                          f"card {given!r}", "int8", "--quant", "bf16")
    assert "step_kwargs" not in line
    assert_refused(run_cli("throughput", V3, "--card", given, "--tp", "8", "--dp", "4", "--context", "2048",
                           "--concurrency", "80", "--quant", "w8a8"), f"card {given!r}", "int8", "--quant")
    assert_refused(run_cli("memory", V4, "--card", write("cards/low.toml", card().replace("hbm_bytes = 68719476736",
                                                                                          "hbm_bytes = 1")),
                           "--ep", "8"), str(tmp_path / "cards" / "low.toml"), "hbm_bytes")


def test_cards_at_the_lower_bounds_give_finite_results(write):
    low = ('label = "least"\nfamily = "ascend"\nhbm_bytes = 1e15\nhbm_bandwidth_bytes_per_s = 1e10\n'
           'flops_per_s = { fp16 = 1e11, bf16 = 1e11, int8 = 1e11 }\nintra_node_bytes_per_s = 1e8\n'
           'scale_out_bytes_per_s = 1e8\n')
    path = write("least.toml", low)
    out = assert_clean(run_cli("throughput", V3, "--card", path, "--tp", "8", "--dp", "4", "--context", "2048",
                               "--concurrency", "80", "--json"))
    fast = run_cli("throughput", V3, "--card", "ascend-910b2", "--tp", "8", "--dp", "4", "--context", "2048",
                   "--concurrency", "80", "--json").json
    json.loads(out.out, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert out.code == 0 and out.json["phases"]["decode"]["step_s"] > fast["phases"]["decode"]["step_s"]
    plan = assert_clean(run_cli(*PLAN, "--card", path, "--cards", "16", "--concurrency", "64", "--json"))
    json.loads(plan.out, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert plan.code == 0 and plan.json["cards"] == 16


def test_card_files_that_cannot_be_read(write, tmp_path):
    assert_refused(run_cli("memory", V4, "--card", "", "--ep", "8"), "--card", "must not be empty")
    assert_refused(run_cli("memory", V4, "--card", str(tmp_path), "--ep", "8"), str(tmp_path))
    assert_refused(run_cli("memory", V4, "--card", write("latin1.toml", card().encode() + b'# caf\xe9\n'), "--ep", "8"),
                   "latin1.toml")
    assert_refused(run_cli("memory", V4, "--card", write("bin.toml", bytes(range(256))), "--ep", "8"), "bin.toml")
    assert_refused(run_cli("memory", V4, "--card", "/nonexistent/x.toml", "--ep", "8"), "/nonexistent/x.toml")


@pytest.mark.skipif(ROOT, reason="root reads files whatever their mode")
def test_an_unreadable_card_file(write):
    path = write("locked.toml", card())
    os.chmod(path, 0)
    assert_refused(run_cli("memory", V4, "--card", path, "--ep", "8"), path)


# -- config files ---------------------------------------------------------------------------------
def test_config_encodings(write):
    text = json.dumps(config())
    utf16 = run_cli("params", write("u16/config.json", text.encode("utf-16")), "--json")
    assert assert_clean(utf16).code == 0 and utf16.json["total"] == run_cli("params", V3, "--json").json["total"]
    cfg = config()
    cfg["architectures"] = ["DeepseekV3ForCausalLM café"]
    assert_refused(run_cli("params", write("l1/config.json", json.dumps(cfg, ensure_ascii=False).encode("latin-1"))),
                   "config.json")
    assert_refused(run_cli("params", write("bin/config.json", bytes(range(256)) * 4)), "config.json")


def test_configs_too_big_or_too_deep_to_parse(write):
    assert_refused(run_cli("params", write("a/config.json", '{"hidden_size": ' + "7" * 5000 + "}")), "config.json")
    assert_refused(run_cli("params", write("b/config.json", "[" * 100_000 + "]" * 100_000)), "config.json")
    assert_refused(run_cli("params", write("c/config.json", "[1, 2]")), "config.json")


@pytest.mark.parametrize("field, value, commands", [
    ("n_routed_experts", 10**12, ["params", "memory", "throughput", "plan"]),
    ("num_hidden_layers", 10**6, ["params"]),
    ("num_hidden_layers", 10**7, ["params"]),
    ("hidden_size", 7168.5, ["params"]),
    ("hidden_size", "7168", ["params"]),
    ("hidden_size", None, ["params"]),
    ("hidden_size", True, ["params"]),
    ("tie_word_embeddings", "false", ["params"]),
    ("tie_word_embeddings", 0, ["params"]),
    ("num_experts_per_tok", 300, ["params"]),
    ("vocab_size", -1, ["params"]),
])
def test_config_fields_out_of_range_or_of_the_wrong_type(write, field, value, commands):
    cfg = config()
    cfg[field] = value
    path = write(f"{field}/config.json", json.dumps(cfg))
    runs = {"params": ("params", path, "--json"), "memory": ("memory", path, *MEM),
            "throughput": ("throughput", path, "--card", "ascend-910b2", "--tp", "8", "--dp", "4", "--context", "2048",
                           "--concurrency", "80", "--json"),
            "plan": (*PLAN, "--model", path, "--cards", "16", "--concurrency", "64", "--json")}
    for cmd in commands:
        assert_refused(run_cli(*runs[cmd]), path, field)


def test_a_whole_number_float_counts_as_the_integer(write):
    cfg = config()
    cfg["hidden_size"] = float(cfg["hidden_size"])
    out = assert_clean(run_cli("params", write("f/config.json", json.dumps(cfg)), "--json"))
    exact = run_cli("params", V3, "--json").json
    assert out.code == 0
    for key in ("total", "activated", "mtp"):
        assert out.json[key] == exact[key] and isinstance(out.json[key], int)
    assert all(isinstance(v, int) for v in out.json["by_category"].values())


# -- flags ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, fragments", [
    (("memory", V3, "--card", "h800", "--tp", "3"), ["TP degree 3", "128 attention heads"]),
    (("memory", V3, "--card", "h800", "--tp", "7"), ["TP degree 7"]),
    (("memory", V3, "--card", "h800", "--tp", "1000"), ["TP degree 1000"]),
    (("memory", V3, "--card", "h800", "--tp", "0"), ["--tp", "1.."]),
    (("memory", V3, "--card", "h800", "--ep", "8", "--utilization", "1.5"), ["--utilization", "(0, 1]"]),
    (("memory", V3, "--card", "h800", "--ep", "1e3"), ["--ep", "integer"]),
    (("kv", V4, "--context", "-5"), ["--context"]),
    (("kv", V4, "--context", "99999999999"), ["--context", "16,777,216"]),
    ((*PLAN, "--cards", "64", "--rate", "inf"), ["--rate", "finite"]),
    ((*PLAN, "--cards", "64", "--rate", "nan"), ["--rate", "finite"]),
    ((*PLAN, "--cards", "64", "--concurrency", "0"), ["--concurrency", "1.."]),
    ((*PLAN, "--cards", "64", "--concurrency", "8", "--top", "-1"), ["--top"]),
    ((*PLAN, "--cards", "1", "--concurrency", "8"), ["--cards", "2.."]),
    ((*PLAN, "--cards", "64", "--concurrency", "8", "--rate", "1"), ["--rate", "--concurrency"]),
    ((*PLAN, "--cards", "64", "--concurrency", "8", "--ttft-ms", "-1"), ["--ttft-ms"]),
    (("throughput", V3, "--card", "h800", "--tp", "8", "--dp", "4", "--context", "10", "--concurrency", "8",
      "--mfu", "0"), ["--mfu", "(0, 1]"]),
    (("claims", "--article", "v5"), ["--article", "invalid choice"]),
    (("claims", "--verdict", "wrong"), ["--verdict"]),
    (("nonsense",), ["invalid choice"]),
    (("memory", V3), ["--card"]),
    (("params", "deepseek-v9"), ["unknown model 'deepseek-v9'"]),
])
def test_bad_flags_are_one_line(args, fragments):
    assert_refused(run_cli(*args), *fragments)


def test_plan_flags_that_are_now_results():
    top = run_cli(*PLAN, "--cards", "64", "--concurrency", "256", "--top", "3", "--json").json
    assert len(top["ranked"]) == 3
    once = run_cli(*PLAN, "--cards", "64", "--concurrency", "256", "--json").json
    twice = run_cli(*PLAN, "--cards", "64", "--concurrency", "256", "--tp", "1", "1", "--json").json
    assert once == twice  # a repeated TP degree adds no rows
    per_role = run_cli(*PLAN, "--cards", "64", "--concurrency", "256", "--p-tp", "1", "1", "--d-tp", "1", "--json").json
    assert per_role == once  # per-role degrees default to --tp, and repeats are ignored there too
    for flag in ("--p-tp", "--d-tp"):
        assert_refused(run_cli(*PLAN, "--cards", "64", "--concurrency", "256", flag, "-1", "--json"), flag)
        assert_refused(run_cli(*PLAN, "--cards", "64", "--concurrency", "256", flag, "--json"), flag)
    assert_refused(run_cli(*PLAN, "--cards", "64", "--concurrency", "256", "--frontier-points", "257", "--json"),
                   "--frontier-points")
    big = assert_clean(run_cli(*PLAN, "--cards", "8192", "--concurrency", "122880", "--json"))
    assert big.json["cards"] == 8192 and big.json["evaluated"] < 10**6 < big.json["splits"]


def test_the_model_field_means_what_was_given_in_every_command(write):
    path = write("m/config.json", json.dumps(config(V4)))
    runs = [("params", path, "--json"), ("memory", path, *MEM), ("kv", path, "--context", "1024", "--json"),
            ("throughput", path, "--card", "ascend-910b2", "--tp", "1", "--dp", "8", "--ep", "8", "--context", "2048",
             "--concurrency", "8", "--json"),
            (*PLAN, "--model", path, "--cards", "16", "--concurrency", "8", "--json")]
    for args in runs:
        assert assert_clean(run_cli(*args)).json["model"] == path, args[0]
    assert run_cli("memory", V4, *MEM).json["model"] == V4


def test_json_never_holds_a_bare_infinity(write):
    # a card too large for the bound is refused; the JSON of a valid run is strict JSON (no NaN/Infinity)
    out = assert_clean(run_cli(*PLAN, "--cards", "4", "--concurrency", "4096", "--json"))
    json.loads(out.out, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    # the frontier's levels where nothing fits, and saturated co-located options, are null too
    out = assert_clean(run_cli(*PLAN, "--cards", "16", "--rate", "50", "--frontier-points", "8", "--json"))
    data = json.loads(out.out, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert any(row["option"] == "none" and row["tpot_s"] is None for row in data["frontier"])
    big = card().replace("hbm_bytes = 68719476736", "hbm_bytes = 1e300")
    assert_refused(run_cli("memory", V4, "--card", write("huge.toml", big), "--ep", "8", "--json"), "hbm_bytes")


# -- chapter re-runs: refused before anything runs ------------------------------------------------
@pytest.mark.parametrize("chapter, params, fragments", [
    ("v3_throughput", [("other_card", "nope")], ["other_card", "nope"]),
    ("v3_throughput", [("other_quant", "nope")], ["other_quant", "nope"]),
    ("validation", [("scheme", "nope")], ["scheme", "nope"]),
    ("plan", [("cards", "1")], ["cards"]),
    ("plan", [("rate_per_s", "2"), ("concurrency", "64")], ["rate_per_s", "concurrency"]),
    ("plan", [("card", "h800")], ["card", "h800", "int8"]),
    ("plan", [("utilization", "inf")], ["utilization"]),
    ("plan", [("costs", "nope")], ["costs", "roofline", "published", "nope"]),
    ("validation", [("beyond", "maybe")], ["beyond"]),
    ("per_card", [("d_ep", "1000")], ["d_ep"]),
    ("per_card", [("nope", "1")], ["nope"]),
    # what to run plans like plan: a card without the scheme's compute dtype is refused before anything runs
    ("what_to_run", [("card", "h200")], ["card", "h200", "int8", "fp8"]),
    ("what_to_run", [("quant", "fp8")], ["quant", "ascend-910b2", "fp8"]),
    ("what_to_run", [("card", str(Path(__file__).parent / "data" / "cards" / "fp16-only.toml"))], ["card", "fp16-only.toml"]),
    ("what_to_run", [("output_tokens", "1000000")], ["output_tokens", "context"]),
    ("what_to_run", [("tp_options", "[3]")], ["tp_options", "3"]),
])
def test_rerun_parameters_are_refused_before_anything_runs(tmp_path, chapter, params, fragments):
    args = ["rerun", chapter, "-o", str(tmp_path / "out")]
    for name, value in params:
        args += ["-p", name, value]
    assert_refused(run_cli(*args), *fragments)
    assert not (tmp_path / "out").exists()  # nothing ran, nothing was written


@pytest.mark.parametrize("outdir", ["/proc/x", "/dev/null"])
def test_rerun_output_folders_that_cannot_be(outdir):
    assert_refused(run_cli("rerun", "per_card", "-o", outdir), outdir)


def test_rerun_output_folder_that_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    assert_refused(run_cli("rerun", "per_card", "-o", str(f)), str(f))


@pytest.mark.skipif(ROOT, reason="root writes into read-only folders")
def test_rerun_output_folder_read_only(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o500)
    assert_refused(run_cli("rerun", "per_card", "-o", str(ro / "sub")), str(ro))


# -- chapter re-runs: a deployment that does not fit is a result ----------------------------------
def _glued(path) -> dict[str, str]:
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    return {o["metadata"]["scrapbook"]["name"]: "".join(o["data"]["application/papermill.record/text/plain"])
            for c in nb["cells"] for o in c.get("outputs", []) if o.get("metadata", {}).get("scrapbook")}


def test_a_plan_that_does_not_fit_is_stated_in_the_rerun_chapter(tmp_path):
    out = assert_clean(run_cli("rerun", "plan", "-p", "cards", "8", "-o", str(tmp_path)), json_out=False)
    assert out.code == 0, out.err
    glued = _glued(tmp_path / "plan.ipynb")
    assert glued["reason"].startswith("'nothing fits: the closest split") and "short by" in glued["reason"]
    assert "nothing fits" in glued["takeaway_real"]


def test_a_model_too_large_for_the_cards_is_stated_in_the_rerun_chapter(tmp_path, write):
    cfg = config(V4)
    # a V4 with V3's width and depth: about three times V4-Flash's weights
    cfg.update(hidden_size=7168, moe_intermediate_size=3072, num_hidden_layers=61,
               compress_ratios=(cfg["compress_ratios"] * 3)[:62])
    out = assert_clean(run_cli("rerun", "kv_memory", "-p", "model", write("big/config.json", json.dumps(cfg)),
                               "-o", str(tmp_path)), json_out=False)
    assert out.code == 0, out.err
    glued = _glued(tmp_path / "kv_memory.ipynb")
    assert glued["real_C_verdict"].startswith("'does not fit, short by")
    assert "memory, not the scheduler" in glued["d_limit_short"] and int(glued["n_real_max"]) < 30


# -- RoPE fields of a config (read by the engine's buffers: memory --max-num-batched-tokens) -----
ROPE = {"beta_fast": 32, "beta_slow": 1, "factor": 16, "original_max_position_embeddings": 65536, "type": "yarn"}


@pytest.mark.parametrize("field, value, named", [
    ("rope_scaling", "yarn", "rope_scaling"),
    ("rope_scaling", [16, 65536], "rope_scaling"),
    ("rope_scaling", {**ROPE, "factor": "16"}, "rope_scaling.factor"),
    ("rope_scaling", {**ROPE, "factor": float("nan")}, "rope_scaling.factor"),
    ("rope_scaling", {**ROPE, "factor": -16}, "rope_scaling.factor"),
    ("rope_scaling", {**ROPE, "factor": 0.5}, "rope_scaling.factor"),
    ("rope_scaling", {**ROPE, "original_max_position_embeddings": None}, "rope_scaling.original_max_position_embeddings"),
    ("rope_scaling", {**ROPE, "original_max_position_embeddings": 655.36},
     "rope_scaling.original_max_position_embeddings"),
    ("rope_scaling", {**ROPE, "factor": 1024, "original_max_position_embeddings": 2**30}, "rope_scaling.factor"),
    ("rope_scaling", {**ROPE, "beta_fast": float("inf")}, "rope_scaling.beta_fast"),
    ("rope_scaling", {**ROPE, "type": 3}, "rope_scaling.type"),
    ("rope_theta", "10000", "rope_theta"),
    ("compress_rope_theta", -1, "compress_rope_theta"),
])
def test_rope_fields_are_checked(write, field, value, named):
    cfg = config(V4)
    cfg[field] = value
    path = write(f"rope/{named}/config.json", json.dumps(cfg, allow_nan=True))
    for args in (("memory", path, *MEM, "--max-num-batched-tokens", "8192"), ("params", path, "--json")):
        line = assert_refused(run_cli(*args), path)
        assert f"field '{named}'" in line, line


def test_rope_fields_as_whole_number_floats_are_the_same_model(write):
    cfg = config(V4)
    cfg["rope_scaling"] = {**cfg["rope_scaling"], "factor": float(cfg["rope_scaling"]["factor"]),
                           "original_max_position_embeddings": float(cfg["rope_scaling"]["original_max_position_embeddings"])}
    path = write("rope-float/config.json", json.dumps(cfg))
    args = (*MEM, "--max-num-batched-tokens", "8192")
    mine, preset = run_cli("memory", path, *args).json, run_cli("memory", V4, *args).json
    mine.pop("model"), preset.pop("model")
    assert mine == preset
    null = dict(config(V4), rope_scaling=None)  # no scaling: a shorter RoPE table, so more room for KV
    unscaled = run_cli("memory", write("rope-null/config.json", json.dumps(null)), *args).json
    assert unscaled != preset


def test_what_to_run_takes_a_card_with_a_scheme_it_can_run():
    from pdcalc.book.validators import validate

    assert validate("what_to_run", {"card": "h200", "quant": "fp8"}) == {"card": "h200", "quant": "fp8"}


# -- the size of a plan: flags each within bounds, together too large ----------------------------
def test_a_plan_too_large_together_is_refused_up_front():
    from pdcalc.plan.search import MAX_EVALUATED, MAX_FRONTIER_WORK, plan_size
    from pdcalc.plan.workload import Setup

    tps = ["1", "2", "4", "8", "16", "32", "64"]
    line = assert_refused(run_cli(*PLAN, "--cards", "65536", "--tp", *tps, "--frontier-points", "256",
                                  "--concurrency", "122880"), "--cards", "--tp", f"{MAX_EVALUATED:,}")
    size = plan_size(Setup(cards=65536, tp_options=tuple(map(int, tps)), frontier_points=256))
    assert f"{size['evaluated']:,}" in line and size["evaluated"] > MAX_EVALUATED
    # the frontier alone: the largest number of points these cards allow is stated, and accepted
    per_level = plan_size(Setup(cards=8192, frontier_points=1))["per_level"]
    most = MAX_FRONTIER_WORK // per_level
    assert_refused(run_cli(*PLAN, "--cards", "8192", "--frontier-points", str(most + 1), "--concurrency", "64"),
                   "--frontier-points", f"at most {most} points")
    ok = assert_clean(run_cli(*PLAN, "--cards", "8192", "--frontier-points", str(most), "--concurrency", "64", "--json"))
    assert ok.code == 0 and len(ok.json["frontier"]) > 0
    # a chapter re-run is held to the same bound
    assert_refused(run_cli("rerun", "plan", "-p", "cards", "65536", "-o", "/nonexistent/never-written"),
                   "parameter 'cards'", f"{MAX_EVALUATED:,}")


@pytest.mark.parametrize("cards, tps, aggregated", [(16, (1,), True), (64, (1, 2), True), (48, (1, 4), False),
                                                    (256, (2,), True)])
def test_the_plan_size_is_what_the_plan_evaluates(cards, tps, aggregated):
    from pdcalc.plan.search import plan, plan_size
    from pdcalc.plan.workload import Setup, Workload

    setup = Setup(cards=cards, tp_options=tps, aggregated=aggregated, frontier_points=0, costs="roofline")
    p = plan(setup, Workload(prompt_tokens=4096, output_tokens=1024, concurrency=64))
    assert plan_size(setup)["evaluated"] == p.evaluated + p.aggregated_evaluated > 0


# -- DeepSeek's inference configs: errors name the fields as the file names them ------------------
def inference_config() -> dict:
    path = resources.files("pdcalc").joinpath("data", "models", "deepseek_v3_inference_config_671B.json")
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("change, named, absent", [
    ({"n_activated_experts": 1000}, ["'n_activated_experts'", "n_routed_experts"], ["num_experts_per_tok"]),
    ({"n_limited_groups": 100}, ["'n_limited_groups'", "n_expert_groups"], ["topk_group", "n_group="]),
    ({"n_dense_layers": 1000}, ["'n_dense_layers'", "n_layers"], ["first_k_dense_replace", "num_hidden_layers"]),
    ({"dim": "7168"}, ["'dim'"], ["hidden_size"]),
    ({"n_expert_groups": None}, ["'n_limited_groups'", "leaves out n_expert_groups"], ["topk_group", "n_group="]),
])
def test_inference_config_errors_name_the_files_own_fields(write, change, named, absent):
    cfg = inference_config()
    for key, value in change.items():
        if value is None:
            del cfg[key]
        else:
            cfg[key] = value
    path = write(f"inference/{next(iter(change))}/config.json", json.dumps(cfg))
    for args in (("params", path, "--json"), ("memory", path, *MEM)):
        line = assert_refused(run_cli(*args), path, *named)
        assert not any(a in line for a in absent), line


def test_a_card_below_any_real_one_is_refused_by_chapter_reruns(write, tmp_path):
    tiny = card().replace("hbm_bandwidth_bytes_per_s = 1.6e12", "hbm_bandwidth_bytes_per_s = 1e-300").replace(
        "hbm_bandwidth_bytes_per_s_range = [1.2e12, 2.0e12]\n", "")
    path = write("tiny.toml", tiny)
    for chapter in ("plan", "what_to_run", "per_card"):
        assert_refused(run_cli("rerun", chapter, "-p", "card", path, "-o", str(tmp_path / "out")),
                       "parameter 'card'", path, "hbm_bandwidth_bytes_per_s")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("quant,alt", [("w8a8-msmodelslim", "w8a8"), ("w4a8-msmodelslim", "w4a8")])
def test_a_v4_recipe_asked_of_another_model_is_refused(quant, alt):
    """DeepSeek-V4's msModelSlim recipes name V4's layers: asked of DeepSeek-V3, the command names the flag and the
    scheme that fits, in one line."""
    assert_refused(run_cli("memory", V3, "--card", "ascend-910c-die", "--quant", quant, "--ep", "16"),
                   f"--quant {quant}", f"--quant {alt}")
