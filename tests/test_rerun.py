"""pdcalc.book.rerun and ``pdcalc rerun``: chapters re-executed with other parameters, outside ``book/``.

Two real executions of ``per_card`` are shared by the tests of this module: one with the defaults
(through the Python API) and one with another card and decode EP group (through the command line,
with ``--html``).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from test_page import page_text

from pdcalc.book import parameters as rp
from pdcalc.book import rerun as rr
from pdcalc.book import validators as rv
from pdcalc.core import errors as errors_mod
from pdcalc.core.errors import MAX_MESSAGE, PdcalcError, UnknownNameError
from pdcalc.model.quant import V4_ASCEND_W8A8

pytest.importorskip("papermill")

REPO = Path(__file__).resolve().parent.parent
FP16_ONLY = REPO / "tests" / "data" / "cards" / "fp16-only.toml"  # a card without INT8 or BF16 peaks
CHAPTER = REPO / "book" / "per_card.ipynb"
ALTAIR_ID = re.compile(r"altair-viz-[0-9a-f]+")
NEW = {"card": "ascend-910b4-32g", "d_ep": 16}


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "pdcalc.cli", *args], capture_output=True, text=True, cwd=cwd)


def snapshot(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


@pytest.fixture(scope="module")
def before() -> tuple[bytes, int]:
    """The committed chapter as it was before this module's runs."""
    return snapshot(CHAPTER)


@pytest.fixture(scope="module")
def default_run(before, tmp_path_factory) -> rr.RunResult:
    return rr.rerun("per_card", {}, outdir=tmp_path_factory.mktemp("default"))


@pytest.fixture(scope="module")
def changed_run(before, tmp_path_factory) -> Path:
    """``pdcalc rerun per_card -p card ascend-910b4-32g -p d_ep 16 --html`` in an empty folder."""
    cwd = tmp_path_factory.mktemp("changed")
    args = ["rerun", "per_card", "--html"]
    for name, value in NEW.items():
        args += ["-p", name, str(value)]
    out = cli(*args, cwd=cwd)
    assert out.returncode == 0, out.stderr
    assert "wrote" in out.stdout
    return cwd / "pdcalc-runs"


def code_outputs(nb) -> list[list[dict]]:
    """Per code cell (injected parameters excluded): each output's data, chart ids made neutral."""
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code" or "injected-parameters" in cell.metadata.get("tags", []):
            continue
        outs = []
        for o in cell.outputs:
            data = {k: ALTAIR_ID.sub("altair-viz-ID", v if isinstance(v, str) else json.dumps(v))
                    for k, v in o.get("data", {}).items()}
            outs.append({"type": o.output_type, "data": data, "text": o.get("text")})
        cells.append(outs)
    return cells


def glued(nb) -> dict:
    """Values recorded with ``myst_nb.glue`` (papermill records), by name: markdown as its text."""
    out = {}
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            name = o.get("metadata", {}).get("scrapbook", {}).get("name")
            if name:
                md = o["data"].get("application/papermill.record/text/markdown")
                out[name] = md if md is not None else ast.literal_eval(o["data"]["application/papermill.record/text/plain"])
    return out


def table_rows(nb, marker: str) -> dict[str, dict[str, float]]:
    """The ``pdcalc.book.display`` table of the cell whose source holds ``marker``, read from its CSV download:
    row label -> {column: number} (empty cells left out)."""
    import base64
    import csv
    import io

    (cell,) = [c for c in nb.cells if c.cell_type == "code" and marker in c.source]
    html = cell.outputs[-1]["data"]["text/html"]
    data = base64.b64decode(re.search(r'href="data:text/csv;charset=utf-8;base64,([^"]+)"', html).group(1))
    header, *body = csv.reader(io.StringIO(data.decode("utf-8")))
    return {row[0]: {col: float(v.replace(",", "")) for col, v in zip(header[1:], row[1:]) if v} for row in body}


def chart_html(nb) -> str:
    (html,) = [h for c in nb.cells if c.cell_type == "code" for o in c.outputs
               for h in [o.get("data", {}).get("text/html", "")]
               if "vegaEmbed" in h and '"pdcalc": {"set"' not in h]        # the chapter's chart, not its what-if
    return html


