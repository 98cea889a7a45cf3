"""Reading benchmark clients' result files (pdcalc.reality.results) against real files from public repositories
(tests/data/results, provenance in its PROVENANCE.md). The expected numbers are copied from the files."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from pathlib import Path

import pytest

from pdcalc.core.errors import ConfigError
from pdcalc.reality.results import CLIENTS, ClientResult, read_result

DATA = Path(__file__).resolve().parent / "data" / "results"
VLLM = DATA / "vllm" / "er0080_bench_serve_v0.25.1.json"
VLLM_SWEEP = DATA / "vllm" / "er0080_sweep_max_num_seqs4_conc2_run0.json"
VLLM_FAILED = DATA / "vllm" / "er0080_bench_serve_all_requests_failed_v0.25.1.json"
VLLM_OLD = DATA / "vllm" / "LambdaLabs_1xH100_Meta-Llama-3.1-8B-FP8_tp1_len2048.json"
VLLM_ASCEND_RATE1 = DATA / "vllm" / "nv-action_vllm-ascend_serving_llama8B_tp1_1.json"
VLLM_ASCEND_INF = DATA / "vllm" / "zhangxinyuehfad_vllm-ascend_serving_llama8B_tp1_sharegpt_qps_inf.json"
SGL_DEEPSEEK = DATA / "sglang" / "datacrunch_h200_deepseek_dp_mla_output.jsonl"
SGL_70B = DATA / "sglang" / "datacrunch_h200_llama_3_3_70b_online_output.jsonl"
SGL_405B = DATA / "sglang" / "datacrunch_h200_llama_405b_online_output.jsonl"
SGL_AGG = DATA / "sglang" / "TonyLi15_agg_n100_in512_out128_c32.jsonl"
SGL_PD = DATA / "sglang" / "TonyLi15_pd_1p1d_n100_in2048_out512_c128.jsonl"
#: A format sample only (its repository is unidentified; see PROVENANCE.md §3).
AIS_SAMPLE = DATA / "aisbench" / "UNVERIFIED-REPO_doc-extract_qwen2.5-1.5b_4xRTX5880_bs32_common.json"

#: Every field of ClientResult, per real file, as the file states it (read_result's defaults: the last run).
EXPECTED = {
    VLLM: dict(
        client="vllm", run=0, completed=8, duration_s=1.5441598830002476, output_tokens_per_s=82.89297074037474,
        total_tokens_per_s=248.6789122211242, request_throughput=5.180810671273421,
        mean_ttft_ms=215.53594200008774, median_ttft_ms=55.68139649994919, mean_tpot_ms=11.265828258331112,
        median_tpot_ms=11.20450286665194, mean_itl_ms=11.265836941667354, concurrency=2, request_rate=math.inf,
        num_prompts=8, mean_input_tokens=256 / 8, mean_output_tokens=128 / 8, model_id="facebook/opt-125m"),
    VLLM_SWEEP: dict(
        client="vllm", run=0, completed=8, duration_s=1.3653671270003542, output_tokens_per_s=93.74767963046673,
        total_tokens_per_s=281.2430388914002, request_throughput=5.859229976904171,
        mean_ttft_ms=217.27289337468392, median_ttft_ms=44.92285849846667, mean_tpot_ms=8.204553624697533,
        median_tpot_ms=8.323490332986694, mean_itl_ms=8.204563008257537, concurrency=2, request_rate=math.inf,
        num_prompts=8, mean_input_tokens=256 / 8, mean_output_tokens=128 / 8, model_id="facebook/opt-125m"),
    VLLM_OLD: dict(  # input_throughput (1281.9486...) is input tokens/s, not a total: no total_tokens_per_s
        client="vllm", run=0, completed=10, duration_s=1.0679055179934949, output_tokens_per_s=413.89429359863317,
        total_tokens_per_s=None, request_throughput=9.364124289561836, mean_ttft_ms=44.16175780061167,
        median_ttft_ms=62.47698800143553, mean_tpot_ms=6.018531635219421, median_tpot_ms=5.198485823815636,
        mean_itl_ms=50.32475644418607, concurrency=None, request_rate=math.inf, num_prompts=10,
        mean_input_tokens=1369 / 10, mean_output_tokens=442 / 10, model_id="neuralmagic/Meta-Llama-3.1-8B-FP8"),
    VLLM_ASCEND_RATE1: dict(
        client="vllm", run=0, completed=None, duration_s=None, output_tokens_per_s=None, total_tokens_per_s=None,
        request_throughput=None, mean_ttft_ms=111.23647520318627, median_ttft_ms=103.90021465718746,
        mean_tpot_ms=40.48013234569434, median_tpot_ms=40.27887061310954, mean_itl_ms=40.20369931525192,
        concurrency=None, request_rate=1.0, num_prompts=200, mean_input_tokens=None, mean_output_tokens=None,
        model_id="/root/wl/cache/modelscope/models/Meta-Llama-3-8B-Instruct"),
    VLLM_ASCEND_INF: dict(
        client="vllm", run=0, completed=None, duration_s=None, output_tokens_per_s=None, total_tokens_per_s=None,
        request_throughput=None, mean_ttft_ms=10484.147438658401, median_ttft_ms=12176.050367765129,
        mean_tpot_ms=228.6619702709455, median_tpot_ms=124.06945742569125, mean_itl_ms=105.17663457696793,
        concurrency=None, request_rate=math.inf, num_prompts=200, mean_input_tokens=None, mean_output_tokens=None,
        model_id="/root/.cache/modelscope/hub/LLM-Research/Meta-Llama-3-8B-Instruct"),
    SGL_DEEPSEEK: dict(
        client="sglang", run=0, completed=10000, duration_s=412.49091206211597,
        output_tokens_per_s=12412.394674113431, total_tokens_per_s=None, request_throughput=None,
        mean_ttft_ms=None, median_ttft_ms=10014.104524045251, mean_tpot_ms=None, median_tpot_ms=None,
        mean_itl_ms=None, concurrency=None, request_rate=math.inf, num_prompts=None,
        mean_input_tokens=10000 / 10000, mean_output_tokens=5120000 / 10000, model_id=None),
    SGL_70B: dict(  # the last of 7 lines: sharegpt at 8 req/s
        client="sglang", run=6, completed=2400, duration_s=313.96794493007474,
        output_tokens_per_s=1471.0864833760852, total_tokens_per_s=None, request_throughput=None,
        mean_ttft_ms=None, median_ttft_ms=83.16566958092153, mean_tpot_ms=None, median_tpot_ms=None,
        mean_itl_ms=None, concurrency=None, request_rate=8.0, num_prompts=None,
        mean_input_tokens=540779 / 2400, mean_output_tokens=461874 / 2400, model_id=None),
    SGL_405B: dict(  # the last of 6 lines: sharegpt at 8 req/s
        client="sglang", run=5, completed=2400, duration_s=377.2264237909112,
        output_tokens_per_s=1224.3946098961699, total_tokens_per_s=None, request_throughput=None,
        mean_ttft_ms=None, median_ttft_ms=294.7253850288689, mean_tpot_ms=None, median_tpot_ms=None,
        mean_itl_ms=None, concurrency=None, request_rate=8.0, num_prompts=None,
        mean_input_tokens=540779 / 2400, mean_output_tokens=461874 / 2400, model_id=None),
    SGL_AGG: dict(
        client="sglang", run=0, completed=100, duration_s=1.9610086176544428,
        output_tokens_per_s=3151.4394910675514, total_tokens_per_s=16663.363794435983,
        request_throughput=50.994166522128666, mean_ttft_ms=42.448918260633945, median_ttft_ms=37.13699756190181,
        mean_tpot_ms=8.54356980120356, median_tpot_ms=9.195011763840466, mean_itl_ms=8.477972767861118,
        concurrency=32, request_rate=math.inf, num_prompts=None, mean_input_tokens=26497 / 100,
        mean_output_tokens=6180 / 100, model_id="Qwen/Qwen2.5-3B-Instruct"),
    SGL_PD: dict(
        client="sglang", run=0, completed=100, duration_s=39.108014930039644,
        output_tokens_per_s=661.8336432136, total_tokens_per_s=3447.1706181243226,
        request_throughput=2.5570206050828728, mean_ttft_ms=34613.75863795169, median_ttft_ms=34874.66714018956,
        mean_tpot_ms=9.332819571423697, median_tpot_ms=9.319271662114364, mean_itl_ms=8.881804187366457,
        concurrency=128, request_rate=math.inf, num_prompts=None, mean_input_tokens=108929 / 100,
        mean_output_tokens=25883 / 100, model_id="Qwen/Qwen2.5-3B-Instruct"),
    AIS_SAMPLE: dict(  # format sample; AISBench's JSON has no latency statistics (they are in its CSV)
        client="aisbench", run=0, completed=32, duration_s=40152.6953 / 1000, output_tokens_per_s=3264.3388,
        total_tokens_per_s=6727.0453, request_throughput=0.797, mean_ttft_ms=None, median_ttft_ms=None,
        mean_tpot_ms=None, median_tpot_ms=None, mean_itl_ms=None, concurrency=32, request_rate=None,
        num_prompts=32, mean_input_tokens=139037 / 32, mean_output_tokens=131072 / 32, model_id=None),
}


def fields_of(result: ClientResult) -> dict:
    out = dataclasses.asdict(result)
    del out["source"]
    return out


def one_line_error(path, **kwargs) -> str:
    """The message of the ConfigError read_result raises for ``path``; it must be one line naming the file."""
    with pytest.raises(ConfigError) as info:
        read_result(path, **kwargs)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path)), message
    return message


# --- the real files --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", list(EXPECTED), ids=lambda p: p.name)
def test_real_file_reads_as_written(path):
    result = read_result(path)
    assert result.source == str(path)
    assert fields_of(result) == EXPECTED[path]                      # exactly as written (inf == inf)


@pytest.mark.parametrize("path", list(EXPECTED), ids=lambda p: p.name)
def test_client_given_explicitly_reads_the_same(path):
    assert read_result(path, client=EXPECTED[path]["client"]) == read_result(path)


@pytest.mark.parametrize("path", [p for p in EXPECTED if EXPECTED[p]["duration_s"]], ids=lambda p: p.name)
def test_output_throughput_is_output_tokens_over_duration(path):
    """The definition the module relies on: every client's output rate is total output tokens / duration
    (AISBench rounds to 4 decimals)."""
    r = read_result(path)
    assert r.output_tokens_per_s * r.duration_s == pytest.approx(r.mean_output_tokens * r.completed, rel=1e-6)


def test_values_match_the_raw_json():
    """An independent read of the same keys (so a table typo cannot hide a reader bug, nor the reverse)."""
    raw = json.loads(SGL_AGG.read_text(encoding="utf-8").splitlines()[-1])
    r = read_result(SGL_AGG)
    assert (r.output_tokens_per_s, r.total_tokens_per_s, r.mean_tpot_ms) == \
        (raw["output_throughput"], raw["total_throughput"], raw["mean_tpot_ms"])
    raw = json.loads(VLLM.read_text(encoding="utf-8"))
    r = read_result(VLLM)
    assert (r.output_tokens_per_s, r.total_tokens_per_s, r.median_ttft_ms) == \
        (raw["output_throughput"], raw["total_token_throughput"], raw["median_ttft_ms"])


def test_old_vllm_input_throughput_is_not_taken_for_the_total():
    raw = json.loads(VLLM_OLD.read_text(encoding="utf-8"))
    assert "input_throughput" in raw and "total_token_throughput" not in raw
    assert read_result(VLLM_OLD).total_tokens_per_s is None


# --- provenance ------------------------------------------------------------------------------------------------

def provenance_rows() -> dict[str, str]:
    """file -> git blob id, from the tables of PROVENANCE.md (the column headed "blob")."""
    rows, column = {}, None
    for line in (DATA / "PROVENANCE.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "file":
            column = cells.index("blob")
        elif len(cells) > 2 and re.fullmatch(r"`[^`]+`", cells[0]):
            assert re.fullmatch(r"[0-9a-f]{40}", cells[column]), line
            rows[cells[0].strip("`")] = cells[column]
    return rows


def test_every_data_file_is_documented_and_unchanged():
    files = {str(p.relative_to(DATA)) for p in DATA.rglob("*") if p.is_file() and p.name != "PROVENANCE.md"}
    rows = provenance_rows()
    assert set(rows) == files
    for name, blob in rows.items():
        data = (DATA / name).read_bytes()
        assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == blob, name
    assert {str(p.relative_to(DATA)) for p in [*EXPECTED, VLLM_FAILED]} == files


# --- detection -------------------------------------------------------------------------------------------------

def test_detection_picks_each_client():
    assert {read_result(p).client for p in EXPECTED} == set(CLIENTS)
    assert read_result(VLLM_ASCEND_INF).client == "vllm"        # reduced key set: no throughput at all
    assert read_result(SGL_DEEPSEEK).client == "sglang"         # old short key set


def test_wrong_client_given_is_refused():
    assert "not an AISBench result" in one_line_error(VLLM, client="aisbench")
    assert "not a vLLM result" in one_line_error(AIS_SAMPLE, client="vllm")
    assert "unknown client 'trtllm'" in one_line_error(VLLM, client="trtllm")


def test_keys_of_both_vllm_and_sglang_need_the_client_named(tmp_path):
    raw = json.loads(SGL_AGG.read_text(encoding="utf-8"))
    raw["model_id"] = "x"                                          # a vLLM key in an SGLang line
    path = tmp_path / "both.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    assert "name the client" in one_line_error(path)
    assert read_result(path, client="sglang").output_tokens_per_s == 3151.4394910675514


@pytest.mark.parametrize("content, why", [
    ({"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_hidden_layers": 61},
     "no output throughput"),                                      # a model's config.json
    ({"time_to_first_token": {"unit": "ms", "avg": 12.5}, "output_token_throughput": {"unit": "tokens/sec",
                                                                                     "avg": 950.0}},
     "no output throughput"),                                      # genai-perf / aiperf shape
    ({"output_throughput": 10.0, "duration": 3.0}, "no 'backend'"),
])
def test_json_of_another_tool_is_refused(tmp_path, content, why):
    path = tmp_path / "other.json"
    path.write_text(json.dumps(content), encoding="utf-8")
    message = one_line_error(path)
    assert "not a vLLM, SGLang or AISBench result" in message and why in message


def test_json_array_is_refused(tmp_path):
    path = tmp_path / "list.json"
    path.write_text("[1, 2]", encoding="utf-8")
    assert "JSON an array, not a benchmark result" in one_line_error(path)


# --- JSONL runs ------------------------------------------------------------------------------------------------

def test_jsonl_run_selection():
    rates = [read_result(SGL_70B, run=i).request_rate for i in range(7)]
    assert rates == [1.0, 2.0, 4.0, 8.0, 16.0, 4.0, 8.0]
    first = read_result(SGL_70B, run=0)
    assert (first.run, first.completed, first.output_tokens_per_s) == (0, 300, 537.4142851849319)
    assert read_result(SGL_405B, run=3).median_ttft_ms == 123718.62683666404
    assert read_result(SGL_70B) == read_result(SGL_70B, run=6)   # default: the last line


def test_run_out_of_range_is_an_error():
    assert "no run 7: the file holds 7 runs (0 to 6)" in one_line_error(SGL_70B, run=7)
    assert "no run 1: the file holds 1 run (run 0)" in one_line_error(VLLM, run=1)
    assert read_result(VLLM, run=0) == read_result(VLLM)
    assert "counted from 0" in one_line_error(SGL_70B, run=-1)
    assert "counted from 0" in one_line_error(SGL_70B, run=True)


def test_appended_vllm_results_are_runs(tmp_path):
    """vLLM --append-result writes further objects after a newline: a JSONL file."""
    path = tmp_path / "appended.json"
    path.write_bytes(VLLM_OLD.read_bytes() + b"\n" + VLLM_FAILED.read_bytes())
    assert read_result(path, run=0).output_tokens_per_s == 413.89429359863317
    message = one_line_error(path)                                # the last run: every request failed
    assert "run 1 (line 2)" in message and "every request failed" in message


# --- Infinity, NaN and the other values ------------------------------------------------------------------------

def test_infinity_token_and_inf_string():
    assert b'"request_rate": Infinity' in SGL_DEEPSEEK.read_bytes()
    assert read_result(SGL_DEEPSEEK).request_rate == math.inf
    assert b'"request_rate": "inf"' in VLLM_ASCEND_INF.read_bytes()
    assert read_result(VLLM_ASCEND_INF).request_rate == math.inf
    assert read_result(VLLM_ASCEND_RATE1).request_rate == 1.0


def write_line(tmp_path, **changes) -> Path:
    """The SGLang agg line with ``changes`` (None: delete the key), written as a one-line JSONL file."""
    raw = json.loads(SGL_AGG.read_text(encoding="utf-8"))
    for key, value in changes.items():
        raw.pop(key) if value is None else raw.__setitem__(key, value)
    path = tmp_path / "changed.jsonl"
    path.write_text(json.dumps(raw) + "\n", encoding="utf-8")
    return path


def test_nan_is_absent_and_trace_has_no_rate(tmp_path):
    r = read_result(write_line(tmp_path, mean_tpot_ms=math.nan, request_rate="trace"))
    assert r.mean_tpot_ms is None and r.request_rate is None and r.median_tpot_ms == 9.195011763840466


@pytest.mark.parametrize("key, value, said", [
    ("output_throughput", "fast", "is not a number"),
    ("output_throughput", -1.0, "not a finite non-negative number"),
    ("mean_ttft_ms", math.inf, "not a finite non-negative number"),
    ("completed", 99.5, "is not a count"),
    ("completed", True, "is not a count"),
    ("request_rate", "soon", "is not a request rate"),
    ("request_rate", 0, "is not a request rate"),
])
def test_bad_value_names_the_field(tmp_path, key, value, said):
    message = one_line_error(write_line(tmp_path, **{key: value}))
    assert f"field {key!r}" in message and said in message


def test_unbounded_concurrency(tmp_path):
    assert read_result(write_line(tmp_path, max_concurrency=0)).concurrency is None     # Semaphore only if n
    assert read_result(VLLM_OLD).concurrency is None                                     # key absent


# --- failed runs and broken files ------------------------------------------------------------------------------

def test_all_failed_run_is_an_error():
    message = one_line_error(VLLM_FAILED)
    assert "every request failed (0 completed, 8 failed)" in message


def test_all_failed_sglang_line_is_an_error(tmp_path):
    assert "every request failed" in one_line_error(write_line(tmp_path, completed=0))


def test_run_without_any_measurement_is_an_error(tmp_path):
    keys = ["duration", "output_throughput", "request_throughput", "total_throughput", "mean_ttft_ms",
            "median_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "mean_itl_ms"]
    message = one_line_error(write_line(tmp_path, **dict.fromkeys(keys)), client="sglang")
    assert "without a duration, throughput or latency statistic" in message


def test_truncated_file(tmp_path):
    path = tmp_path / "cut.json"
    path.write_bytes(VLLM_OLD.read_bytes()[:1000])
    message = one_line_error(path)
    assert "not valid JSON" in message and "truncated" in message


def test_truncated_last_line_of_jsonl(tmp_path):
    text = SGL_70B.read_text(encoding="utf-8")
    path = tmp_path / "cut.jsonl"
    path.write_text(text[:len(text) - 200], encoding="utf-8")
    message = one_line_error(path, run=0)                         # any broken line makes the file unusable
    assert "line 7: not valid JSON" in message


@pytest.mark.parametrize("content, said", [
    (b"", "empty file"),
    (b"  \n\n", "empty file"),
    (b"\x89PNG\r\n\x1a\n\x00\x00", "not UTF-8 text"),
    (b"backend: vllm\noutput_throughput: 12\n", "not valid JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "not usable JSON"),
])
def test_garbage_file(tmp_path, content, said):
    path = tmp_path / "garbage.json"
    path.write_bytes(content)
    assert said in one_line_error(path)


def test_missing_file_and_folder(tmp_path):
    assert "no such file" in one_line_error(tmp_path / "absent.json")
    assert "is a folder" in one_line_error(tmp_path)


# --- AISBench variants -----------------------------------------------------------------------------------------

def ais_variant(tmp_path, old: str, new: str) -> Path:
    text = AIS_SAMPLE.read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "aisbench.json"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


def test_aisbench_key_case_and_stage_variants(tmp_path):
    """The AISBench code writes "Total Generated Tokens"; the sample (an older build) "Total generated tokens";
    the stable_stage summarizer writes the stage "stable"."""
    path = ais_variant(tmp_path, '"Total generated tokens"', '"Total Generated Tokens"')
    assert read_result(path).mean_output_tokens == 4096.0
    path = ais_variant(tmp_path, '"total"', '"stable"')
    assert read_result(path).output_tokens_per_s == 3264.3388


def test_aisbench_unit_is_checked(tmp_path):
    path = ais_variant(tmp_path, '"40152.6953 ms"', '"40.1526953 s"')
    message = one_line_error(path)
    assert "field 'Benchmark Duration'" in message and "AISBench writes 'ms'" in message


def test_aisbench_all_failed(tmp_path):
    path = ais_variant(tmp_path, '"Success Requests": {\n        "total": 32', '"Success Requests": {\n        "total": 0')
    assert "every request failed" in one_line_error(path)


def test_one_object_then_more_text(tmp_path):
    path = tmp_path / "extra.json"
    path.write_bytes(VLLM.read_bytes() + b"\nxyz\n")             # an indented object, then garbage
    assert "not valid JSON (Extra data at line 38 column 1)" in one_line_error(path)
    path.write_bytes(SGL_DEEPSEEK.read_bytes() + b"xyz\n")       # a JSONL line, then garbage
    assert "line 2: not valid JSON" in one_line_error(path)


def test_line_separator_inside_a_string_is_not_a_new_line(tmp_path):
    raw = json.loads(SGL_AGG.read_text(encoding="utf-8"))
    raw["tag"] = "a\u2028b"
    path = tmp_path / "sep.jsonl"
    path.write_text(json.dumps(raw, ensure_ascii=False) + "\n" + json.dumps(raw, ensure_ascii=False) + "\n",
                    encoding="utf-8")
    assert read_result(path).run == 1
