import math
import re
import subprocess
import sys
import tomllib
from dataclasses import fields
from pathlib import Path

import pytest

from pdcalc.core.errors import ConfigError, UnknownNameError
from pdcalc.core.quotes import number_in_text
from pdcalc.core.units import GB, KiB, MiB
from pdcalc.hardware.cards import card_names, get_card
from pdcalc.perf import costs as C

DATA = Path(C.__file__).parents[1] / "data" / "costs.toml"
RAW = tomllib.loads(DATA.read_text(encoding="utf-8"))
POINTS = C.load().points


# ------------------------------------------------------------------------------------------ traceability
def test_loads_every_table_and_point():
    assert len(POINTS) == sum(len(t["point"]) for t in RAW["table"])
    assert {p.kind for p in POINTS} == set(C.KINDS)
    ids = [p.id for p in POINTS]
    assert len(ids) == len(set(ids))
    assert len({t["id"] for t in RAW["table"]}) == len(RAW["table"])


@pytest.mark.parametrize("p", POINTS, ids=lambda p: p.id)
def test_every_number_is_printed_by_its_quote(p):
    assert p.printed, "a point without a number"
    for key, value, where in p.printed:
        text = {"point": p.quote, "table": p.table_quote, "peak": p.peak_quote}[where]
        assert number_in_text(value, text), (key, value, text)


@pytest.mark.parametrize("table", RAW["table"], ids=lambda t: t["id"])
def test_every_raw_number_is_printed(table):
    """Independent of the loader: every numeric key of the file is printed by the text it belongs to."""
    for key, value in table.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            peak = key.startswith("peak_") or (key.startswith("throttled_peak_") and not key.endswith("_percent"))
            assert number_in_text(value, table["peak_quote" if peak else "quote"]), (table["id"], key)
    for row in table["point"]:
        for key, value in row.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                assert number_in_text(value, row["quote"]), (table["id"], key, row["quote"])


@pytest.mark.parametrize("p", POINTS, ids=lambda p: p.id)
def test_every_point_has_source_conditions_and_locator(p):
    assert p.source.strip() and p.conditions.strip() and p.quote.strip() and p.table_quote.strip()
    # a locator precise enough to find the text again: a URL, or an issue number, a path or an arXiv id
    assert p.url or re.search(r"#\d+|/|arXiv", p.source)
    if p.commit:
        assert re.fullmatch(r"[0-9a-f]{40}", p.commit)
        assert p.url and p.commit in p.url
    if p.kind in C.CARD_KINDS:
        assert p.card in C.known_cards()


@pytest.mark.parametrize("p", POINTS, ids=lambda p: p.id)
def test_units_are_converted_once_by_key_name(p):
    names = {f.name for f in fields(p)}
    for key, value, _ in p.printed:
        si = C.si_name(key)
        assert si in names, (key, si)
        got = getattr(p, si)
        assert got == pytest.approx(C.to_si(key, value), rel=1e-12), key
        if key.endswith("_gb_per_s"):
            assert got == pytest.approx(value * GB)      # GB is 1e9 bytes, never GiB
        if key.endswith("_us"):
            assert got == pytest.approx(value * 1e-6)
        if key.endswith("_percent"):
            assert 0 < got <= 1


def test_printed_keys_carry_a_known_unit_or_are_counts():
    suffixes = tuple(s for s, _, _ in C.UNIT_SUFFIXES)
    for keys in C._NUMERIC.values():
        for key in keys:
            assert key.endswith(suffixes) or key in C.COUNT_KEYS, key


# ------------------------------------------------------------------------------------------ efficiencies
COMPUTE = [p for p in POINTS if p.kind in ("gemm", "mla")]


@pytest.mark.parametrize("p", COMPUTE, ids=lambda p: p.id)
def test_efficiencies_are_fractions(p):
    for value in (p.efficiency, p.derived_efficiency, p.memory_efficiency):
        if value is not None:
            assert 0 < value <= 1, (p.id, value)
    assert p.efficiency is not None or p.memory_efficiency is not None or \
        getattr(p, "throttled_peak_utilization_fraction", None) is not None


def test_every_h800_deepgemm_point_gets_an_efficiency_from_the_preset_peak():
    pts = C.gemm("h800", "fp8")
    assert len(pts) == 18 + 4 + 6 + 1
    peak = get_card("h800").flops("fp8")
    for p in pts:
        assert p.peak == peak
        assert p.efficiency == pytest.approx(p.achieved_flop_per_s / peak)
    best = max(p.efficiency for p in pts)
    assert best == pytest.approx(1550e12 / peak)