# ---------------------------------------------------------------------------------------------
# parameters
# ---------------------------------------------------------------------------------------------
def test_chapter_parameters_read_from_the_parameters_cell():
    params = rp.chapter_parameters("per_card")
    assert params["d_ep"] == (32, int, "cards per decode EP group")
    assert params["utilization"].type is float and params["mtp"].type is bool
    assert list(params)[:2] == ["model", "article_model"]
    assert rp.chapter_parameters(CHAPTER) == params          # a path works too
    assert rp.chapter_parameters("kv_memory")["block_size"].default is None


def test_every_toc_chapter_is_known_and_its_defaults_validate():
    known = rp.chapters()
    assert {"architecture", "per_card", "kv_memory", "transfer", "pd_split"} <= set(known)
    for name in known:
        assert rv.validate(name, {}) == {}


@pytest.mark.parametrize("text,expected,value", [
    ("16", int, 16), ("0.85", float, 0.85), ("1", float, 1), ("1e3", float, 1000.0), ("true", bool, True),
    ("False", bool, False), ("None", type(None), None), ("null", type(None), None), ("[4, 16]", list, [4, 16]),
    ("4,16", list, [4, 16]), ("123", str, "123"), ("ascend-910b4-32g", str, "ascend-910b4-32g"),
    ("{p_act: 5, p_fw: 3}", type(None), {"p_act": 5, "p_fw": 3}), ("eight", int, "eight"),
])
def test_command_line_values_parse_like_papermill(text, expected, value):
    assert rp.parse_value(text, expected) == value


def test_every_parameter_of_every_chapter_has_a_validator():
    for name in rp.chapters():
        missing = [k for k in rp.chapter_parameters(name) if k not in rv.VALIDATORS]
        assert not missing, f"{name}: no validator for {missing}"


@pytest.mark.parametrize("text,expected,message", [
    ("1" * 5000, int, "parameter 'x': an integer of 5,000 digits; no parameter takes one that large"),
    ("-" + "9" * 4301, type(None), "parameter 'x': an integer of 4,301 digits"),
    ("[" * 100_000 + "]" * 100_000, list, "parameter 'x': nested more than 8 deep"),
    ("[" * 10 + "1" + "]" * 10, list, "parameter 'x': nested more than 8 deep"),
    ("[" + ", ".join(["1"] * 20_000) + "]", list, "parameter 'x': more than 10,000 items"),
    ("a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
     "e: [*d, *d, *d, *d, *d, *d, *d, *d, *d]", type(None), "parameter 'x': more than 10,000 items"),
])
def test_odd_command_line_text_is_one_line_parameter_error(text, expected, message):
    with pytest.raises(rp.ParameterError) as info:
        rp.parse_value(text, expected, name="x")
    assert str(info.value).startswith(message)
    assert len(str(info.value).splitlines()) == 1 and len(str(info.value)) < 300
    with pytest.raises(rp.ParameterError, match=r"^value '"):  # without a name: the value, shortened
        rp.parse_value(text, expected)


@pytest.mark.parametrize("chapter,name,text,message", [
    ("per_card", "utilization", ".inf", "parameter 'utilization': must be a finite number in (0, 1], got inf"),
    ("per_card", "utilization", ".nan", "parameter 'utilization': must be a finite number in (0, 1], got nan"),
    ("per_card", "utilization", "1e400", "parameter 'utilization': must be a finite number in (0, 1], got inf"),
    ("plan", "rate_per_s", "-.inf", "parameter 'rate_per_s': must be a finite number in 1e-06..1,000,000,000 (requests/s), got -inf"),
    ("per_card", "d_ep", "\udcff\udcfe\x01\x7fjunk\u2028", "parameter 'd_ep': must be an integer like its default 32"),
    ("per_card", "d_ep", "!!binary aGVsbG8=", "parameter 'd_ep': must be an integer like its default 32, got b'hello'"),
    ("pd_split", "d_sizes", "2024-01-01", "parameter 'd_sizes': must be a list like its default"),
    ("kv_memory", "overhead_gb", "!!python/object:os.system x", "parameter 'overhead_gb': must be None or a mapping"),
    ("plan", "context", "4.5", "parameter 'context': must be an integer in 1..16,777,216, got 4.5"),
    ("per_card", "card", "\udcff\udcfe", "parameter 'card': unknown card '\\udcff\\udcfe'"),
])
def test_odd_values_reach_validation_as_one_line_errors_naming_the_parameter(chapter, name, text, message):
    declared = rp.chapter_parameters(chapter)
    value = rp.parse_value(text, declared[name].type, name=name)
    with pytest.raises(rp.ParameterError) as info:
        rv.validate(chapter, {name: value})
    assert str(info.value).startswith(message)
    assert len(str(info.value).splitlines()) == 1


