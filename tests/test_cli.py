import json
import subprocess
import sys

import pytest
from test_reference import REFERENCE_TOTALS


def run(*args):
    return subprocess.run([sys.executable, "-m", "pdcalc.cli", *args], capture_output=True, text=True)


@pytest.mark.parametrize("model", list(REFERENCE_TOTALS))
def test_params_json_equals_reference(model):
    out = run("params", model, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["total"] == REFERENCE_TOTALS[model]["main"]
    if "mtp" in REFERENCE_TOTALS[model]:
        assert data["mtp"] == REFERENCE_TOTALS[model]["mtp"]
    assert 0 < data["activated"] < data["total"]
    assert sum(data["by_category"].values()) == data["total"]


def test_params_of_a_config_path(tmp_path):
    from importlib import resources
    src = resources.files("pdcalc").joinpath("data", "models", "deepseek_v3_config.json").read_text()
    cfg = json.loads(src)
    cfg["num_hidden_layers"] = 4  # a small deepseek_v3-type model
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    data = json.loads(run("params", str(p), "--json").stdout)
    assert data["total"] < REFERENCE_TOTALS["deepseek-v3"]["main"]


@pytest.mark.parametrize("args,message", [
    (("params", "deepseek-v9"), "unknown model 'deepseek-v9'; known: deepseek-v2, deepseek-v2-lite, deepseek-v3"),
    (("params", "/nonexistent/config.json"), "no such file"),
    (("claims", "--article", "v5"), "invalid choice"),
])
def test_user_errors_are_one_line_and_nonzero(args, message):
    out = run(*args)
    assert out.returncode != 0
    assert message in out.stderr
    assert "Traceback" not in out.stderr
    if args[0] == "params":
        assert len(out.stderr.strip().splitlines()) == 1


def test_list_shows_presets_and_schemes():
    data = json.loads(run("list", "--json").stdout)
    assert {"deepseek-v3", "deepseek-v4-flash", "deepseek-v4-flash-article", "deepseek-v3-article"} <= set(data["models"])
    assert {"ascend-910b2", "ascend-910c", "h800", "h20", "h200", "b200"} <= set(data["cards"])
    assert {"bf16", "fp8", "fp8-fp4", "w8a8", "article-1byte"} <= set(data["quantization"])


def test_claims_article_filter():
    rows = json.loads(run("claims", "--article", "v3", "--json").stdout)
    assert rows and {r["article"] for r in rows} == {"v3"}


def test_claims_text_shows_the_severity_of_errata():
    from pdcalc.audit import claims

    out = run("claims", "--article", "v3", "--verdict", "erratum", "--severity", "major")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    majors = [c for c in claims.claims("v3") if c.verdict == "erratum" and c.severity == "major"]
    assert lines[0].startswith("match: 0  rounding: 0  erratum: ")
    assert len(lines) == 1 + len(majors)
    assert all(line.rstrip().endswith("[erratum, major]") for line in lines[1:])


def test_memory_json():
    data = json.loads(run("memory", "deepseek-v4-flash", "--card", "ascend-910b2", "--ep", "32", "--json").stdout)
    assert data["experts_per_card"] == 8
    assert data["weights_bytes"] == pytest.approx(sum(data["weights_by_category_bytes"].values()))
    assert data["left_for_kv_bytes"] == pytest.approx(
        data["usable_bytes"] - data["weights_bytes"] - data["activations_and_framework_bytes"])
    assert data["fits"] is True


def test_memory_counts_what_the_book_counts():
    """`memory --context` leaves the room the KV chapter's D card leaves (weights, the article's activations and
    framework, utilisation) and so counts the same sequences."""
    from pdcalc.audit import registry
    from pdcalc.core.units import GB
    from pdcalc.layout.memory import D_OVERHEAD_BYTES, P_OVERHEAD_BYTES, card_plan
    from pdcalc.model.kv_cache import sequences_that_fit

    act, fw = registry.printed_value("v4-6.3-d-act"), registry.printed_value("v4-6.3-d-framework")
    assert D_OVERHEAD_BYTES == (act + fw) * GB
    assert P_OVERHEAD_BYTES == (registry.printed_value("v4-6.2-p-act") + registry.printed_value("v4-6.2-p-framework")) * GB
    context = int(registry.printed_value("v4-6.2-max-model-len"))
    plan = card_plan("D", "deepseek-v4-flash", "w8a8-msmodelslim", "ascend-910b2", ep=32, activation_bytes=act * GB,
                     framework_bytes=fw * GB)
    data = json.loads(run("memory", "deepseek-v4-flash", "--card", "ascend-910b2", "--ep", "32", "--context",
                          str(context), "--json").stdout)
    assert data["left_for_kv_bytes"] == pytest.approx(plan.room_bytes(), rel=1e-12)
    assert data["kv"]["sequences_that_fit"] == sequences_that_fit(plan.room_bytes(), context, "deepseek-v4-flash",
                                                                  "vllm-ascend", include_mtp=True)


def test_memory_that_does_not_fit_is_a_result():
    out = run("memory", "deepseek-v4-flash", "--card", "ascend-910b2", "--ep", "4", "--json")
    assert out.returncode == 0
    data = json.loads(out.stdout)
    assert data["fits"] is False and data["verdict"].startswith("does not fit, short by")


@pytest.mark.parametrize("args,message", [
    (("--card", "tpu-v9", "--ep", "8"), "unknown card 'tpu-v9'; known: ascend-910b2"),
    (("--card", "ascend-910b2", "--ep", "300"), "cannot spread 256 experts"),
    (("--card", "ascend-910b2", "--ep", "8", "--quant", "int3"), "unknown quantization scheme 'int3'"),
])
def test_memory_errors(args, message):
    out = run("memory", "deepseek-v4-flash", *args)
    assert out.returncode == 2 and message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_kv_json_parts_add_up():
    data = json.loads(run("kv", "deepseek-v4-flash", "--context", "16384", "--json").stdout)
    assert data["total_bytes"] == pytest.approx(sum(data["by_cache_bytes"].values()), rel=1e-9)
    assert data["per_token_bytes_average"] == pytest.approx(data["total_bytes"] / 16384, rel=1e-12)
    assert 0 < data["fixed_bytes"] < data["total_bytes"]


def test_kv_v3_equals_published_mla_size():
    # 70,272 B/token: arXiv 2505.09343 Table 1 (61 x (512 + 64) x 2 B), reference engine, no MTP
    data = json.loads(run("kv", "deepseek-v3", "--context", "1000", "--engine", "reference", "--no-mtp",
                          "--json").stdout)
    assert data["per_token_bytes_asymptotic"] == 70272


@pytest.mark.parametrize("args,message", [
    (("--context", "100", "--engine", "sglang"), "argument --engine: invalid choice: 'sglang'"),
    (("--context", "-5"), "context"),
])
def test_kv_errors(args, message):
    out = run("kv", "deepseek-v4-flash", *args)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_throughput_json_matches_the_step_model():
    from pdcalc.perf import step as tput

    args = ("throughput", "deepseek-v3", "--card", "ascend-910b2", "--tp", "8", "--dp", "4", "--ep", "32",
            "--context", "2048", "--concurrency", "80", "--json")
    out = run(*args, "--costs", "roofline")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    for phase in ("prefill", "decode"):
        st = tput.step("deepseek-v3", "ascend-910b2", tp=8, dp=4, ep=32, context=2048, concurrency=80, phase=phase)
        assert data["phases"][phase]["step_s"] == pytest.approx(float(st.time_s), rel=1e-12)
        assert data["phases"][phase]["bound"] == str(st.bound)
        assert data["phases"][phase]["tokens_per_s"] == pytest.approx(float(st.tokens_per_s), rel=1e-12)
    # the default: the published kernels times the served terms, plus their host time per step
    served = json.loads(run(*args).stdout)
    t = served["served_terms"]
    for phase, k in (("prefill", t["k_prefill"]), ("decode", t["k_decode"])):
        st = tput.step("deepseek-v3", "ascend-910b2", tp=8, dp=4, ep=32, context=2048, concurrency=80, phase=phase,
                       costs="published")
        host = t["host_ms"] / 1e3 * t["dp_host_factor"]             # DP 4: the ranks step together
        assert served["phases"][phase]["step_s"] == pytest.approx(k * float(st.time_s) + host, rel=1e-12)


def test_throughput_and_memory_decide_fit_by_one_rule():
    """V3 W8A8 on EP16 x 910B2: memory's weights (MTP draft loaded) are over the utilization cap, and throughput,
    which adds the sequences' cache to them, says the same."""
    mem = json.loads(run("memory", "deepseek-v3", "--card", "ascend-910b2", "--ep", "16", "--json").stdout)
    thr = json.loads(run("throughput", "deepseek-v3", "--card", "ascend-910b2", "--tp", "1", "--dp", "16", "--ep", "16",
                         "--context", "4096", "--concurrency", "64", "--json").stdout)
    assert mem["fits"] is False and thr["memory"]["fits"] is False
    assert thr["memory"]["weights_bytes"] == pytest.approx(mem["weights_bytes"], rel=1e-12)
    assert thr["memory"]["usable_bytes"] == pytest.approx(mem["usable_bytes"], rel=1e-12)
    short = thr["memory"]["weights_bytes"] + thr["memory"]["kv_cache_bytes"] - thr["memory"]["usable_bytes"]
    assert thr["memory"]["verdict"] == f"does not fit, short by {short / 2**30:.2f} GiB"


def test_throughput_kv_format_is_the_engines():
    """The cache format a step reads is the engine's layout in it: refused where kv refuses it, vLLM's fp8_ds_mla at
    its stored bytes, and the engine given is the engine reported."""
    args = ("throughput", "deepseek-v3", "--card", "h800", "--tp", "1", "--dp", "8", "--ep", "8", "--context", "4096",
            "--concurrency", "64", "--json")
    refused = run(*args, "--engine", "vllm-ascend", "--kv-dtype", "fp8")
    kv_refused = run("kv", "deepseek-v3", "--context", "4096", "--engine", "vllm-ascend", "--kv-dtype", "fp8")
    assert refused.returncode == kv_refused.returncode == 2
    assert refused.stderr.split(": ", 2)[-1] == kv_refused.stderr.split(": ", 2)[-1]
    ds = json.loads(run(*args, "--engine", "vllm", "--kv-dtype", "fp8_ds_mla").stdout)
    kv = json.loads(run("kv", "deepseek-v3", "--context", "4096", "--engine", "vllm", "--kv-dtype", "fp8_ds_mla",
                        "--json").stdout)
    assert ds["kv"] == {"engine": "vllm", "kv_cache_dtype": "fp8_ds_mla", "bytes_per_sequence": kv["total_bytes"]}
    fp8 = json.loads(run(*args, "--engine", "vllm", "--kv-dtype", "fp8", "--costs", "roofline").stdout)
    ds_roof = json.loads(run(*args, "--engine", "vllm", "--kv-dtype", "fp8_ds_mla", "--costs", "roofline").stdout)
    assert ds_roof["phases"]["decode"]["memory_s"] > fp8["phases"]["decode"]["memory_s"]   # 656 B a token, not 576


def test_plan_json_ranks_and_nothing_fits_is_a_result():
    args = ("plan", "--card", "ascend-910b2", "--prompt", "4096", "--output", "1024", "--concurrency", "256", "--json",
            "--costs", "roofline")
    out = run(*args, "--cards", "32")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["result"] == "fits" and data["feasible"] >= len(data["ranked"]) > 0
    tpc = [r["tokens_per_s_per_card"] for r in data["ranked"]]
    assert tpc == sorted(tpc, reverse=True)
    assert all(r["cards"] <= 32 for r in data["ranked"])
    small = json.loads(run(*args, "--cards", "4").stdout)
    assert small["feasible"] == 0 and small["result"].startswith("nothing fits") and "short by" in small["result"]
    assert small["winner"] == "neither" and small["disaggregated"]["result"] == small["result"]
    assert small["aggregated"]["result"].startswith("nothing fits: the closest co-located layout")


PLAN_KEYS = {"model", "card", "cards", "costs", "objectives", "ttft_out_of_reach", "served_terms", "ranges", "splits", "evaluated", "feasible", "result", "ranked", "evaluated_means",
             "aggregated_evaluated", "aggregated_feasible", "targets", "disaggregated", "aggregated", "winner", "why",
             "frontier_at_target", "frontier"}


def test_plan_json_reports_both_modes_the_winner_the_targets_and_the_frontier():
    from pdcalc.plan.frontier_search import FRONTIER_COLUMNS
    from pdcalc.plan.search import plan
    from pdcalc.plan.workload import Setup, Workload, default_targets

    args = ("plan", "--card", "ascend-910b2", "--cards", "64", "--prompt", "24576", "--output", "8192",
            "--concurrency", "960", "--frontier-points", "6", "--json", "--costs", "roofline", "--tpot-ms", "50",
            "--ttft-ms", "10000000")
    data = json.loads(run(*args).stdout)
    assert set(data) == PLAN_KEYS
    published = default_targets()
    assert data["targets"]["TPOT"]["source"] == data["targets"]["TTFT"]["source"] == "given"
    given = json.loads(run(*args[:-4]).stdout)["targets"]         # the published level where none is given
    assert given == published.as_dict()
    r = plan(Setup(cards=64, frontier_points=6, costs="roofline"),
             Workload(prompt_tokens=24576, output_tokens=8192, concurrency=960, ttft_s=1e4, tpot_s=0.05))
    assert data["winner"] == r.winner and data["why"] == r.why
    d, a = data["disaggregated"], data["aggregated"]
    assert d["result"] == a["result"] == "fits" and d["meets_targets"] and a["meets_targets"]
    assert d["tokens_per_s_per_card"] == pytest.approx(r.best["tokens_per_s_per_card"], rel=1e-12)
    assert d["tokens_per_s_per_card"] == data["ranked"][0]["tokens_per_s_per_card"]
    assert a["option"] == f"{a['instances']} x {a['size']} co-located" and a["cards"] == a["instances"] * a["size"]
    assert 0 < a["chunk_tokens"] <= 24576 and 0 < a["prefill_share"] < 1
    assert set(d["memory_gib"]) == {"P card", "D card"} and set(a["memory_gib"]) == {"co-located card"}
    for card in (*d["memory_gib"].values(), *a["memory_gib"].values()):
        assert set(card) == {"weights", "kv_cache", "activations_and_framework", "headroom", "usable"}
        parts = card["weights"] + card["kv_cache"] + card["activations_and_framework"]
        assert card["headroom"] == pytest.approx(card["usable"] - parts, rel=1e-9) and card["headroom"] >= 0
    assert data["winner"] in ("disaggregated", "aggregated") and data["why"].startswith(data["winner"] + " wins: ")
    assert len(data["frontier"]) == len(r.frontier) and set(data["frontier"][0]) == set(FRONTIER_COLUMNS)
    assert {row["concurrency"] for row in data["frontier"]} >= {1, 960}
    at = data["frontier_at_target"]
    assert set(at) == {"disaggregated", "aggregated"} and at["disaggregated"]["tpot_s"] <= 0.05
    assert at["disaggregated"]["tokens_per_s_per_card"] == max(
        row["tokens_per_s_per_card"] for row in data["frontier"] if row["mode"] == "disaggregated" and row["meets_targets"])


def test_plan_per_role_tp_flags_and_targets_given():
    from pdcalc.plan.workload import default_targets

    args = ("plan", "--model", "deepseek-v3", "--engine", "vllm", "--no-mtp", "--card", "ascend-910b2", "--cards", "64",
            "--prompt", "2048", "--output", "512", "--concurrency", "80", "--frontier-points", "0", "--costs", "roofline",
            "--json")
    data = json.loads(run(*args, "--p-tp", "2", "2", "--d-tp", "1", "4", "--tpot-ms", "80", "--ttft-ms", "4000").stdout)
    assert {r["p_tp"] for r in data["ranked"]} == {2} and {r["d_tp"] for r in data["ranked"]} <= {1, 4}
    assert data["targets"]["TPOT"]["stated"] == "80.0 ms" and data["targets"]["TPOT"]["source"] == "given"
    assert data["targets"]["TTFT"]["seconds"] == 4.0 and data["frontier"] == []
    assert data["aggregated"]["tp"] in (1, 2, 4)
    text = run(*args[:-1], "--p-tp", "2").stdout
    d = default_targets()
    assert f"TPOT target: {d.stated('TPOT')}" in text and f"TTFT target: {d.stated('TTFT')}" in text


def test_plan_costs_flag_times_the_steps_from_published_costs():
    from pdcalc.plan.search import plan
    from pdcalc.plan.workload import Setup, Workload

    args = ("plan", "--model", "deepseek-v3", "--card", "h800", "--cards", "32", "--prompt", "4096", "--output", "1024",
            "--concurrency", "256", "--frontier-points", "0", "--top", "1", "--json")
    served, roof, pub = (json.loads(run(*args, *extra).stdout)
                         for extra in ((), ("--costs", "roofline"), ("--costs", "published")))
    assert served["costs"] == "served" and roof["costs"] == "roofline" and pub["costs"] == "published"
    assert served["served_terms"]["from"].startswith("served corpus") and roof["served_terms"] is None
    # the served model's rows carry 80 % ranges; the roofline, the hardware's bound, carries none
    for r in served["ranked"]:
        for col in ("tpot_s", "ttft_s", "tokens_per_s_per_card"):
            assert r[f"{col}_low"] < r[col] < r[f"{col}_high"]
    assert not any(k.endswith("_low") for k in roof["ranked"][0])
    best = plan(Setup(model="deepseek-v3", card="h800", cards=32, frontier_points=0,
                      step_kwargs={"costs": "published"}),
                Workload(prompt_tokens=4096, output_tokens=1024, concurrency=256)).ranked.iloc[0]
    assert pub["ranked"][0]["tokens_per_s_per_card"] == pytest.approx(float(best["tokens_per_s_per_card"]), rel=1e-9)
    assert pub["ranked"][0]["ttft_s"] != roof["ranked"][0]["ttft_s"]


@pytest.mark.parametrize("args,message", [
    (("throughput", "deepseek-v3", "--card", "h800", "--tp", "3", "--dp", "1", "--context", "10", "--concurrency", "1"),
     "TP degree 3 does not divide the 128 attention heads"),
    (("throughput", "deepseek-v3", "--card", "h800", "--tp", "1", "--dp", "8", "--context", "10", "--concurrency", "1",
      "--kernels-only"), "--kernels-only: applies to --costs published only"),
    (("plan", "--card", "nope", "--cards", "8", "--prompt", "10", "--output", "10", "--rate", "1"), "unknown card 'nope'"),
    (("plan", "--card", "h800", "--cards", "8", "--prompt", "0", "--output", "10", "--rate", "1"), "argument --prompt: must be an integer in 1..16,777,216, got 0"),
    (("plan", "--card", "h800", "--cards", "8", "--prompt", "10", "--output", "10", "--rate", "1", "--p-tp", "0"), "argument --p-tp: must be an integer in 1..65,536, got 0"),
    (("plan", "--card", "h800", "--cards", "8", "--prompt", "10", "--output", "10", "--rate", "1", "--d-tp", "x"), "argument --d-tp: must be an integer, got 'x'"),
])
def test_throughput_and_plan_errors_are_one_line(args, message):
    out = run(*args)
    assert out.returncode == 2
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_kv_dtype_and_the_engine_of_the_cards_family():
    from pdcalc.model.kv_cache import kv_bytes, sequences_that_fit

    bf16 = json.loads(run("kv", "deepseek-v3", "--context", "4096", "--card", "h800", "--json").stdout)
    fp8 = json.loads(run("kv", "deepseek-v3", "--context", "4096", "--card", "h800", "--kv-dtype", "fp8",
                         "--json").stdout)
    assert bf16["engine"] == fp8["engine"] == "vllm"                     # an NVIDIA card: vLLM's layout
    assert fp8["per_token_bytes_asymptotic"] * 2 == bf16["per_token_bytes_asymptotic"]
    assert json.loads(run("kv", "deepseek-v3", "--context", "4096", "--json").stdout)["engine"] == "vllm-ascend"
    mem = json.loads(run("memory", "deepseek-v3", "--card", "h200", "--ep", "8", "--quant", "fp8", "--context", "32768",
                         "--kv-dtype", "fp8", "--json").stdout)
    assert mem["kv"]["engine"] == "vllm" and mem["kv"]["sequences_that_fit"] == sequences_that_fit(
        mem["left_for_kv_bytes"], 32768, "deepseek-v3", "vllm", kv_cache_dtype="fp8")
    assert mem["kv"]["bytes_per_sequence"] == kv_bytes("deepseek-v3", 32768, "vllm", kv_cache_dtype="fp8").total_bytes


@pytest.mark.parametrize("args,message", [
    (("kv", "deepseek-v3", "--context", "10", "--kv-dtype", "int3"), "argument --kv-dtype: invalid choice"),
    (("kv", "deepseek-v4-flash", "--context", "10", "--kv-dtype", "fp8"), "kv_cache_dtype 'fp8' is not modelled"),
    (("plan", "--card", "h800", "--cards", "8", "--prompt", "10", "--output", "10", "--rate", "1", "--engine", "x"),
     "argument --engine: invalid choice"),
])
def test_kv_flag_errors_are_one_line(args, message):
    out = run(*args)
    assert out.returncode == 2 and message in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_throughput_costs_engine_and_kv_dtype_flags():
    from pdcalc.perf import step as tput

    base = ("throughput", "deepseek-v3", "--card", "h800", "--tp", "1", "--dp", "8", "--ep", "8", "--context", "4096",
            "--concurrency", "128", "--quant", "fp8", "--json")
    pub = json.loads(run(*base, "--costs", "published").stdout)
    st = tput.step("deepseek-v3", "h800", tp=1, dp=8, ep=8, context=4096, concurrency=128, phase="decode",
                   quant="fp8", costs="published")
    assert pub["costs"] == "published" and pub["phases"]["decode"]["step_s"] == pytest.approx(float(st.time_s), rel=1e-12)
    kernels = json.loads(run(*base, "--costs", "published", "--kernels-only").stdout)
    k, _ = tput.beyond_kernels("prefill")                     # DeepSeek's profiled prefill step over its kernels
    assert kernels["kernels_only"] and not pub["kernels_only"]
    assert pub["phases"]["prefill"]["step_s"] == pytest.approx(k * kernels["phases"]["prefill"]["step_s"], rel=1e-12)
    assert pub["phases"]["decode"]["step_s"] == kernels["phases"]["decode"]["step_s"]
    assert pub["phases"]["prefill"]["beyond_kernels"] == pytest.approx(k, rel=1e-12)
    assert pub["phases"]["decode"]["beyond_kernels"] == kernels["phases"]["prefill"]["beyond_kernels"] == 1.0
    bf16, fp8 = (json.loads(run(*base, "--costs", "roofline", *k).stdout) for k in ((), ("--kv-dtype", "fp8")))
    assert fp8["phases"]["decode"]["memory_s"] < bf16["phases"]["decode"]["memory_s"]   # half the cache bytes read
    v4 = json.loads(run("throughput", "deepseek-v4-flash", "--card", "h200", "--tp", "1", "--dp", "8", "--ep", "8",
                        "--context", "4096", "--concurrency", "128", "--quant", "fp8-fp4", "--json").stdout)
    assert v4["kv"]["engine"] == "vllm"                                                 # an NVIDIA card


def test_claims_text_gives_units_exact_counts_and_aligns_cjk():
    import unicodedata

    out = run("claims", "--article", "v4", "--verdict", "erratum")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()[1:]
    by_id = {line.split()[0]: line for line in lines}
    assert "-> 393,216 params" in by_id["v4-1.3-mhc-entry-proj"]          # a parameter count, exact
    assert "-> 6.218 KB" in by_id["v4-1.2-kv-per-token"]                   # four significant figures and the unit

    def col(line: str) -> int:                                             # terminal column of the arrow
        head = line.split("->")[0]
        return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in head)

    assert len({col(line) for line in lines if "->" in line}) == 1


def test_every_flag_has_help_that_states_its_default():
    import argparse

    from pdcalc.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        for a in parser._actions:
            if isinstance(a, argparse._HelpAction):
                continue
            assert a.help, (name, a.option_strings or a.dest)
            if a.option_strings and a.default not in (None, False, argparse.SUPPRESS):
                assert "default" in a.help, (name, a.option_strings, a.help)