def test_flashmla_peak_and_amla_citation_agree():
    own = [p for p in C.mla_decode("h800", attention="dense") if p.table_id == "flashmla-h800-dense-decode"]
    compute = next(p for p in own if p.achieved_flop_per_s == 660e12)
    assert compute.peak_flop_per_s == 990e12
    cited = next(p for p in C.mla_decode("h800") if p.table_id == "amla-cites-flashmla-h800")
    assert round(compute.efficiency, 3) == cited.efficiency == pytest.approx(0.667)
    # the deep dive's nominal peak is the hardware preset's within 0.2%
    assert compute.peak_flop_per_s == pytest.approx(get_card("h800").flops("bf16"), rel=2e-3)
    memory = next(p for p in own if p.bound == "memory")
    assert memory.memory_efficiency == pytest.approx(3000 / 3350)


def test_published_utilisation_is_kept_when_it_differs_from_the_preset():
    amla = C.mla("ascend-910c")[0]
    assert amla.efficiency == pytest.approx(0.868)
    assert amla.peak_flop_per_s is None and amla.dtype is None
    assert amla.derived_efficiency is None        # no peak stated, no dtype to read the preset with


# ------------------------------------------------------------------------------------------ lookups
def test_dispatch_lookup_by_ep_size_and_mode():
    ll8 = C.dispatch("h800", 8, "low_latency")
    assert {(p.table_id, p.operation) for p in ll8} == {
        ("deepep-v1-low-latency-h800", "dispatch"), ("deepep-v1-low-latency-h800", "combine"),
        ("deepep-v1-low-latency-h800-pure-rdma", "dispatch"), ("deepep-v1-low-latency-h800-pure-rdma", "combine")}
    pure = {p.operation: p for p in ll8 if p.link == "RDMA"}
    assert pure["dispatch"].latency_s == pytest.approx(163e-6)
    assert pure["combine"].latency_s == pytest.approx(318e-6)
    normal = C.dispatch("h800", mode="normal", operation="dispatch")
    assert [p.ep_size for p in normal] == [8, 16, 32, 64]
    assert normal[0].link == "NVLink" and normal[0].bandwidth_bytes_per_s == 153e9
    assert normal[0].tokens_per_batch == 4096 and normal[0].hidden == 7168 and normal[0].top_k == 8


def test_ep_size_from_nodes_times_ranks_per_node():
    v2 = C.dispatch("nvidia-sm90")
    assert sorted({p.ep_size for p in v2}) == [16, 32]
    assert all(p.ep_size == p.ep_nodes * p.ep_per_node for p in v2)


def test_ascend_a3_dispatch_is_recorded_for_the_910c():
    a3 = C.dispatch("ascend-910c", mode="low_latency")
    assert [p.ep_size for p in a3 if p.operation == "dispatch"] == [8, 16, 32]
    assert all(p.link == "HCCS" and p.dispatch_dtype == "int8" for p in a3)
    assert C.dispatch("ascend-910b2") == ()


def test_lookups_refuse_unknown_names():
    with pytest.raises(UnknownNameError, match="unknown card 'h900'"):
        C.gemm("h900")
    with pytest.raises(UnknownNameError, match="unknown mode 'fast'"):
        C.dispatch("h800", mode="fast")
    with pytest.raises(UnknownNameError, match="unknown scope"):
        C.allreduce("h100", "global")
    with pytest.raises(UnknownNameError, match="unknown cost kind"):
        C.points("latency")


def test_mtp_and_imbalance():
    (mtp,) = C.mtp_acceptance("DeepSeek-V3")
    assert (mtp.acceptance_low_fraction, mtp.acceptance_high_fraction) == (0.85, 0.9)
    assert mtp.speedup_x == 1.8
    ranks = {p.eplb: p for p in C.expert_imbalance("rank") if p.ep_size == 32}
    assert ranks["none"].max_over_mean == pytest.approx(2.564)
    assert ranks["offline"].max_over_mean == pytest.approx(1.109)
    for p in C.expert_imbalance():
        assert p.std_tokens > 0 and p.mean_tokens > 0


# ------------------------------------------------------------------------------------------ missing()
def test_missing_names_the_gaps_and_where_to_carry_from():
    gaps = {(g.kind, g.card): g for g in C.missing()}
    assert ("gemm", "h800") not in gaps and ("dispatch", "h800") not in gaps
    assert ("dispatch", "ascend-910c") not in gaps          # DeepEP-Ascend A3 tables are recorded
    g = gaps[("gemm", "ascend-910b2")]
    assert g.note and "h800" in g.available_on
    assert gaps[("allreduce", "ascend-910b2")].available_on == ("h100",)
    assert gaps[("allreduce", "h800")].note
    for card in card_names():
        for kind in C.CARD_KINDS:
            has = any(p.card == card and p.kind == kind for p in POINTS)
            assert has != ((kind, card) in gaps), (kind, card)


