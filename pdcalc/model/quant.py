"""Quantization schemes: which dtype each tensor of the inventory is stored in, and its scales.

A scheme is an ordered list of rules (first match wins) keyed on a tensor's ``role``. A rule gives the
element dtype and, for block-quantized formats, how many scale values accompany the weights:

- ``block``: one scale per ``b x b`` tile of a 2-D weight (FP8 with 128 x 128 blocks);
- ``mx``: one scale per ``b`` consecutive elements along the input dimension (MXFP4, b = 32);
- ``channel``: ``n`` scale-like values per output row (int8 per-channel scale and offset), or one value of
  each dtype in ``scale_dtypes`` per row (a loader that keeps its scales in more than one dtype).

A rule may also match on the tensor's module name (its name without ``.weight``) with shell-style globs,
``names`` to include and ``exclude`` to leave out, as quantization recipes select layers; and keep
``copies``, whole extra copies of the tensor in other dtypes that a loader creates beside it.

Bytes of a tensor:

.. math:: B = N\\,s_\\text{dtype} + N_\\text{scales}\\,s_\\text{scale} + N \\sum_\\text{copies} s_\\text{copy}

Sources are given per scheme; where a detail is an assumption rather than a documented fact, the
rule's ``note`` says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from fnmatch import fnmatchcase

import pandas as pd

from pdcalc.core.errors import UnknownNameError
from pdcalc.core.units import dtype_bytes
from pdcalc.model.inventory import CATEGORIES, Tensor, get_inventory

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
    names: tuple[str, ...] | None = None  # globs on the module name the rule is limited to (None: any)
    exclude: tuple[str, ...] = ()      # globs on the module name the rule leaves to the next rules
    scale_dtypes: tuple[str, ...] = ()  # channel scales: one value of each of these dtypes per row
    copies: tuple[str, ...] = ()       # extra whole copies of the tensor the loader keeps, by dtype
    source: str = ""                   # where the rule comes from

    def matches(self, t: Tensor) -> bool:
        if self.roles is not None and t.role not in self.roles:
            return False
        module = t.name.removesuffix(".weight")
        if self.names is not None and not any(fnmatchcase(module, g) for g in self.names):
            return False
        return not any(fnmatchcase(module, g) for g in self.exclude)


@dataclass(frozen=True)
class Scheme:
    """A named quantization scheme."""

    name: str
    description: str
    source: str
    rules: tuple[Rule, ...]
    #: The MTP draft holds its own copies of the embedding and the output head (in ``vocab_dtype``) instead
    #: of sharing the main model's; counted per card by :func:`pdcalc.layout.memory.card_weights` when MTP is loaded.
    mtp_vocab_copies: bool = False
    vocab_dtype: str = "bf16"

    @cached_property
    def _rules_by_tensor(self) -> dict:
        """The rule of each (role, name) already looked up: a rule matches on those two alone."""
        return {}

    def rule_for(self, t: Tensor) -> Rule:
        key = (t.role, t.name)
        found = self._rules_by_tensor.get(key)
        if found is None:
            found = next((r for r in self.rules if r.matches(t)), None)
            if found is None:
                raise LookupError(f"scheme {self.name!r} has no rule for role {t.role!r}")
            self._rules_by_tensor[key] = found
        return found

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
            return lead * out * (len(r.scale_dtypes) or r.scale_block)
        raise ValueError(f"unknown scale kind {r.scale!r}")

    @cached_property
    def _bytes_by_tensor(self) -> dict:
        """:meth:`tensor_bytes` of each tensor already sized (the planner sizes every layout's cards)."""
        return {}

    def tensor_bytes(self, t: Tensor) -> float:
        """Bytes of all instances of ``t``: weights plus scales."""
        found = self._bytes_by_tensor.get(t)
        if found is None:
            found = self._bytes_by_tensor[t] = self._tensor_bytes(t)
        return found

    def _tensor_bytes(self, t: Tensor) -> float:
        r = self.rule_for(t)
        if r.scale_dtypes:
            scales = self.scale_count(t) / len(r.scale_dtypes) * sum(dtype_bytes(d) for d in r.scale_dtypes)
        else:
            scales = self.scale_count(t) * dtype_bytes(r.scale_dtype)
        copies = t.numel * sum(dtype_bytes(d) for d in r.copies)
        return (t.numel * dtype_bytes(self.dtype_for(t)) + scales + copies) * t.count


#: The rules msModelSlim's DeepSeek-V4 recipes share beyond the routed experts, as vllm-ascend loads the result:
#: attention linear layers and shared experts W8A8_DYNAMIC (int8, a BF16 scale and offset per row and an fp32
#: copy of the scale), wo_a, wo_b, compressors, the indexer's weights_proj and the router left in floating
#: point (the router with an fp32 copy of itself).
_V4_MSMODELSLIM_REST = (
    Rule(("linear", "linear_wo_a", "linear_bf16"), "int8", "channel", 3, names=("*attn*",),
         exclude=("*wo_a", "*wo_b", "*compressor.wgate", "*compressor.wkv", "*indexer.weights_proj",
                  "*indexer.compressor.wgate", "*indexer.compressor.wkv"),
         scale_dtypes=("bf16", "bf16", "fp32"),
         source="V4-Flash recipe L50-61, V4-Pro W4A8 recipe L72-83; w8a8_dynamic.py L72-82 (int8 weight, BF16 "
                "weight_scale and weight_offset [out, 1]) and L161 (weight_scale_fp32)"),
    Rule(("linear",), "int8", "channel", 3, names=("*ffn*",), exclude=("*gate",),
         scale_dtypes=("bf16", "bf16", "fp32"),
         source="shared experts: V4-Flash recipe L62-67, V4-Pro W4A8 recipe L91-94 (W8A8_DYNAMIC)"),
    Rule(("router",), "bf16", copies=("fp32",),
         source="recipes exclude *gate (FLOAT); ops/linear.py L94-96 weight_fp32 = weight.to(float32)"),
    Rule(None, None, fallback="bf16",
         note="FLOAT in quant_model_description.json: the reference dtype (fp32 mHC, sink, ape, router "
              "bias; int32 hash table), BF16 otherwise",
         source="vllm_ascend/quantization/modelslim_config.py L731-740, L776-806 (FLOAT layers unquantized)"),
)

#: Routed experts of msModelSlim's W4A8_DYNAMIC checkpoints (per channel) as vllm-ascend and SGLang's NPU backend
#: hold them after loading: two int4 weights per byte, and per output row an int64 scale (the fp32 scale's bits
#: widened), an fp32 offset and an fp32 scale bias (summed to one per row).
_W4A8_EXPERTS = Rule(
    ("expert",), "int4", "channel", 3, scale_dtypes=("int64", "fp32", "fp32"),
    note="rotations and smoothing scales of the recipes are folded into the weights: no tensors of their own",
    source="vllm-project/vllm-ascend@182b75ea vllm_ascend/quantization/methods/w4a8.py L52-106, L179-194 "
           "(weight_offset and scale_bias fp32), L320-325 (weight_scale as int64), L412-420 (scale_bias summed "
           "to [E, out]); sglang 0.5.15 srt/layers/quantization/modelslim/schemes/modelslim_w4a8_int8_moe.py "
           "(the same parameters, per channel only) and srt/hardware_backend/npu/quantization/"
           "fused_moe_method_npu.py NPUW4A8Int8DynamicMoEMethod (_process_scale, _update_bias)")

#: Ascend W8A8 as vllm-ascend loads it (the ``w8a8`` scheme; ``w4a8`` puts its int4 experts before them).
_W8A8_RULES = (
    Rule(("linear", "linear_wo_a", "expert"), "int8", "channel", 2, "fp32",
         note="per-channel scale + offset (fp32) per output row; static-W8A8 activation parameters "
              "(a few values per layer) are not counted"),
    Rule(("linear_bf16",), "bf16", note="assumed left in BF16 like the other gating projections"),
    Rule(None, None, fallback="bf16"),
)

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
        rules=_W8A8_RULES,
    ),
    Scheme(
        name="w4a8",
        description="Ascend W4A8 of DeepSeek-V3/R1 as msModelSlim writes it and vllm-ascend and SGLang load it: "
                    "routed experts in int4 (W4A8_DYNAMIC, per channel), each row with an int64 scale, an fp32 "
                    "offset and an fp32 scale bias; every other linear layer as in w8a8",
        source="msModelSlim's DeepSeek-R1/V3 W4A8 mix (routed experts W4A8_DYNAMIC, MLA, shared experts and the "
               "dense layers' MLP W8A8; MindIE-LLM docs/zh/user_guide/feature/w4a8_mixed_precision_quantization.md) "
               "as loaded by vllm-ascend (vllm_ascend/quantization/methods/w4a8.py) and SGLang's NPU backend "
               "(--quantization modelslim, ModelSlimW4A8Int8MoE)",
        rules=(_W4A8_EXPERTS, *_W8A8_RULES),
    ),
    Scheme(
        name="w8a8-msmodelslim",
        description="DeepSeek-V4-Flash-w8a8-mtp as msModelSlim's V4-Flash recipe writes it and vllm-ascend loads it: "
                    "attention and FFN linear layers in int8 (W8A8_DYNAMIC) except wo_a, wo_b, the compressors, the "
                    "indexer's weights_proj and the router, which stay BF16 like the MTP projections, embedding and "
                    "head; on the card each int8 row carries a BF16 scale and offset and an fp32 copy of the scale "
                    "(routed experts' w2: no fp32 copy), the router an fp32 copy of itself, and the MTP draft its "
                    "own BF16 embedding and head",
        source="Ascend/msmodelslim@3de0a3c4 lab_practice/deepseek_v4/deepseek_v4_flash_w8a8.yaml L17-67 (per-channel "
               "int8 weights, include *attn* / *ffn*, excludes) and msmodelslim/model/deepseek_v4/mtp_quant_module.py "
               "L140-141 (the MTP's emb and head written as copies); vllm-project/vllm-ascend@182b75ea "
               "vllm_ascend/quantization/methods/w8a8_dynamic.py L72-82, L161, L202-221, L354; "
               "vllm_ascend/ops/linear.py L94-96 with models/deepseek_v4/model.py L282 (router fp32 copy); "
               "spec_decode/llm_base_proposer.py L417-418, L475-478 (the MTP embedding is not shared when the config "
               "has compress_ratios; the head only if bit-identical, which msModelSlim's norm folding prevents: "
               "model_adapter.py L394, L456)",
        rules=(
            Rule(("expert",), "int8", "channel", 2, names=("*ffn*.w2",), scale_dtypes=("bf16", "bf16"),
                 source="w8a8_dynamic.py L214-221: w2_weight_scale / w2_weight_offset [E, H, 1] in the BF16 "
                        "params_dtype; no fp32 copy"),
            Rule(("expert",), "int8", "channel", 3, names=("*ffn*",), scale_dtypes=("bf16", "bf16", "fp32"),
                 source="w8a8_dynamic.py L214-221, L354: w13 scale and offset in BF16 plus w13_weight_scale_fp32"),
            *_V4_MSMODELSLIM_REST,
        ),
        mtp_vocab_copies=True,
    ),
    Scheme(
        name="w4a8-msmodelslim",
        description="DeepSeek-V4-Pro-w4a8-mtp as msModelSlim's V4-Pro W4A8 recipe writes it and vllm-ascend loads it: "
                    "routed experts in int4 (W4A8_DYNAMIC, per channel), each row with an int64 scale, an fp32 "
                    "offset and an fp32 scale bias; attention linear layers and shared experts in int8 "
                    "(W8A8_DYNAMIC) and the rest as in w8a8-msmodelslim, the MTP draft with its own BF16 "
                    "embedding and head",
        source="Ascend/msmodelslim@3de0a3c4 lab_practice/deepseek_v4/deepseek_v4_pro_w4a8.yaml L17-27 (int4 per-"
               "channel weights, int8 per-token activations), L84-94 (*ffn* W4A8 except *gate and *shared_experts*; "
               "shared experts W8A8), L72-83 (attention as the V4-Flash W8A8 recipe), L43-71 (rotation and smoothing, "
               "folded into the weights); the experts as vllm-ascend loads them (w4a8.py, see the w4a8 scheme)",
        rules=(
            _W4A8_EXPERTS,
            *_V4_MSMODELSLIM_REST,
        ),
        mtp_vocab_copies=True,
    ),
)}


