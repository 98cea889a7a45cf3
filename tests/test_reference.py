"""pdcalc's inventories against the official reference implementations themselves.

The JSON files under tests/data/reference/ were produced by tools/reference_counts.py, which imports
DeepSeek's reference ``inference/model.py`` (V3: deepseek-ai/DeepSeek-V3; V4-Flash:
deepseek-ai/DeepSeek-V4-Flash at revision 60d8d707, sha256 ce962f1f...) and instantiates ``Transformer``
on PyTorch's meta device with the published inference configs. Each file records its provenance.
The comparison is tensor by tensor, so a wrong shape cannot hide behind a right total.
"""

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from pdcalc.inventory import get_inventory
from pdcalc.quant import weight_bytes

DATA = Path(__file__).parent / "data" / "reference"

# Exact totals of the reference implementations (main model, MTP excluded; MTP module's own tensors),
# as counted by tools/reference_counts.py on the meta device (see the JSON files' provenance).
REFERENCE_TOTALS = {
    "deepseek-v3": {"main": 671_026_419_200, "file": "deepseek_v3_bf16.json"},
    "deepseek-v4-flash": {"main": 284_334_567_511, "mtp": 6_610_048_891, "file": "deepseek_v4_flash_bf16.json"},
}


def _load(name):
    return json.loads((DATA / name).read_text())


def _ours(model, part):
    """Our tensors as (pattern, shape) -> instances, named the way the reference counter collapses them."""
    inv = get_inventory(model)
    out = Counter()
    for t in inv.tensors:
        if part != "all" and t.part != part:
            continue
        name = re.sub(r"^layers\.\d+\.", "layers.{layer}.", t.name)
        out[(name, tuple(t.shape))] += t.count
    return out


def _theirs(ref, part):
    out = Counter()
    for t in ref["tensors"]:
        is_mtp = t["name"].startswith("mtp.")
        if part == "main" and is_mtp or part == "mtp" and not is_mtp:
            continue
        out[(t["name"], tuple(t["shape"]))] += t["count"]
    return out


@pytest.mark.parametrize("model", list(REFERENCE_TOTALS))
def test_totals_equal_reference_exactly(model):
    ref = _load(REFERENCE_TOTALS[model]["file"])
    counts = get_inventory(model).counts()
    assert counts.total == ref["main_params"] == REFERENCE_TOTALS[model]["main"]
    if ref["mtp_params"] is not None:
        assert counts.mtp == ref["mtp_params"] == REFERENCE_TOTALS[model]["mtp"]


@pytest.mark.parametrize("model", list(REFERENCE_TOTALS))
def test_every_main_tensor_equals_reference(model):
    ref = _load(REFERENCE_TOTALS[model]["file"])
    ours, theirs = _ours(model, "main"), _theirs(ref, "main")
    assert ours == theirs, {"only pdcalc": dict(ours - theirs), "only reference": dict(theirs - ours)}


def test_v4_mtp_tensors_equal_reference():
    ref = _load("deepseek_v4_flash_bf16.json")
    assert _ours("deepseek-v4-flash", "mtp") == _theirs(ref, "mtp")
    # the MTP block reuses the main embedding and head, which the reference shares (counted once)
    assert set(ref["mtp_shared_with_main"]) == {"mtp.0.embed.weight", "mtp.0.head.weight"}


def test_v4_release_checkpoint_bytes_equal_reference():
    """fp8-fp4 scheme == bytes of the reference model instantiated with the release dtypes (FP8 + MXFP4),
    re-priced at the dtypes the reference's own comments give for the checkpoint (norms, head and
    compressor projections in BF16; wo_a in FP8): see the file's checkpoint_bytes.rules."""
    ref = _load("deepseek_v4_flash_fp8_fp4.json")["checkpoint_bytes"]["total"]
    assert weight_bytes("deepseek-v4-flash", "fp8-fp4", part="all") == ref["nbytes"]


def test_v3_fp8_checkpoint_bytes_equal_reference():
    """fp8 scheme == the reference model instantiated in FP8 (weights + fp32 block scales), except the
    router's score-correction bias, which the reference keeps in BF16 and the checkpoint stores in fp32."""
    ref = _load("deepseek_v3_fp8.json")["totals"]["total"]
    inv = get_inventory("deepseek-v3")
    bias_extra = sum(t.params for t in inv.tensors if t.role == "router_bias" and t.part == "main") * (4 - 2)
    assert weight_bytes("deepseek-v3", "fp8") - bias_extra == ref["nbytes"]