def test_every_recorded_gap_is_a_real_gap():
    for g in C.load().gaps:
        assert not any(p.card == g.card and p.kind == g.kind for p in POINTS), (g.kind, g.card)


# ------------------------------------------------------------------------------------------ alpha-beta
def test_alpha_beta_recovers_an_exact_model():
    alpha, beta = 12e-6, 200e9
    pts = [(s, alpha + s / beta) for s in (1e3, 1e5, 1e6, 1e7, 1e8)]
    fit = C.alpha_beta(pts)
    assert fit.latency_s == pytest.approx(alpha, rel=1e-9)
    assert fit.bandwidth_bytes_per_s == pytest.approx(beta, rel=1e-9)
    assert fit.max_abs_relative_residual < 1e-9
    assert fit.time_s(5e6) == pytest.approx(alpha + 5e6 / beta)


def test_alpha_beta_refuses_what_it_cannot_fit():
    with pytest.raises(ValueError, match="two distinct"):
        C.alpha_beta([(1e3, 1e-5), (1e3, 2e-5)])
    with pytest.raises(ValueError, match="do not follow"):
        C.alpha_beta([(1e3, 1e-3), (1e8, 1e-5)])      # larger messages faster: negative bandwidth


def test_published_h100_allreduce_fit_and_its_residuals():
    pts = [p for p in C.allreduce("h100", "intranode") if p.time_s is not None]
    assert [p.size_bytes for p in pts][:3] == [128, 1 * KiB, 16 * KiB]
    full = C.allreduce_alpha_beta("h100")
    worst = min(range(len(full.relative_residuals)), key=lambda i: full.relative_residuals[i])
    assert full.sizes_bytes[worst] == 2 * MiB and full.relative_residuals[worst] < -0.8   # the source's outlier
    fit = C.allreduce_alpha_beta("h100", exclude_sizes_bytes=[2 * MiB])
    assert fit.excluded_sizes_bytes == (2 * MiB,) and len(fit.sizes_bytes) == len(pts) - 1
    assert fit.max_abs_relative_residual < 0.15
    assert 15e-6 < fit.latency_s < 25e-6                # the small-message floor the rows print (19-25 us)
    # algorithm bandwidth of the fit below the maintainer's expected peak algbw (~275 GB/s) for large messages
    expected = next(p for p in C.allreduce("h100") if p.alg_bandwidth_bytes_per_s)
    assert fit.bandwidth_bytes_per_s < expected.alg_bandwidth_bytes_per_s


def test_size_prefixes():
    assert C.size_bytes("16KB", "binary") == 16 * 1024
    assert C.size_bytes("16KB", "decimal") == 16_000
    assert C.size_bytes("128B", "binary") == 128
    assert C.size_bytes("2 MiB", "decimal") == 2 * MiB
    with pytest.raises(ValueError):
        C.size_bytes("lots", "binary")


# ------------------------------------------------------------------------------------------ malformed data
GOOD = '''
[cards]
x-card = "a card"

[[table]]
id = "t"
kind = "gemm"
card = "h800"
dtype = "fp8"
operation = "dense"
source = "somewhere/README.md"
quote = "We test at 64 rows."
conditions = "as stated"
point = [ { m = 64, achieved_tflop_per_s = 206, quote = "| 64 | 206 TFLOPS |" } ]
'''


def _write(tmp_path, text):
    p = tmp_path / "costs.toml"
    p.write_text(text, encoding="utf-8")
    return p


def test_a_good_file_loads(tmp_path):
    data = C.load(_write(tmp_path, GOOD))
    assert data.points[0].achieved_flop_per_s == 206e12 and dict(data.cards) == {"x-card": "a card"}