#: The scheme of the DeepSeek-V4-Flash W8A8 checkpoint (``DeepSeek-V4-Flash-w8a8-mtp``) as vllm-ascend loads it.
V4_ASCEND_W8A8 = "w8a8-msmodelslim"


#: The scheme of the DeepSeek-V4-Pro W4A8 checkpoint (``DeepSeek-V4-Pro-w4a8-mtp``) as vllm-ascend loads it.
V4_ASCEND_W4A8 = "w4a8-msmodelslim"


def _is_v4(model) -> bool:
    cfg = get_inventory(model).config
    return cfg is not None and cfg.model_type == "deepseek_v4"


def default_scheme(model) -> str:
    """The W8A8 scheme a model's Ascend checkpoint is modelled with: :data:`V4_ASCEND_W8A8` for DeepSeek-V4
    (its msModelSlim recipe is published), the generic ``w8a8`` (every linear layer int8) otherwise."""
    return V4_ASCEND_W8A8 if _is_v4(model) else "w8a8"

#: How the chapters name a scheme in prose (default: the name in capitals).
LABELS: dict[str, str] = {V4_ASCEND_W8A8: "W8A8 (msModelSlim)", V4_ASCEND_W4A8: "W4A8 (msModelSlim)"}


def scheme_label(scheme: str) -> str:
    """A scheme's name for prose: ``W8A8``, ``FP8-FP4``, ``W8A8 (msModelSlim)``."""
    return LABELS.get(scheme, scheme.upper())