def test_validate_converts_and_resolves(tmp_path, monkeypatch):
    assert rv.validate("per_card", {"utilization": 1}) == {"utilization": 1.0}
    assert rv.validate("kv_memory", {"engine": "vllm", "block_size": 256}) == {"engine": "vllm", "block_size": 256}
    from importlib import resources

    config = tmp_path / "config.json"
    config.write_text(resources.files("pdcalc").joinpath("data", "models", "deepseek_v4_flash_config.json").read_text())
    monkeypatch.chdir(tmp_path)
    # a relative path is made absolute: the chapter runs in book/
    assert rv.validate("per_card", {"model": "config.json"}) == {"model": str(config)}
    with pytest.raises(rp.ParameterError, match="'model': .*no such file"):
        rv.validate("per_card", {"model": "missing/config.json"})


@pytest.mark.parametrize("chapter,params,error,message", [
    ("per_card", {"dep": 16}, rp.ParameterError,
     "unknown parameter 'dep' for chapter per_card; its parameters: model, article_model, quant, card,"),
    ("per_card", {"p_ep": "eight"}, rp.ParameterError, "parameter 'p_ep': must be an integer like its default 8"),
    ("per_card", {"utilization": 1.5}, rp.ParameterError,
     "parameter 'utilization': must be a finite number in (0, 1], got 1.5"),
    ("per_card", {"d_ep": 1000}, rp.ParameterError,
     "parameter 'd_ep': 1000 cards for deepseek-v4-flash: cannot spread 256 experts (+0 redundant) over 1000 cards"),
    ("per_card", {"card": "tpu-v5"}, rp.ParameterError,
     "parameter 'card': unknown card 'tpu-v5'; known: ascend-910b2, ascend-910b3, ascend-910b4"),
    ("per_card", {"mtp": "yes"}, rp.ParameterError, "parameter 'mtp': must be true or false"),
    ("per_card", {"tp_alt": 0}, rp.ParameterError, "parameter 'tp_alt': must be an integer in 1..65,536, got 0"),
    ("per_card", {"model": "deepseek-v4-flash-article"}, rp.ParameterError, "is an article's architecture"),
    ("per_card", {"quant": "int3"}, rp.ParameterError, "unknown quantization scheme 'int3'; known: article-1byte"),
    ("transfer", {"model": "deepseek-v3"}, rp.ParameterError, "this chapter takes a deepseek_v4 model"),
    ("kv_memory", {"engine": "reference", "block_size": 64}, rp.ParameterError,
     "parameter 'block_size': 64 with engine 'reference': the reference implementation does not page"),
    ("kv_memory", {"engine": "sglang"}, rp.ParameterError, "unknown engine 'sglang'; known: reference, vllm"),
    ("kv_memory", {"overhead_gb": {"p_act": 1}}, rp.ParameterError, "exactly the keys p_act, p_fw, d_act, d_fw"),
    ("kv_memory", {"max_model_len": -5}, rp.ParameterError, "'max_model_len': must be an integer in 1..16,777,216"),
    ("pd_split", {"d_sizes": [16, 512]}, rp.ParameterError, "512 cards for deepseek-v4-flash: cannot spread"),
    ("pd_split", {"d_sizes": [16, "x"]}, rp.ParameterError, "every item must be an integer"),
    ("transfer", {"measurement": "nope"}, rp.ParameterError, "unknown transfer measurement 'nope'"),
    ("transfer", {"bandwidth_gb_s": 0}, rp.ParameterError, "'bandwidth_gb_s': must be a finite number in 0.001..1,000,000 (GB/s), got 0"),
    ("transfer", {"mfu": 0}, rp.ParameterError, "'mfu': must be a finite number in (0, 1]"),
    ("no_such_chapter", {}, UnknownNameError, "unknown chapter 'no_such_chapter'; known: architecture, hardware, intro, kv_memory"),
    # values that used to pass, run the chapter and fail there (exit 1): now refused before anything runs
    ("v3_throughput", {"other_card": "tpu-v5"}, rp.ParameterError, "parameter 'other_card': unknown card 'tpu-v5'"),
    ("v3_throughput", {"other_quant": "int3"}, rp.ParameterError,
     "parameter 'other_quant': unknown quantization scheme 'int3'"),
    ("v3_throughput", {"other_card": "ascend-910b2"}, rp.ParameterError,
     "parameter 'other_card': card 'ascend-910b2' defines peak FLOP/s for bf16, fp16, int8 only; chapter "
     "v3_throughput computes the second card's steps (pdcalc.perf.step.step) with other_quant 'fp8', which "
     "needs fp8 (the linear layers of fp8)"),
    ("v3_throughput", {"other_quant": "w8a8"}, rp.ParameterError,
     "parameter 'other_quant': card 'h800' defines peak FLOP/s for bf16, fp16, fp8 only"),
    ("v3_throughput", {"card": str(FP16_ONLY)}, rp.ParameterError, "and bf16 (attention)"),
    ("validation", {"scheme": "int3"}, rp.ParameterError, "parameter 'scheme': unknown quantization scheme 'int3'"),
    ("plan", {"cards": 1}, rp.ParameterError, "parameter 'cards': must be an integer in 2..65,536, got 1"),
    ("plan", {"rate_per_s": 2.0, "concurrency": 64}, rp.ParameterError,
     "parameter 'rate_per_s': give rate_per_s or concurrency, not both"),
    ("plan", {"concurrency": 64, "rate_per_s": 2.0}, rp.ParameterError, "parameter 'concurrency': give rate_per_s"),
    ("plan", {"card": str(FP16_ONLY)}, rp.ParameterError,
     f"parameter 'card': card '{FP16_ONLY}' defines peak FLOP/s for fp16 only; chapter plan computes prefill "
     "and decode steps (pdcalc.perf.step.step) with quant 'w8a8-msmodelslim', which needs int8 (the linear "
     "layers of w8a8-msmodelslim) and bf16 (attention)"),
    ("plan", {"quant": "fp8"}, rp.ParameterError, "parameter 'quant': card 'ascend-910b2' defines peak FLOP/s"),
    ("transfer", {"card": "h800"}, rp.ParameterError,
     "parameter 'card': card 'h800' defines peak FLOP/s for bf16, fp16, fp8 only; chapter transfer computes the "
     "prefill compute time (pdcalc.perf.flops.prefill_compute_seconds), which needs int8"),
    ("plan", {"output_tokens": 40_000}, rp.ParameterError,
     "parameter 'output_tokens': output_tokens (40,000) must be smaller than context (32,768, the chapter's default)"),
    ("plan", {"context": 100_000, "output_tokens": 40_000}, rp.ParameterError, "replays the V4 article's scenario B"),
    ("plan", {"tp_options": [3]}, rp.ParameterError,
     "parameter 'tp_options': TP 3 for deepseek-v4-flash: 3 does not divide the 64 attention heads"),
    ("plan", {"tp_options": [1, 0]}, rp.ParameterError, "parameter 'tp_options', item 2: must be an integer in 1.."),
    ("per_card", {"tp_alt": 16}, rp.ParameterError, "16 does not divide the 8 output groups"),
    ("pd_split", {"p_ep": 64}, rp.ParameterError, "parameter 'p_ep': p_ep = 64 must be one of p_sizes [2, 4, 8, 16, 32]"),
    ("pd_split", {"d_sizes": [4, 8]}, rp.ParameterError, "parameter 'd_sizes': d_ep = 32 must be one of d_sizes [4, 8]"),
    ("per_card", {"utilization": float("inf")}, rp.ParameterError, "parameter 'utilization': must be a finite number"),
    ("per_card", {"utilization": float("nan")}, rp.ParameterError, "parameter 'utilization': must be a finite number"),
    ("plan", {"bandwidth_gb_s": float("inf")}, rp.ParameterError, "parameter 'bandwidth_gb_s': must be a finite number"),
    ("plan", {"rate_per_s": float("nan")}, rp.ParameterError, "parameter 'rate_per_s': must be a finite number"),
    ("plan", {"cards": 10**4000}, rp.ParameterError, "parameter 'cards': must be an integer in 2..65,536, got an integer of"),
    ("v3_throughput", {"card_counts": [8, 0]}, rp.ParameterError, "parameter 'card_counts', item 2: must be an integer"),
    ("v3_throughput", {"users": 0}, rp.ParameterError, "parameter 'users': must be an integer in 1.."),
    ("v3_throughput", {"mbu": 0}, rp.ParameterError, "parameter 'mbu': must be a finite number in (0, 1]"),
    ("validation", {"comm_eff": 2}, rp.ParameterError, "parameter 'comm_eff': must be a finite number in (0, 1]"),
    ("validation", {"overlap": 1}, rp.ParameterError, "parameter 'overlap': must be true or false"),
    ("kv_memory", {"overhead_gb": {"p_act": 1, "p_fw": 1, "d_act": float("nan"), "d_fw": 1}}, rp.ParameterError,
     "parameter 'overhead_gb', key 'd_act': must be a finite number >= 0 (GB), got nan"),
    ("kv_memory", {"block_size": 2**40}, rp.ParameterError, "parameter 'block_size': must be an integer in 1..1,048,576"),
    ("per_card", {"model": "x" * 5000}, rp.ParameterError, "parameter 'model': must be a model preset or a config.json "
                                                            "path, got a string of 5,000 characters"),
    ("per_card", {"card": "a\x00b"}, rp.ParameterError, "parameter 'card': must be a name or a file path, got a string "
                                                          "holding a NUL character"),
    ("per_card", {"card": "line\nbreak"}, rp.ParameterError, "parameter 'card': unknown card 'line\\nbreak'"),
])
def test_bad_parameters_are_rejected_before_anything_runs(chapter, params, error, message, tmp_path):
    out = tmp_path / "runs"
    with pytest.raises(error) as info:
        rr.rerun(chapter, params, outdir=out, html=True)
    assert message in str(info.value)
    assert isinstance(info.value, PdcalcError)
    assert "\n" not in str(info.value)
    assert not out.exists()


