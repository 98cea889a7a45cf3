"""Property-based tests of every input path (hypothesis): generated config.json files, card files and
command-line values. Whatever the input, ``pdcalc`` answers with valid JSON or with exit status 2 and one
line (cli_harness.assert_clean): never a traceback, a hang or a silent change of type.

The examples are derandomized, so a run is the same on every machine; set ``HYPOTHESIS_PROFILE=thorough``
for a longer, random search.
"""

from __future__ import annotations

import json
import math
import os

import pytest
from cli_harness import assert_clean, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_bad_inputs import card, config

settings.register_profile("ci", max_examples=40, deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=1000, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# a numpy warning would reach the user's terminal as a second line: fail on it
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

#: JSON values of every kind a hand-edited config may hold, with the edges that broke pdcalc before.
json_values = st.one_of(
    st.integers(min_value=-10, max_value=10), st.integers(min_value=-2**70, max_value=2**70),
    st.sampled_from([0, 1, 2, 3, 7, 8, 64, 128, 256, 7168, 10**6, 10**12, 2**53 + 1, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([7168.0, 0.5, 1e300, -0.0, 2.0**60]),
    st.booleans(), st.none(), st.text(max_size=8), st.sampled_from(["false", "true", "7168", "", "nan"]),
    st.lists(st.integers(min_value=-1, max_value=200), max_size=70), st.dictionaries(st.text(max_size=4), st.integers(), max_size=3),
)


def _dump(cfg: dict) -> str:
    # json.dumps writes NaN/Infinity for non-finite floats; a hand-written file may hold them too
    return json.dumps(cfg)


def _fields(name: str) -> list[str]:
    return sorted(config(name)) + ["q_lora_rank", "n_group", "unknown_field"]


@st.composite
def mutated_config(draw):
    name = draw(st.sampled_from(["deepseek-v3", "deepseek-v4-flash"]))
    cfg = config(name)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        field = draw(st.sampled_from(_fields(name)))
        if draw(st.integers(min_value=0, max_value=9)) == 0:
            cfg.pop(field, None)
        else:
            cfg[field] = draw(json_values)
    return name, cfg


def _write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _ints_stay_ints(out) -> None:
    data = out.json
    for key in ("total", "activated", "mtp", "total_with_mtp"):
        assert isinstance(data[key], int) and not isinstance(data[key], bool), (key, data[key])
    assert all(isinstance(v, int) for v in data["by_category"].values())


@given(case=mutated_config())
def test_any_config_gives_json_or_one_line(tmp_path, case):
    name, cfg = case
    path = _write(tmp_path, "config.json", _dump(cfg))
    out = assert_clean(run_cli("params", path, "--json"))
    if out.code == 0:
        _ints_stay_ints(out)
        assert out.json["total"] > 0 and out.json["activated"] <= out.json["total"]
    assert_clean(run_cli("memory", path, "--card", "ascend-910b2", "--ep", "8", "--json"))
    assert_clean(run_cli("kv", path, "--context", "4096", "--json"))


@given(case=mutated_config())
@settings(max_examples=15)
def test_any_config_in_throughput_and_plan(tmp_path, case):
    _, cfg = case
    path = _write(tmp_path, "config.json", _dump(cfg))
    assert_clean(run_cli("throughput", path, "--card", "ascend-910b2", "--tp", "1", "--dp", "8", "--ep", "8",
                         "--context", "2048", "--concurrency", "64", "--json"))
    assert_clean(run_cli("plan", "--model", path, "--card", "ascend-910b2", "--cards", "16", "--prompt", "2048",
                         "--output", "256", "--concurrency", "64", "--json"))


#: TOML scalars and arrays for card fields.
toml_values = st.one_of(
    st.sampled_from(["0", "-1", "1", "8", "8.5", "inf", "-inf", "nan", "1e300", "68719476736", "2e12", "1e20",
                     '"x"', '""', "true", "false", "[]", "[1]", "[2e12, 1e12]", "[1e12, 2e12]", "[1, 2, 3]",
                     '["a", "b"]', "{ fp16 = 1e14 }", "{ }", "{ int8 = -1 }", "{ bf16 = nan }", "1979-05-27"]),
    st.integers(min_value=-2**63, max_value=2**63 - 1).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)
CARD_FIELDS = ["label", "hbm_bytes", "hbm_visible_bytes", "hbm_bandwidth_bytes_per_s", "hbm_bandwidth_bytes_per_s_range",
               "flops_per_s", "flops_per_s_range", "intra_node_bytes_per_s", "scale_out_bytes_per_s", "cards_per_node",
               "source", "something_else"]


@st.composite
def mutated_card(draw):
    lines = {ln.split(" = ", 1)[0]: ln for ln in card().splitlines()}
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        field = draw(st.sampled_from(CARD_FIELDS))
        if draw(st.integers(min_value=0, max_value=9)) == 0:
            lines.pop(field, None)
        else:
            lines[field] = f"{field} = {draw(toml_values)}"
    return "\n".join(lines.values()) + "\n"


@given(text=mutated_card())
def test_any_card_file_gives_json_or_one_line(tmp_path, text):
    path = _write(tmp_path, "card.toml", text)
    out = assert_clean(run_cli("memory", "deepseek-v4-flash", "--card", path, "--ep", "8", "--json"))
    if out.code == 0:
        assert math.isfinite(out.json["usable_bytes"]) and out.json["usable_bytes"] > 0
    assert_clean(run_cli("throughput", "deepseek-v3", "--card", path, "--tp", "8", "--dp", "4", "--context", "2048",
                         "--concurrency", "80", "--json"))


#: What a user may type where a number goes.
typed = st.one_of(
    st.sampled_from(["0", "-1", "1", "2", "3", "7", "8", "16", "64", "1000", "65536", "65537", "1e3", "1.5", "0.5",
                     "inf", "-inf", "nan", "1e400", "", " ", "abc", "0x10", "1_000", "9" * 5000, "١٢", "--", "-0"]),
    st.integers(min_value=-10**6, max_value=10**9).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)


@st.composite
def flags(draw, baseline: dict[str, str]) -> list[str]:
    """A valid command line with one to three of its values replaced by what a user might type."""
    values = dict(baseline)
    for flag in draw(st.lists(st.sampled_from(sorted(baseline)), min_size=1, max_size=3, unique=True)):
        values[flag] = draw(typed)
    return [x for flag, v in values.items() for x in (flag, v)]


THROUGHPUT = {"--tp": "8", "--dp": "4", "--ep": "32", "--context": "2048", "--concurrency": "80", "--mfu": "0.5",
              "--mbu": "0.7", "--comm-eff": "0.7"}
PLAN = {"--cards": "64", "--prompt": "4096", "--output": "1024", "--concurrency": "256", "--ttft-ms": "20000",
        "--tpot-ms": "100", "--bandwidth-gb-s": "18", "--utilization": "0.9", "--top": "5", "--p-tp": "1",
        "--d-tp": "2", "--frontier-points": "4"}
MEMORY = {"--ep": "8", "--tp": "1", "--utilization": "0.9", "--redundant": "0"}


@given(args=flags(THROUGHPUT))
def test_throughput_flags(args):
    assert_clean(run_cli("throughput", "deepseek-v3", "--card", "ascend-910b2", *args, "--json"))


@given(args=flags(PLAN))
@settings(max_examples=25)
def test_plan_flags(args):
    # a cluster is capped here so that each example stays quick (8,192 cards: test_bad_inputs and make bench)
    i = args.index("--cards") + 1
    if args[i].strip().isascii() and args[i].strip().isdigit() and len(args[i]) < 10 and int(args[i]) > 256:
        args[i] = "256"
    assert_clean(run_cli("plan", "--card", "ascend-910b2", *args, "--json"))


@given(args=flags(MEMORY), ctx=typed)
def test_memory_and_kv_flags(args, ctx):
    assert_clean(run_cli("memory", "deepseek-v4-flash", "--card", "ascend-910b2", *args, "--json"))
    assert_clean(run_cli("kv", "deepseek-v4-flash", "--context", ctx, "--json"))


@given(name=st.text(max_size=20), value=st.text(max_size=30))
@settings(max_examples=30)
def test_rerun_parameters_are_judged_before_any_run(tmp_path, name, value):
    # an unknown name or a value the chapter cannot take is refused in one line; a valid one would run the
    # chapter, so it is only validated here (pdcalc.book.rerun.validate), never executed
    from pdcalc.book.parameters import chapter_parameters, parse_value
    from pdcalc.book.validators import validate
    from pdcalc.core.errors import PdcalcError

    declared = chapter_parameters("plan")
    try:
        parsed = parse_value(value, declared[name].type if name in declared else None)
        validate("plan", {name: parsed})
    except PdcalcError as exc:
        assert "\n" not in str(exc) and str(exc).strip()


#: A ``rope_scaling`` of V4-Flash's config with fields of any JSON kind (or the whole of it replaced).
@st.composite
def rope_scaling(draw):
    scaling = dict(config("deepseek-v4-flash")["rope_scaling"])
    if draw(st.integers(min_value=0, max_value=5)) == 0:
        return draw(json_values)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        key = draw(st.sampled_from(sorted(scaling) + ["mscale", "rope_type"]))
        scaling[key] = draw(json_values)
    return scaling


@given(scaling=rope_scaling())
def test_any_rope_scaling_gives_finite_buffers_or_one_line(tmp_path, scaling):
    cfg = dict(config("deepseek-v4-flash"), rope_scaling=scaling)
    path = _write(tmp_path, "config.json", _dump(cfg))
    out = assert_clean(run_cli("memory", path, "--card", "ascend-910b2", "--ep", "8", "--max-num-batched-tokens",
                               "8192", "--json"))
    if out.code == 0:
        buffers = out.json["load_buffers_bytes"]
        assert all(math.isfinite(v) and v >= 0 for v in buffers.values()), buffers
    else:
        assert "rope_scaling" in out.err


#: Card figures from below any real card to above the bounds, as TOML numbers.
card_figures = st.one_of(st.floats(min_value=1e-320, max_value=1e20, allow_nan=False),
                         st.sampled_from([1e-300, 5e-324, 1.0, 1e8, 1e9, 1e10, 1e11, 1e12, 2.0**50, 2.0**60]))


@given(bw=card_figures, flops=card_figures, link=card_figures)
@settings(max_examples=25)
def test_any_accepted_card_gives_finite_steps(tmp_path, bw, flops, link):
    text = (card().replace("hbm_bandwidth_bytes_per_s = 1.6e12", f"hbm_bandwidth_bytes_per_s = {bw!r}")
            .replace("hbm_bandwidth_bytes_per_s_range = [1.2e12, 2.0e12]\n", "")
            .replace("int8 = 752e12", f"int8 = {flops!r}").replace("intra_node_bytes_per_s = 196e9",
                                                                  f"intra_node_bytes_per_s = {link!r}"))
    path = _write(tmp_path, "card.toml", text)
    out = assert_clean(run_cli("throughput", "deepseek-v3", "--card", path, "--tp", "8", "--dp", "4", "--context",
                               "2048", "--concurrency", "80", "--quant", "w8a8", "--json"))
    if out.code == 0:
        json.loads(out.out, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
        for phase in out.json["phases"].values():
            assert math.isfinite(phase["step_s"]) and phase["step_s"] > 0 and phase["tokens_per_s"] > 0
    else:
        assert path in out.err