def default_scheme_on(model, card) -> str:
    """The scheme a model runs with on ``card``: on NVIDIA GPUs its official release (FP8 for V3-type
    checkpoints, FP8 + MXFP4 for V4; BF16 where the config declares no quantization), on Ascend NPUs its W8A8
    checkpoint (:func:`default_scheme`)."""
    from pdcalc.hardware.cards import get_card

    return release_scheme(model) if get_card(card).family == "nvidia" else default_scheme(model)


def release_scheme(model) -> str:
    """The scheme of a model's official release: FP8 + MXFP4 for DeepSeek-V4, FP8 where the config's
    ``quantization_config`` says FP8, BF16 otherwise (``torch_dtype``)."""
    if _is_v4(model):
        return "fp8-fp4"
    cfg = get_inventory(model).config
    qc = (cfg.quantization_config if cfg is not None else None) or {}
    return "fp8" if qc.get("quant_method") == "fp8" or qc.get("fmt") == "e4m3" else "bf16"


def scheme_for(model, scheme: str) -> str:
    """``scheme``, unless it is one of DeepSeek-V4's checkpoint recipes asked of another model, which then gets
    its own default (:func:`default_scheme`) for :data:`V4_ASCEND_W8A8` and the generic ``w4a8`` for
    :data:`V4_ASCEND_W4A8`: the recipes' layer names and the loader's copies are V4's."""
    if scheme == V4_ASCEND_W8A8:
        return default_scheme(model)
    if scheme == V4_ASCEND_W4A8 and not _is_v4(model):
        return "w4a8"
    return scheme