@pytest.mark.parametrize("edit, field_, message", [
    (("206 TFLOPS |", "207 TFLOPS |"), "achieved_tflop_per_s", "does not print 206"),
    (('card = "h800"', 'card = "h900"'), "card", "neither a hardware preset"),
    (('m = 64,', 'm = 64, speed = 3,'), "speed", "unknown field"),
    (('m = 64,', 'm = 64.5,'), "m", "integer count"),
    (('operation = "dense"', 'operation = "sparse"'), "operation", "expected one of"),
    (('kind = "gemm"', 'kind = "gemv"'), "kind", "not one of"),
    (('quote = "We test at 64 rows."', 'quote = "We test at 64 rows."\npeak_tflop_per_s = 1979'),
     "peak_quote", "needs the text"),
    (('achieved_tflop_per_s = 206,', 'utilization_percent = 206,'), "utilization_percent", "at most 100"),
    (('operation = "dense"\n', ''), "operation", "missing"),
    (('x-card = "a card"', 'h800 = "again"'), "cards", "already a hardware preset"),
])
def test_malformed_files_give_one_line_errors(tmp_path, edit, field_, message):
    old, new = edit
    assert old in GOOD
    with pytest.raises(ConfigError) as exc:
        C.load(_write(tmp_path, GOOD.replace(old, new, 1)))
    assert exc.value.field == field_ and message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_duplicate_table_ids_and_bad_toml(tmp_path):
    with pytest.raises(ConfigError, match="duplicate id"):
        C.load(_write(tmp_path, GOOD + GOOD.split("[cards]\nx-card = \"a card\"\n")[1]))
    with pytest.raises(ConfigError, match="not valid TOML"):
        C.load(_write(tmp_path, "[[table]\n"))
    with pytest.raises(ConfigError, match="no such file"):
        C.load(tmp_path / "absent.toml")


def test_import_is_light():
    code = "import sys, pdcalc.perf.costs; print(sorted(m for m in ('numpy', 'pandas') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_finite_positive_si_values():
    for p in POINTS:
        for key, _, _ in p.printed:
            v = getattr(p, C.si_name(key))
            assert math.isfinite(v) and (v > 0 or (key in C.ZERO_KEYS and v == 0)), (p.id, key)


# ------------------------------------------------------------------------------------------ overlap
def test_overlap_sms_of_deepseeks_prefill_and_decode():
    pre = C.overlap("h800", "prefill", mode="normal")[0]
    assert pre.table_id == "deepseek-profile-prefill-overlap"
    assert (pre.compute_sms, pre.comm_sms, pre.sms) == (108, 24, 132)
    assert pre.comm_sm_share == pytest.approx(24 / 132) and pre.compute_slowdown == pytest.approx(132 / 108)
    (dec,) = C.overlap("h800", "decode")
    assert (dec.compute_sms, dec.comm_sms, dec.mode) == (132, 0, "low_latency")
    assert dec.comm_sm_share == 0 and dec.compute_slowdown == 1
    # DeepEP's normal-kernel table was measured on the 24 SMs the prefill overlap gives its communication
    (test,) = [p for p in C.overlap("h800", "prefill") if p.table_id == "deepep-v1-normal-test-sms"]
    assert test.comm_sms == pre.comm_sms and test.compute_slowdown is None
    # the card's 132 SMs, as the figure's two rows add up, the V3 report states and the trace's device reports
    assert pre.sms == dec.sms == C.overlap("h800", "training")[0].sms == 132


def test_the_training_trace_agrees_with_the_report():
    report, trace = (next(p for p in C.overlap("h800", "training") if p.table_id == t)
                     for t in ("deepseek-v3-report-comm-sms", "deepseek-profile-train-trace"))
    assert trace.comm_sms == report.comm_sms == 20                 # 20 of 132 SMs, as §3.5.1 says
    assert trace.compute_sms + trace.comm_sms == trace.card_sms == 132
    assert trace.derived_by == "tools/overlap_trace.py" and trace.commit
    assert trace.exposed_fraction == pytest.approx(1 - 109250 / 113440)
    assert 0 < trace.exposed_fraction < 0.05
    assert report.exposed_fraction is None and report.compute_sms is None


def test_overlap_lookup_refuses_unknown_names():
    with pytest.raises(UnknownNameError, match="unknown phase"):
        C.overlap(phase="serving")
    with pytest.raises(UnknownNameError, match="unknown mode"):
        C.overlap(mode="fast")


# ------------------------------------------------------------------------------------------ derived points
ROOT = Path(__file__).resolve().parents[1]
DERIVED = [p for p in POINTS if p.derived_by]
sys.path.insert(0, str(ROOT / "tools"))
import overlap_trace  # noqa: E402


def test_derived_points_name_a_script_of_the_repository():
    assert DERIVED
    for p in DERIVED:
        assert (ROOT / p.derived_by).is_file(), p.derived_by
        assert p.commit and p.url and p.commit in p.url


