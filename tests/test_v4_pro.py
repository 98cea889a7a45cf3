"""DeepSeek-V4-Pro's inventory against the tensors of its released checkpoint.

tests/data/reference/deepseek_v4_pro_checkpoint.json transcribes, row by row, the weight listing of a model report
that lists every tensor of the 64 safetensors files of Hugging Face deepseek-ai/DeepSeek-V4-Pro; its provenance
names the repository, path and commit, and says how a stored tensor maps to a logical one (FP4 experts packed two
values per int8 byte; ``.scale`` tensors are quantization scales, not parameters). The same report prints the
config.json the preset copies. V4-Pro has no figure from tools/reference_counts.py: DeepSeek's inference config of
V4-Pro, which that tool needs beside the reference model.py, was not at hand.

The comparison is tensor by tensor and layer by layer: name, logical shape and instances of every tensor, then the
dtype and the scale count the ``fp8-fp4`` scheme gives each one, then the checkpoint's bytes.
"""

import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest

from pdcalc.core.units import dtype_bytes
from pdcalc.model.config import load_config
from pdcalc.model.inventory import get_inventory
from pdcalc.model.quant import get_scheme, weight_bytes

MODEL = "deepseek-v4-pro"
LISTING = json.loads((Path(__file__).parent / "data" / "reference" / "deepseek_v4_pro_checkpoint.json").read_text())

# Exact logical parameters of the released checkpoint (main model, MTP excluded; the MTP module's own tensors), as
# the listing gives them (FP4 pairs unpacked, scales left out): from the checkpoint, not from tools/reference_counts.py.
CHECKPOINT_TOTALS = {"main": 1_572_999_528_803, "mtp": 25_840_145_979}

#: The listing's dtypes as pdcalc names them; int8 holds the routed experts' FP4 values, two per byte.
TORCH_DTYPES = {"torch.bfloat16": "bf16", "torch.float32": "fp32", "torch.int64": "int64", "torch.int8": "int8",
                "torch.float8_e4m3fn": "fp8", "torch.float8_e8m0fnu": "e8m0"}
PACKED_FP4 = "torch.int8"
FP4_PER_BYTE = round(dtype_bytes("int8") / dtype_bytes("fp4"))

_LAYERS = re.compile(r"^layers\.([0-9][0-9,.\-]*?)\.(?=[a-z])")
_EXPERTS = re.compile(r"\.experts\.([0-9][0-9,.\-]*?)\.(?=[a-z])")


def _indices(spec: str) -> list[int]:
    """'0-1,3,5,...,57,59' -> [0, 1, 3, 5, 7, ..., 57, 59] (the listing's notation, see its provenance)."""
    parts, out = spec.split(","), []
    for i, part in enumerate(parts):
        if part == "...":
            step, stop = out[-1] - out[-2], int(parts[i + 1].split("-")[0])
            assert step > 0 and (stop - out[-1]) % step == 0, spec
            out += range(out[-1] + step, stop, step)
        elif "-" in part:
            low, high = map(int, part.split("-"))
            out += range(low, high + 1)
        else:
            out.append(int(part))
    assert out == sorted(set(out)), spec
    return out


def _expand(row) -> tuple[list[str], int]:
    """The tensor names one row stands for (one per layer; experts as ``{expert}``) and the experts per name."""
    name, experts = row["name"], 1
    m = _EXPERTS.search(name)
    if m:
        ids = _indices(m.group(1))
        assert ids == list(range(len(ids))), row["name"]
        experts = len(ids)
        name = f"{name[:m.start()]}.experts.{{expert}}.{name[m.end():]}"
    m = _LAYERS.match(name)
    names = [f"layers.{i}.{name[m.end():]}" for i in _indices(m.group(1))] if m else [name]
    return names, experts


def _stored():
    """Every tensor group of the checkpoint: name -> (stored shape, torch dtype, instances)."""
    out = {}
    for row in LISTING["rows"]:
        names, experts = _expand(row)
        for name in names:
            assert name not in out, name
            out[name] = (tuple(row["shape"]), row["dtype"], experts)
    return out


def _part(name: str) -> str:
    return "mtp" if name.startswith("mtp.") else "main"


def _logical(part: str) -> Counter:
    """(name, logical shape) -> instances of the checkpoint's parameters (scales left out, FP4 pairs unpacked)."""
    out = Counter()
    for name, (shape, dtype, n) in _stored().items():
        if name.endswith(".scale") or (part != "all" and _part(name) != part):
            continue
        if dtype == PACKED_FP4:
            shape = (*shape[:-1], shape[-1] * FP4_PER_BYTE)
        out[(name, shape)] += n
    return out


def _ours(part: str) -> Counter:
    out = Counter()
    for t in get_inventory(MODEL).tensors:
        if part == "all" or t.part == part:
            out[(t.name, tuple(t.shape))] += t.count
    return out


def _size(nbytes: float) -> str:
    """Bytes as the report prints them (powers of 1024, two decimals)."""
    for unit in ("B", "KB", "MB", "GB"):
        if nbytes < 1024 or unit == "GB":
            return f"{nbytes:.2f} {unit}"
        nbytes /= 1024