def v4_recipe_alternative(model, scheme: str) -> str | None:
    """Where ``scheme`` is one of DeepSeek-V4's msModelSlim recipes and ``model`` is not a DeepSeek-V4 model, the
    scheme that fits it (:func:`scheme_for`); None where ``scheme`` fits. The command line and the served spec
    refuse such a pair: the recipes' layer names and the loader's copies are V4's."""
    if scheme in (V4_ASCEND_W8A8, V4_ASCEND_W4A8) and not _is_v4(model):
        return scheme_for(model, scheme)
    return None


def refuse_v4_recipe(model, scheme: str, *, flag: str = "") -> None:
    """A one-line error where ``scheme`` is one of DeepSeek-V4's msModelSlim recipes asked of another model
    (:func:`v4_recipe_alternative`), naming ``flag`` and the scheme that fits; a model that does not load is left to
    its own message."""
    from pdcalc.core.errors import OneLineError, PdcalcError

    if scheme not in (V4_ASCEND_W8A8, V4_ASCEND_W4A8):
        return
    try:
        alt = v4_recipe_alternative(model, scheme)
    except PdcalcError:
        return
    if alt is not None:
        raise OneLineError(f"{flag}{scheme} is DeepSeek-V4's msModelSlim recipe (V4's layer names); for {model} use "
                           f"{flag}{alt}")


def get_scheme(name: str | Scheme) -> Scheme:
    """A scheme by name (``bf16``, ``fp16-all``, ``article-1byte``, ``fp8``, ``fp8-fp4``, ``w8a8``, ``w4a8``,
    ``w8a8-msmodelslim``, ``w4a8-msmodelslim``)."""
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
