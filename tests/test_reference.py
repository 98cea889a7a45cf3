"""pdcalc's inventories against the official reference implementations themselves.

The JSON files under tests/data/reference/ were produced by tools/reference_counts.py, which imports
DeepSeek's reference ``inference/model.py`` (V3: deepseek-ai/DeepSeek-V3; V4-Flash:
deepseek-ai/DeepSeek-V4-Flash at revision 60d8d707, sha256 ce962f1f...; V3.2-Exp:
deepseek-ai/DeepSeek-V3.2-Exp at 3b99a535; DeepSeek-V2: DeepSeek-V3's model.py with its config_236B.json)
and instantiates ``Transformer`` on PyTorch's meta device with the published inference configs; DeepSeek-V2-Lite
and Kimi-K2 were counted the same way with the Hugging Face ``modeling_deepseek.py`` their checkpoints ship
(DeepseekV2ForCausalLM, DeepseekV3ForCausalLM; transformers 4.48.3), whose parameter names are mapped to the
reference's (:data:`HF_TO_REFERENCE`). Each file records its provenance.
The comparison is tensor by tensor, so a wrong shape cannot hide behind a right total.
"""

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from pdcalc.model.inventory import get_inventory
from pdcalc.model.quant import weight_bytes

DATA = Path(__file__).parent / "data" / "reference"

# Exact totals of the reference implementations (main model, MTP excluded; MTP module's own tensors),
# as counted by tools/reference_counts.py on the meta device (see the JSON files' provenance).
REFERENCE_TOTALS = {
    "deepseek-v3": {"main": 671_026_419_200, "file": "deepseek_v3_bf16.json"},
    "deepseek-v4-flash": {"main": 284_334_567_511, "mtp": 6_610_048_891, "file": "deepseek_v4_flash_bf16.json"},
    # DeepSeek's inference/model.py with inference/configs/config_236B.json (deepseek-ai/DeepSeek-V3@9b4e9788)
    "deepseek-v2": {"main": 235_741_434_880, "file": "deepseek_v2_bf16.json"},
    # Hugging Face DeepseekV2ForCausalLM (modeling_deepseek.py) with the V2-Lite config.json
    "deepseek-v2-lite": {"main": 15_706_484_224, "file": "deepseek_v2_lite_bf16.json"},
    # deepseek-ai/DeepSeek-V3.2-Exp@3b99a535 inference/model.py with config_671B_v3.2.json
    "deepseek-v3.2-exp": {"main": 671_877_944_064, "file": "deepseek_v32_exp_bf16.json"},
    # Hugging Face DeepseekV3ForCausalLM (Kimi-K2 ships DeepSeek-V3's modeling_deepseek.py) with Kimi-K2's config
    "kimi-k2": {"main": 1_026_408_232_448, "file": "kimi_k2_bf16.json"},
}

#: Hugging Face modeling_deepseek.py parameter names -> the reference inference/model.py names pdcalc uses.
HF_TO_REFERENCE = (
    (r"^model\.embed_tokens\.", "embed."), (r"^model\.norm\.", "norm."), (r"^lm_head\.", "head."),
    (r"^model\.layers\.", "layers."), (r"\.self_attn\.q_proj\.", ".attn.wq."),
    (r"\.self_attn\.q_a_proj\.", ".attn.wq_a."), (r"\.self_attn\.q_a_layernorm\.", ".attn.q_norm."),
    (r"\.self_attn\.q_b_proj\.", ".attn.wq_b."), (r"\.self_attn\.kv_a_proj_with_mqa\.", ".attn.wkv_a."),
    (r"\.self_attn\.kv_a_layernorm\.", ".attn.kv_norm."), (r"\.self_attn\.kv_b_proj\.", ".attn.wkv_b."),
    (r"\.self_attn\.o_proj\.", ".attn.wo."), (r"\.input_layernorm\.", ".attn_norm."),
    (r"\.post_attention_layernorm\.", ".ffn_norm."), (r"\.mlp\.gate\.e_score_correction_bias$", ".ffn.gate.bias"),
    (r"\.mlp\.", ".ffn."), (r"\.gate_proj\.", ".w1."), (r"\.up_proj\.", ".w3."), (r"\.down_proj\.", ".w2."),
)


def _reference_name(name: str) -> str:
    for pattern, repl in HF_TO_REFERENCE:
        name = re.sub(pattern, repl, name)
    return name


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
        out[(_reference_name(t["name"]), tuple(t["shape"]))] += t["count"]
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


@pytest.mark.parametrize("model_type", ["kimi_k2", "deepseek_v3"])
def test_kimi_k2_counts_the_same_under_either_model_type(tmp_path, model_type):
    """Kimi-K2's revisions declare model_type kimi_k2 (current) or deepseek_v3; both are its inventory."""
    import json

    from pdcalc.model.config import _data_path, load_config

    data = json.loads(_data_path("models", "kimi_k2_config.json").read_text())
    data["model_type"] = model_type
    (tmp_path / "config.json").write_text(json.dumps(data))
    cfg = load_config(str(tmp_path / "config.json"))
    assert cfg.model_type == model_type and cfg.router_bias
    assert get_inventory(cfg).counts().total == REFERENCE_TOTALS["kimi-k2"]["main"]


def test_inference_configs_read_as_their_model_type():
    """DeepSeek's inference configs (ModelArgs fields) give the same inventory as the Hugging Face configs."""
    from pdcalc.model.config import _data_path, load_config

    v3 = load_config(_data_path("models", "deepseek_v3_inference_config_671B.json"))
    assert v3.model_type == "deepseek_v3" and v3.router_bias
    assert get_inventory(v3).counts().total == REFERENCE_TOTALS["deepseek-v3"]["main"]
    v2 = load_config("deepseek-v2")
    assert v2.model_type == "deepseek_v2" and not v2.router_bias and v2.scoring_func == "softmax"
    assert load_config("deepseek-v3.2-exp").model_type == "deepseek_v32"
