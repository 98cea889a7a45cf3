"""Quantization schemes: which dtype each tensor of the inventory is stored in, and its scales.

A scheme is an ordered list of rules (first match wins) keyed on a tensor's ``role``. A rule gives the
element dtype and, for block-quantized formats, how many scale values accompany the weights:

- ``block``: one scale per ``b x b`` tile of a 2-D weight (FP8 with 128 x 128 blocks);
- ``mx``: one scale per ``b`` consecutive elements along the input dimension (MXFP4, b = 32);
- ``channel``: ``n`` scale-like values per output row (int8 per-channel scale and offset).

Bytes of a tensor:

.. math:: B = N\\,s_\\text{dtype} + N_\\text{scales}\\,s_\\text{scale}

Sources are given per scheme; where a detail is an assumption rather than a documented fact, the
rule's ``note`` says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from pdcalc.errors import UnknownNameError
from pdcalc.inventory import CATEGORIES, Inventory, Tensor, get_inventory
from pdcalc.units import dtype_bytes

FLOAT_ROLES = ("embedding", "head", "norm", "router", "router_bias", "mhc", "sink", "ape", "hash_table")


@dataclass(frozen=True)
class Rule:
    """Storage of the tensors whose role is in ``roles`` (``None``: every role)."""

    roles: tuple[str, ...] | None
    dtype: str | None                  # None: the dtype the reference fixes for the tensor, else ``fallback``
    scale: str | None = None           # None, "block", "mx", "channel"
    scale_block: int = 0               # tile edge (block), group length (mx) or values per row (channel)
    scale_dtype: str = "fp32"
    fallback: str = "bf16"             # used when dtype is None and the tensor fixes none
    note: str = ""


@dataclass(frozen=True)
class Scheme:
    """A named quantization scheme."""

    name: str
    description: str
    source: str
    rules: tuple[Rule, ...]

    def rule_for(self, t: Tensor) -> Rule:
        for r in self.rules:
            if r.roles is None or t.role in r.roles:
                return r
        raise LookupError(f"scheme {self.name!r} has no rule for role {t.role!r}")

    def dtype_for(self, t: Tensor) -> str:
        r = self.rule_for(t)
        return r.dtype or t.dtype or r.fallback

    def scale_count(self, t: Tensor) -> int:
        """Scale values of one instance of ``t``."""
        r = self.rule_for(t)
        if r.scale is None:
            return 0
        out, inn = (t.shape[-2], t.shape[-1]) if len(t.shape) >= 2 else (1, t.shape[0])
        lead = math.prod(t.shape[:-2]) if len(t.shape) > 2 else 1
        if r.scale == "block":
            return lead * math.ceil(out / r.scale_block) * math.ceil(inn / r.scale_block)
        if r.scale == "mx":
            return lead * out * math.ceil(inn / r.scale_block)
        if r.scale == "channel":
            return lead * out * r.scale_block
        raise ValueError(f"unknown scale kind {r.scale!r}")

    def tensor_bytes(self, t: Tensor) -> float:
        """Bytes of all instances of ``t``: weights plus scales."""
        r = self.rule_for(t)
        one = t.numel * dtype_bytes(self.dtype_for(t)) + self.scale_count(t) * dtype_bytes(r.scale_dtype)
        return one * t.count


_ALL_LINEAR = ("linear", "linear_wo_a", "linear_bf16", "expert")

SCHEMES: dict[str, Scheme] = {s.name: s for s in (
    Scheme(
        name="bf16",
        description="BF16 weights; tensors the reference keeps in fp32 (mHC, attention sink, router bias) or int32 "
                    "(hash-routing table) keep that dtype",
        source="DeepSeek-V3 inference/fp8_cast_bf16.py (BF16 conversion); DeepSeek-V4-Flash inference/model.py "
               "parameter dtypes",
        rules=(Rule(None, None, fallback="bf16"),),
    ),
    Scheme(
        name="fp16-all",
        description="every parameter 2 bytes (the V3 article's assumption '× 2 bytes', §2.2.2, §2.3.1)",
        source="article v3 §2.2.2 'Dense 模型权重 = 24.8B × 2 bytes'",
        rules=(Rule(None, "fp16"),),
    ),
    Scheme(
        name="article-1byte",
        description="every parameter 1 byte (the V4 article's assumption '1参数 ≈ 1字节', §1.2, §1.4)",
        source="article v4 §1.2 量化方案 W8A8 '1参数 ≈ 1字节'",
        rules=(Rule(None, "int8"),),
    ),
    Scheme(
        name="fp8",
        description="official DeepSeek-V3 FP8 checkpoint: linear layers and experts in FP8 e4m3 with one fp32 "
                    "scale (weight_scale_inv) per 128x128 block; embedding, output head, norms and router in "
                    "BF16, router bias in fp32",
        source="deepseek-ai/DeepSeek-V3 config.json quantization_config (fmt e4m3, weight_block_size [128, 128]); "
               "README_WEIGHTS.md (FP8 weights, weight_scale_inv per 128x128 block); inference/model.py "
               "(Linear creates a scale only for FP8 weights)",
        rules=(
            Rule(("linear", "linear_wo_a", "expert"), "fp8", "block", 128, "fp32"),
            Rule(None, None, fallback="bf16"),
        ),
    ),
    Scheme(
        name="fp8-fp4",
        description="official DeepSeek-V4-Flash checkpoint: routed experts in MXFP4 (e2m1, one e8m0 scale per 32 "
                    "inputs), other linear layers in FP8 e4m3 with one ue8m0 scale per 128x128 block; compressor "
                    "and indexer gating projections, embedding, output head, norms and router in BF16; mHC, "
                    "attention sink, compressor position biases and router bias in fp32; hash table int32",
        source="deepseek-ai/DeepSeek-V4-Flash inference/config.json (dtype fp8, scale_fmt ue8m0, expert_dtype fp4) "
               "and inference/model.py (Linear: FP4 scale [out, in/32] e8m0, FP8 scale per 128x128 block e8m0; "
               "comments: norms, lm_head, compressor wkv/wgate stored in bf16; wo_a FP8 in the checkpoint)",
        rules=(
            Rule(("expert",), "fp4", "mx", 32, "e8m0"),
            Rule(("linear", "linear_wo_a"), "fp8", "block", 128, "e8m0"),
            Rule(("linear_bf16",), "bf16"),
            Rule(None, None, fallback="bf16"),
        ),
    ),
    Scheme(
        name="w8a8",
        description="Ascend W8A8 as vllm-ascend loads it: linear layers and experts in int8 with a per-output-"
                    "channel fp32 scale and offset; embedding, output head, norms, router, mHC and the small "
                    "compressor / indexer gating projections stay in floating point",
        source="msModelSlim W8A8 / W8A8_DYNAMIC per-channel quantization as loaded by vllm-ascend "
               "(vllm_ascend/quantization: weight int8, weight_scale and weight_offset per output channel); "
               "the MTP layer is quantized too (checkpoint 'w8a8-mtp', vllm-ascend DeepSeek-V4-Flash tutorial)",
        rules=(
            Rule(("linear", "linear_wo_a", "expert"), "int8", "channel", 2, "fp32",
                 note="per-channel scale + offset (fp32) per output row; static-W8A8 activation parameters "
                      "(a few values per layer) are not counted"),
            Rule(("linear_bf16",), "bf16", note="assumed left in BF16 like the other gating projections"),
            Rule(None, None, fallback="bf16"),
        ),
    ),
)}


def get_scheme(name: str | Scheme) -> Scheme:
    """A scheme by name (``bf16``, ``fp16-all``, ``article-1byte``, ``fp8``, ``fp8-fp4``, ``w8a8``)."""
    if isinstance(name, Scheme):
        return name
    try:
        return SCHEMES[name]
    except KeyError:
        raise UnknownNameError("quantization scheme", name, SCHEMES) from None


def weight_bytes(model, scheme, *, part: str = "main", category: str | None = None) -> float:
    """Bytes of the stored weights (and their scales) of ``model`` under ``scheme``."""
    inv, sch = get_inventory(model), get_scheme(scheme)
    return sum(sch.tensor_bytes(t) for t in inv.tensors
               if (part == "all" or t.part == part) and (category is None or t.category == category))


def bytes_by_category(model, scheme, *, part: str = "main") -> pd.Series:
    """Bytes per category under ``scheme`` (display order, zero categories dropped)."""
    inv, sch = get_inventory(model), get_scheme(scheme)
    out = dict.fromkeys(CATEGORIES, 0.0)
    for t in inv.tensors:
        if part == "all" or t.part == part:
            out[t.category] += sch.tensor_bytes(t)
    s = pd.Series(out, name="bytes")
    return s[s > 0]


def dtype_table(model, scheme) -> pd.DataFrame:
    """Per (category, role): the dtype, scale kind and bytes under ``scheme`` (main model and MTP)."""
    inv, sch = get_inventory(model), get_scheme(scheme)
    rows = []
    for t in inv.tensors:
        r = sch.rule_for(t)
        rows.append({"part": t.part, "category": t.category, "role": t.role, "dtype": sch.dtype_for(t),
                     "scale": f"{r.scale} {r.scale_block} {r.scale_dtype}" if r.scale else "",
                     "params": t.params, "bytes": sch.tensor_bytes(t)})
    df = pd.DataFrame(rows)
    return df.groupby(["part", "category", "role", "dtype", "scale"], as_index=False)[["params", "bytes"]].sum()