def test_transcription_gives_the_reports_own_totals():
    """Every row, re-read from the transcription, adds up to the report's header (tensors, stored elements, bytes),
    and every row's bytes print as the report prints them."""
    header, rows = LISTING["header"], LISTING["rows"]
    assert len(rows) == header["rows"]
    tensors = elements = nbytes = 0
    for row in rows:
        names, experts = _expand(row)
        n = len(names) * experts
        row_bytes = n * math.prod(row["shape"]) * dtype_bytes(TORCH_DTYPES[row["dtype"]])
        assert _size(row_bytes) == row["size"], row["name"]
        tensors, elements, nbytes = tensors + n, elements + n * math.prod(row["shape"]), nbytes + row_bytes
    assert tensors == header["tensors"]
    assert elements == header["stored_elements"]
    assert _size(nbytes) == header["tensor_size"]


def test_printed_counts_equal_the_expanded_sets():
    """A row's '(×N layers, ×M experts)' is the size of the layer and expert sets in its name (one where none)."""
    for row in LISTING["rows"]:
        names, experts = _expand(row)
        assert len(names) == (row["layers"] or 1), row["name"]
        assert experts == (row["experts"] or 1), row["name"]


@pytest.mark.parametrize("part", ["main", "mtp"])
def test_every_tensor_equals_the_checkpoint(part):
    """Name (layer by layer), logical shape and instances of every parameter."""
    ours, theirs = _ours(part), _logical(part)
    assert ours == theirs, {"only pdcalc": dict(ours - theirs), "only checkpoint": dict(theirs - ours)}


def test_totals_equal_the_checkpoint():
    counts = get_inventory(MODEL).counts()
    listed = {part: sum(math.prod(shape) * n for (_, shape), n in _logical(part).items()) for part in ("main", "mtp")}
    assert counts.total == listed["main"] == CHECKPOINT_TOTALS["main"]
    assert counts.mtp == listed["mtp"] == CHECKPOINT_TOTALS["mtp"]


def test_layer_kinds_follow_the_config():
    """The config's compress_ratios start 128, 128 (V4-Flash: 0, 0): every main layer compresses, the indexer is on
    the ratio-4 layers only; the hash-routed layers carry tid2eid and no router bias."""
    cfg, stored = load_config(MODEL), _stored()
    n = cfg.num_hidden_layers
    assert {i for i in range(n) if f"layers.{i}.attn.compressor.wkv.weight" in stored} == \
        {i for i in range(n) if cfg.compress_ratio(i)} == set(range(n))
    assert {i for i in range(n) if f"layers.{i}.attn.indexer.wq_b.weight" in stored} == \
        {i for i in range(n) if cfg.compress_ratio(i) == 4}
    assert {i for i in range(n) if f"layers.{i}.ffn.gate.tid2eid" in stored} == set(range(cfg.num_hash_layers))
    assert {i for i in range(n) if f"layers.{i}.ffn.gate.bias" in stored} == set(range(cfg.num_hash_layers, n))
    assert not any(name.startswith(f"mtp.0.attn.{m}.") for name in stored for m in ("compressor", "indexer"))
    assert cfg.compress_ratio(n) == 0


def test_fp8_fp4_scheme_stores_what_the_checkpoint_stores():
    """Tensor by tensor, the fp8-fp4 scheme's dtype and scale count are the checkpoint's, except the hash-routing
    table: the checkpoint stores it int64, the reference model (and the scheme) int32. Re-priced at int64, the
    scheme's bytes are the checkpoint's bytes."""
    sch, inv, stored = get_scheme("fp8-fp4"), get_inventory(MODEL), _stored()
    other_dtype = []
    ours_scales, theirs_scales = Counter(), Counter()
    for t in inv.tensors:
        shape, dtype, n = stored[t.name]
        theirs = "fp4" if dtype == PACKED_FP4 else TORCH_DTYPES[dtype]
        if sch.dtype_for(t) != theirs:
            other_dtype.append((t.name, sch.dtype_for(t), theirs))
        if sch.scale_count(t):
            assert sch.rule_for(t).scale_dtype == TORCH_DTYPES[stored[t.name.removesuffix(".weight") + ".scale"][1]]
            ours_scales[t.name] += sch.scale_count(t) * t.count
    for name, (shape, dtype, n) in stored.items():
        if name.endswith(".scale"):
            theirs_scales[name.removesuffix(".scale") + ".weight"] += math.prod(shape) * n
    assert ours_scales == theirs_scales
    cfg = inv.config
    assert other_dtype == [(f"layers.{i}.ffn.gate.tid2eid", "int32", "int64") for i in range(cfg.num_hash_layers)]
    hash_table = sum(t.params for t in inv.tensors if t.role == "hash_table")
    checkpoint = sum(math.prod(shape) * n * dtype_bytes(TORCH_DTYPES[dtype]) for shape, dtype, n in stored.values())
    repriced = hash_table * (dtype_bytes("int64") - dtype_bytes("int32"))
    assert weight_bytes(MODEL, "fp8-fp4", part="all") + repriced == checkpoint