@pytest.mark.parametrize("p", DERIVED, ids=lambda p: p.id)
def test_derived_point_is_what_its_script_prints(p):
    """Where the published data is at hand (PDCALC_PROFILE_DATA: a folder with train.json, fetched from
    deepseek-ai/profile-data at the point's commit), the script's output is the recorded quote."""
    import os

    folder = os.environ.get("PDCALC_PROFILE_DATA")
    trace = Path(folder) / "train.json" if folder else None
    if trace is None or not trace.is_file():
        pytest.skip("the trace is not at hand (set PDCALC_PROFILE_DATA to a folder with train.json)")
    out = subprocess.run([sys.executable, str(ROOT / p.derived_by), str(trace)], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == p.quote


def _trace(gemm_grid=(112, 1, 1), comm_grid=(20, 1, 1)):
    def k(name, ts, dur, grid):
        return {"cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": {"device": 0, "grid": list(grid)}}
    return {"deviceProperties": [{"name": "NVIDIA H800", "numSms": 132}],
            "distributedInfo": {"rank": 0, "world_size": 64},
            "traceEvents": [
                k("void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8::GemmKernel>", 0, 100, gemm_grid),
                k("void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8::GemmKernel>", 150, 50, gemm_grid),
                k("void dpsk::ep::internode::dispatch<false, 8>", 50, 80, comm_grid),   # 50 us alongside
                k("void dpsk::ep::internode::combine<false, 8>", 180, 40, comm_grid),   # 20 of 40 alongside
                k("void dpsk::ep::internode::cached_notify<false>", 190, 10, (9, 1, 1)),  # inside the combine
                {"cat": "cpu_op", "name": "aten::empty", "ts": 0, "dur": 500}]}


def test_the_trace_script_measures_blocks_and_overlap():
    m = overlap_trace.measure(_trace())
    assert (m["sms"], m["gemm_blocks"], m["comm_blocks"]) == (132, 112, 20)
    assert (m["comm_us"], m["comm_alongside_us"]) == (120, 70)
    assert overlap_trace.line(m).startswith("train.json (rank 0 of 64, NVIDIA H800, 132 SMs)")
    with pytest.raises(ValueError, match="one block count"):
        bad = _trace()
        bad["traceEvents"][1]["args"]["grid"] = [132, 1, 1]
        overlap_trace.measure(bad)
    assert overlap_trace.blob_id(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"   # git's empty blob


def test_the_trace_script_refuses_another_file(tmp_path):
    f = tmp_path / "train.json"
    f.write_text("{}", encoding="utf-8")
    assert overlap_trace.main([str(f)]) == 1


OVERLAP_GOOD = GOOD.replace('''kind = "gemm"
card = "h800"
dtype = "fp8"
operation = "dense"''', '''kind = "overlap"
card = "h800"
phase = "prefill"
mode = "normal"''').replace('''{ m = 64, achieved_tflop_per_s = 206, quote = "| 64 | 206 TFLOPS |" }''',
                                '''{ compute_sms = 108, comm_sms = 24, quote = "108 SMs and 24 SMs" }''')


def test_a_good_overlap_file_loads(tmp_path):
    (p,) = C.load(_write(tmp_path, OVERLAP_GOOD)).points
    assert p.compute_slowdown == pytest.approx(132 / 108)


@pytest.mark.parametrize("edit, field_, message", [
    (("comm_sms = 24", "comm_sms = -1"), "comm_sms", "positive number"),
    (("compute_sms = 108", "compute_sms = 0"), "compute_sms", "positive number"),
    (("compute_sms = 108, comm_sms = 24,", "compute_sms = 108,"), "comm_sms", "needs the communication"),
    (('comm_sms = 24, quote = "108 SMs and 24 SMs"',
      'comm_sms = 24, card_sms = 100, quote = "108 SMs and 24 SMs of 100"'), "card_sms", "exceed the card's"),
    (('mode = "normal"', 'mode = "fast"'), "mode", "expected one of"),
    (('conditions = "as stated"', 'conditions = "as stated"\nderived_by = "tools/x.py"'), "commit",
     "derived figure needs the commit"),
    (('conditions = "as stated"', 'conditions = "as stated"\nderived_by = "/tmp/x.py"'), "derived_by",
     "script of this repository"),
])
def test_malformed_overlap_points(tmp_path, edit, field_, message):
    old, new = edit
    assert old in OVERLAP_GOOD
    with pytest.raises(ConfigError) as exc:
        C.load(_write(tmp_path, OVERLAP_GOOD.replace(old, new, 1)))
    assert exc.value.field == field_ and message in str(exc.value)