def _read_only_folder(tmp_path: Path) -> Path:
    """A folder this process cannot write to: chmod 555 unless root (root ignores it), else /sys."""
    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    folder = Path("/sys/kernel")
    try:
        (folder / ".pdcalc-probe").touch()
    except OSError:
        return folder
    pytest.skip("no read-only folder for root here")


@pytest.mark.parametrize("kind", ["proc", "read-only", "dev-null", "file", "below-a-file", "target-is-a-folder"])
def test_bad_output_folder_is_one_line_rerun_error_before_anything_runs(kind, tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    outdir = {"proc": Path("/proc/x"), "read-only": None, "dev-null": Path("/dev/null"), "file": a_file,
              "below-a-file": a_file / "runs", "target-is-a-folder": tmp_path / "runs"}[kind]
    if kind == "read-only":
        outdir = _read_only_folder(tmp_path)
    if kind == "target-is-a-folder":
        (outdir / "per_card.ipynb").mkdir(parents=True)
    if kind == "proc" and not Path("/proc").is_dir():
        pytest.skip("no /proc")
    with pytest.raises(errors_mod.RerunError) as info:
        rr.rerun("per_card", {}, outdir=outdir)
    message = str(info.value)
    assert "\n" not in message and "output folder" in message
    assert str(outdir.resolve()) in message or str(outdir) in message
    assert a_file.read_text() == "not a folder"


@pytest.mark.parametrize("outdir", ["/proc/x", "/dev/null"])
def test_cli_bad_output_folder_exits_2_with_one_line(outdir, tmp_path):
    out = cli("rerun", "per_card", "-o", outdir, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pdcalc: error: output folder ") and outdir in lines[0]
    assert "Traceback" not in out.stderr


def test_errors_of_a_rerun_are_one_line_whatever_their_text():
    failed = rr.ChapterFailed("ch", Path("odd\nfolder/ch.ipynb"), "cell In [3] (x = 1)", "ValueError",
                              "first line\n\x1b[31msecond line\r\n  third\u2028fourth")
    assert len(str(failed).splitlines()) == 1
    assert "raised ValueError: first line second line third fourth (executed copy: odd\\nfolder/ch.ipynb)" \
        in str(failed)
    assert failed.exit_code == 1 and failed.evalue.startswith("first line\n")
    for error in (rp.ParameterError("a\nb"), errors_mod.RerunError("c\rd\x0be")):
        assert len(str(error).splitlines()) == 1 and "\x1b" not in str(error)
    assert len(str(rp.ParameterError("x" * 10_000))) <= MAX_MESSAGE


def test_outdir_inside_book_is_refused(tmp_path):
    for outdir in (REPO / "book", REPO / "book" / "runs"):
        with pytest.raises(errors_mod.RerunError, match="inside the book's chapters"):
            rr.rerun("per_card", {}, outdir=outdir)
        assert not (REPO / "book" / "runs").exists()


# ---------------------------------------------------------------------------------------------
# executions
# ---------------------------------------------------------------------------------------------
def test_defaults_reproduce_the_committed_outputs(default_run):
    assert default_run.notebook_path.name == "per_card.ipynb" and default_run.html_path is None
    assert default_run.seconds > 0
    committed = nbformat.read(CHAPTER, as_version=4)
    rerun_nb = nbformat.read(default_run.notebook_path, as_version=4)
    expected, got = code_outputs(committed), code_outputs(rerun_nb)
    assert len(got) == len(expected)
    assert sum(len(c) for c in expected) > 30  # tables, glued values, the chart
    assert any("vegaEmbed" in o["data"].get("text/html", "") for c in got for o in c)
    for index, (want, have) in enumerate(zip(expected, got)):
        assert have == want, f"code cell {index} differs from the committed chapter"


def test_new_card_and_decode_ep_change_the_tables_and_the_chart(changed_run):
    from pdcalc.layout.memory import budget, card_weights
    from pdcalc.layout.parallel import place_experts

    committed = nbformat.read(CHAPTER, as_version=4)
    nb = nbformat.read(changed_run / "per_card.ipynb", as_version=4)
    (injected,) = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert 'card = "ascend-910b4-32g"' in injected.source and "d_ep = 16" in injected.source

    # the per-card memory table, in GiB: P and D as pdcalc predicts them (and the engine's log of the P layout)
    old, new = table_rows(committed, "card_memory_table("), table_rows(nb, "card_memory_table(")
    P, D, usable_row = "P card, pdcalc", "D card, pdcalc", "usable (0.9 x visible memory)"
    assert new["routed experts"][P] == old["routed experts"][P]            # P column: same EP8 on P
    assert new["routed experts"][D] == pytest.approx(2 * old["routed experts"][D], rel=2e-3)  # D: 16 not 8 experts
    assert new["weights, total"][D] > old["weights, total"][D]
    assert new[usable_row][P] < old[usable_row][P]                         # a 32 GB card
    d_weights = card_weights("deepseek-v4-flash", V4_ASCEND_W8A8, ep=16, mtp=True)
    usable = budget("ascend-910b4-32g", d_weights.total_bytes, utilization=0.9).usable_bytes
    # chapters round what they print to 4 significant figures (pdcalc.core.precision)
    assert new[usable_row][D] == pytest.approx(usable / 2**30, rel=1e-3)
    assert new["weights, total"][D] == pytest.approx(d_weights.total_bytes / 2**30, rel=1e-3)

    g_old, g_new = glued(committed), glued(nb)
    assert g_new["d_experts"] == place_experts(256, 16).max_experts_per_card == 16 and g_old["d_experts"] == 8
    assert g_new["usable_gib"] == pytest.approx(usable / 2**30, rel=1e-3)
    assert g_new["p_experts"] == g_old["p_experts"]

    chart_old, chart_new = chart_html(committed), chart_html(nb)
    assert '{"ep": 32, "label": "D (EP 32)"}' in chart_old and '{"ep": 16, "label": "D (EP 16)"}' in chart_new
    rule = re.compile(r'\{"y": ([0-9.]+), "ep": \d+\}')  # the usable-memory rule, labelled at the largest EP
    assert float(rule.search(chart_new).group(1)) == pytest.approx(usable / 2**30, rel=1e-3)
    assert float(rule.search(chart_new).group(1)) < float(rule.search(chart_old).group(1))


def test_html_page_is_standalone_and_offline(changed_run):
    from pdcalc.layout.memory import budget, card_weights

    page = (changed_run / "per_card.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    # the chart: its spec with the run's data, and Altair's loader
    assert "https://vega.github.io/schema/vega-lite/" in page and '{"ep": 16, "label": "D (EP 16)"}' in page
    assert "vegaEmbed(outputDiv, spec, embedOpt)" in page
    # the libraries inline, announced to Altair's loader so that it loads nothing
    assert "window.VEGA_DEBUG = Object.assign(" in page and '"vegalite_version": "' in page
    assert "window.vegaEmbed=" in page and len(page) > 500_000
    tags = re.sub(r"(<script\b[^>]*>).*?</script>", r"\1", page, flags=re.S | re.I)  # markup, not script text
    assert not re.search(r"<(script|img|iframe)[^>]*\bsrc\s*=|<link[^>]*\bhref\s*=", tags, re.I)
    assert not re.search(r"cdn\.jsdelivr|cdnjs|unpkg\.com|require\.js", page)
    # nbconvert's page, the parameters of the run shown and marked
    assert "jp-Notebook" in page and "parameters of this run (injected by pdcalc rerun)" in page
    text = page_text(page)
    assert "Re-run of per_card.ipynb with card = 'ascend-910b4-32g' , d_ep = 16" in text
    # the prose numbers are the run's own (glue), MyST rendered
    d_weights = card_weights("deepseek-v4-flash", "w8a8", ep=16, mtp=True)
    usable = budget("ascend-910b4-32g", d_weights.total_bytes, utilization=0.9).usable_bytes
    assert f"Under {usable / 2**30:.1f} GiB usable per card" in text
    assert "{glue" not in text and 'class="glue-missing"' not in page and "```" not in text and ":::" not in text
    assert '<div class="admonition admonition tip"><p class="admonition-title">Takeaway</p>' in page


@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="no headless Chromium here")
def test_html_page_draws_its_chart_in_a_browser(changed_run, tmp_path):
    out = subprocess.run(
        ["/usr/bin/chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--no-first-run", "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path}",
         "--virtual-time-budget=10000", "--dump-dom", (changed_run / "per_card.html").as_uri()],
        capture_output=True, text=True, timeout=120)
    assert 'role="graphics-document"' in out.stdout  # vega-embed drew the chart
    assert "<mjx-container" in out.stdout            # MathJax typeset the math
    assert not re.search(r'<div class="error" style="color:red;">(?!\$\{err\})', out.stdout)  # no chart error


def test_committed_chapter_is_unchanged(before, default_run, changed_run):
    assert snapshot(CHAPTER) == before


def test_failing_cell_is_one_line_exit_1_and_the_copy_is_kept(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell("limit = 1  # how far to go")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell("x = 2 * limit"),
                nbformat.v4.new_code_cell("if x > 2:\n    raise ValueError(f'x is {x}\\nand more')")]
    src = tmp_path / "chapter.ipynb"
    nbformat.write(nb, src)
    before_bytes = src.read_bytes()
    out = cli("rerun", str(src), "-p", "limit", "5", "-o", str(tmp_path / "out"))
    assert out.returncode == 1, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr
    assert "chapter: cell In [4] (if x > 2:) raised ValueError: x is 10 and more (executed copy: " in lines[0]
    kept = tmp_path / "out" / "chapter.ipynb"
    assert kept.exists() and str(kept) in lines[0]
    assert src.read_bytes() == before_bytes


@pytest.mark.parametrize("args,message", [
    (("-p", "p_ep", "eight"), "parameter 'p_ep': must be an integer like its default 8, got 'eight'"),
    (("-p", "utilization", "1.5"), "parameter 'utilization': must be a finite number in (0, 1], got 1.5"),
    (("-p", "nope", "1"), "unknown parameter 'nope' for chapter per_card"),
    (("-p", "d_ep", "8", "-p", "d_ep", "16"), "parameter 'd_ep' given twice"),
    (("-o", str(REPO / "book" / "runs")), "inside the book's chapters"),
])
def test_cli_bad_parameters_exit_2_with_one_line(args, message, tmp_path):
    out = cli("rerun", "per_card", *args, cwd=tmp_path)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pdcalc: error: ")
    assert message in out.stderr
    assert not (tmp_path / "pdcalc-runs").exists() and not (REPO / "book" / "runs").exists()



@pytest.mark.parametrize("chapter,args,message", [
    ("plan", ("-p", "card", str(FP16_ONLY)), f"parameter 'card': card '{FP16_ONLY}' defines peak FLOP/s"),
    ("plan", ("-p", "rate_per_s", "2", "-p", "concurrency", "64"), "give rate_per_s or concurrency, not both"),
    ("v3_throughput", ("-p", "other_card", "X"), "parameter 'other_card': unknown card 'X'"),
    ("validation", ("-p", "scheme", "X"), "parameter 'scheme': unknown quantization scheme 'X'"),
    ("per_card", ("-p", "d_ep", "9" * 5000), "an integer of 5,000 digits"),
    ("per_card", ("-p", "utilization", ".nan"), "parameter 'utilization': must be a finite number in (0, 1], got nan"),
    ("pd_split", ("-p", "d_sizes", "[" * 50_000 + "]" * 50_000), "nested more than 8 deep"),
])
def test_cli_values_refused_before_the_chapter_runs_exit_2(chapter, args, message, tmp_path):
    out = cli("rerun", chapter, *args, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pdcalc: error: ") and "Traceback" not in out.stderr
    assert message in lines[0]
    assert not (tmp_path / "pdcalc-runs").exists()


def test_rerun_never_imports_the_command_line():
    """pdcalc.cli imports pdcalc.book.rerun; the reverse would be a cycle."""
    tree = ast.parse(Path(rr.__file__).read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {f"{node.module}.{alias.name}" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                 and node.module for alias in node.names} | {node.module for node in ast.walk(tree)
                                                               if isinstance(node, ast.ImportFrom) and node.module}
    assert not {m for m in imported if m == "pdcalc.cli" or m.startswith("pdcalc.cli.")}
    assert not hasattr(rr, "main")
    out = subprocess.run([sys.executable, "-c", "import sys, pdcalc.book.rerun; print('pdcalc.cli' in sys.modules)"],
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


# ---------------------------------------------------------------------------------------------
# your model: the chapters on a config of another model type
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("chapter", ["architecture", "per_card", "kv_memory"])
def test_a_chapter_reruns_on_a_v2_lite_config(chapter, tmp_path):
    """``pdcalc rerun CHAPTER -p model path/to/config.json`` with DeepSeek-V2-Lite's config.json: the run
    says which model it describes, and its tables are that model's."""
    import shutil

    from pdcalc.model.config import _data_path
    from pdcalc.model.inventory import get_inventory

    cfg = tmp_path / "v2-lite" / "config.json"
    cfg.parent.mkdir()
    shutil.copy(_data_path("models", "deepseek_v2_lite_config.json"), cfg)
    out = cli("rerun", chapter, "-p", "model", str(cfg), "-o", str(tmp_path / "runs"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    nb = nbformat.read(tmp_path / "runs" / f"{chapter}.ipynb", as_version=4)
    text = "\n".join(o.get("data", {}).get("text/markdown", "") for c in nb.cells for o in c.get("outputs", []))
    assert "This page describes `v2-lite` (deepseek_v2)" in text
    assert "Its weights are stored as `w8a8`" in text          # the V4 recipe is V4's; the model gets its own
    inv = get_inventory(str(cfg))
    g = glued(nb)
    if chapter == "architecture":
        assert f"**`v2-lite` has {inv.counts().total / 1e9:.2f} billion parameters" in g["card_finding"]
        assert g["mtp_clause"] == "its config declares no MTP module" and "another model" in g["ii_gap"]
        assert "the official release (BF16" in g["loads"] and "wo_a" not in g["loads"]     # V2-Lite ships BF16
        assert f"MoE layer of {inv.n_routed_experts} routed and {inv.config.n_shared_experts} shared" in g["block_story"]
    elif chapter == "kv_memory":
        assert "`v2-lite` (deepseek_v2) uses MLA" in g["kv_story"]
        assert g["fixed_mb"] == 0 and g["fixed_what"].startswith("nothing") and "FP8" not in g["engines_differ"]
    else:
        assert g["d_experts"] == inv.n_routed_experts // 32
        assert g["ii_vs_article"] == "smaller" and "declares no MTP module" in g["quant_desc"]
