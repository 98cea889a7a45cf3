"""The sentences a chapter says about any model: its architecture, its KV cache as each engine lays it out, what
sets it apart from the chapter's model, and the model family at a glance, every figure computed from the model's
config and inventory (chapters re-run on any ``config.json``).
"""

from __future__ import annotations

import pandas as pd

from pdcalc.book.report import class_split
from pdcalc.model.inventory import get_inventory


def _config(model):
    """The :class:`~pdcalc.model.config.ModelConfig` of a preset name, a config.json path or a config."""
    from pdcalc.model.config import load_config

    return model if hasattr(model, "model_type") else load_config(model)


def _kb(x: float, decimals: int = 3) -> str:
    return f"{x / 1e3:,.{decimals}f}"


def kv_cache_story(model, engine: str, *, article_upper_kb=None) -> str:
    """What ``model`` really caches, in a paragraph for the KV chapter (markdown), from its config.

    DeepSeek-V4: the sliding window, compressed and indexer caches by layer kind; the MLA types: one latent
    plus the RoPE key per token and layer (V3.2: and the indexer's key). ``article_upper_kb``: the V4
    article's uncompressed upper bound, set against the real uncompressed cache of a V4 model.
    """
    from pdcalc.model.kv_layout import indexer_entry_bytes

    cfg = _config(model)
    name = f"`{cfg.name}` ({cfg.model_type})"
    mtp = cfg.num_nextn_predict_layers
    tail = (f"Every cache of every layer kind, as {engine} stores it page by page (see `pdcalc.model.kv_layout` "
            "for the source of every entry size):")
    if cfg.model_type == "deepseek_v4":
        ratios = list(cfg.compress_ratios[:cfg.num_hidden_layers])
        small, large = min(r for r in ratios if r), max(ratios)
        entry = cfg.head_dim * 2
        upper = cfg.num_hidden_layers * entry
        versus = f", not {article_upper_kb}" if article_upper_kb is not None else ""
        return (f"{name} has no per-token latent on every layer. Every layer keeps a sliding window of the last "
                f"{cfg.sliding_window} raw entries; {ratios.count(small)} layers (CSA) also keep one "
                f"compressed entry per {small} tokens and an indexer entry that selects which of them to "
                f"read; {ratios.count(large)} layers (HCA) keep one compressed entry per {large} tokens; "
                f"{ratios.count(0)} layers" + (" (and the MTP layer)" if mtp else "") + " keep only the window; the "
                "compressors keep a small rolling state (the ratios are `compress_ratios` of `config.json`). A raw "
                f"entry is one {cfg.head_dim}-dimensional vector with the RoPE dimensions inside it ({_kb(entry)} KB "
                f"in BF16), so even an uncompressed cache would be {_kb(upper, 1)} KB per token{versus}. " + tail)
    latent = (cfg.kv_lora_rank + cfg.qk_rope_head_dim) * 2
    layers = f"{cfg.num_hidden_layers} layers" + (f" (and its {mtp} MTP layer{'s' if mtp > 1 else ''})" if mtp else "")
    text = (f"{name} uses MLA: on each of its {layers} it caches, per token, one "
            f"{cfg.kv_lora_rank}-dimensional latent and a {cfg.qk_rope_head_dim}-dimensional RoPE key "
            f"({_kb(latent)} KB in BF16, {_kb(latent * cfg.num_hidden_layers, 1)} KB per token over the main "
            "model). Nothing is windowed or compressed, so every token of context adds the same bytes and "
            "nothing is fixed per sequence. ")
    if cfg.sparse:
        text += (f"Its lightning indexer adds one {cfg.index_head_dim}-value key per token and layer "
                 f"({indexer_entry_bytes(cfg, engine):,.0f} B in {engine}) and selects the {cfg.index_topk:,} "
                 "tokens each query attends to, which bounds what a decode step reads but not what is stored. ")
    return text + tail


def block_story(model, *, article_o_rank=None) -> str:
    """The official block of ``model`` against the V4 article's drawing, in a paragraph (markdown);
    ``article_o_rank``: the article's output-group rank, set against a V4 model's."""
    cfg = _config(model)
    if cfg.model_type == "deepseek_v4":
        ratios = list(cfg.compress_ratios[:cfg.num_hidden_layers])
        theirs = article_o_rank if article_o_rank is not None else "the article's"
        return (f"The official block differs in three ways: there is no `wkv_b` (the single KV head, "
                f"{cfg.head_dim} wide, is read directly as key and value), the output groups have rank "
                f"{cfg.o_lora_rank} rather than {theirs}, and {sum(1 for r in ratios if r)} of the "
                f"{cfg.num_hidden_layers} layers add a KV compressor, {ratios.count(4)} of them a sparse-attention "
                f"indexer. The first {cfg.num_hash_layers} layers route by a token-id hash table instead "
                "of the learned router. The official main model therefore has these kinds of block:")
    dense = sum(1 for i in range(cfg.num_hidden_layers) if not cfg.is_moe_layer(i))
    q = (f"a low-rank query (rank {cfg.q_lora_rank})" if cfg.q_lora_rank else "a full-rank query projection `wq`")
    parts = [f"`{cfg.name}` ({cfg.model_type}) is an MLA model like the article's drawing: {q}, a "
             f"{cfg.kv_lora_rank}-wide KV latent with its up-projection `wkv_b`, {cfg.num_attention_heads} heads; "
             "it has no mHC mixing and no KV compressor."]
    if cfg.sparse:
        parts.append(f"Every layer adds a lightning indexer ({cfg.index_n_heads} heads of "
                     f"{cfg.index_head_dim}) that picks {cfg.index_topk:,} tokens per query.")
    first = "Its first layer has" if dense == 1 else f"Its first {dense} layers have"
    parts.append(f"{first} a dense FFN and the other "
                 f"{cfg.num_hidden_layers - dense} a MoE layer of {cfg.n_routed_experts} routed"
                 + (f" and {cfg.n_shared_experts} shared" if cfg.n_shared_experts else "")
                 + f" experts, {cfg.num_experts_per_tok} chosen per token by a {cfg.scoring_func} router"
                 + (" with a score-correction bias" if cfg.router_bias else "") + ". Its kinds of block:")
    return " ".join(parts)


def example_layer(model) -> tuple[int, str]:
    """A representative main-model layer of ``model`` and what it shows: V4, the first ratio-4 layer
    (compressor and indexer); the MLA types, the first MoE layer."""
    cfg = _config(model)
    if cfg.model_type == "deepseek_v4":
        i = next((i for i in range(cfg.num_hidden_layers) if cfg.compress_ratio(i) == 4), 0)
        return i, f"an official block with a 4:1 compressor and an indexer (layer {i})"
    i = next((i for i in range(cfg.num_hidden_layers) if cfg.is_moe_layer(i)), 0)
    return i, f"an official MoE block (layer {i})" + (", with its indexer" if cfg.sparse else "")


def other_model_note(model, chapter_model: str = "deepseek-v4-flash", *, quant: str | None = None,
                     asked_quant: str | None = None) -> str | None:
    """A note for a chapter re-run on a model other than the one its article describes (markdown), or None.

    The article's numbers are audited against the official ``chapter_model`` whatever the run's model, so
    the verdicts stand; the tables, charts and sentences built from the run's model describe that model.
    """
    cfg, ref = _config(model), _config(chapter_model)
    if cfg.name == ref.name:
        return None
    return (f"> **This page describes `{cfg.name}` ({cfg.model_type}).** "
            f"It was re-run with `model` = `{cfg.name}`. The tables, charts and sentences built from `model` describe "
            f"that model, its {cfg.num_hidden_layers} layers and {cfg.n_routed_experts} routed experts. The "
            f"article's printed numbers are still checked against the official `{ref.name}`, which is what the "
            "article describes, so the verdicts and the audit are those of the published page."
            + (f" Its weights are stored as `{quant}`: `{asked_quant}` is DeepSeek-V4's own checkpoint recipe."
               if quant and asked_quant and quant != asked_quant else ""))


def architecture_findings(model, *, article_o_rank, quant: str) -> dict[str, str]:
    """The model-dependent findings of the architecture chapter (markdown), keyed ``card``, ``block``, ``mtp``."""
    from pdcalc.model.quant import weight_bytes

    cfg = _config(model)
    counts = get_inventory(model).counts()
    total, active = f"{counts.total / 1e9:.2f}", f"{counts.activated / 1e9:.2f}"
    mtp_gb = weight_bytes(model, quant, part="mtp") / 1e9
    main_gb = weight_bytes(model, quant) / 1e9
    if cfg.model_type == "deepseek_v4":
        ratios = list(cfg.compress_ratios[:cfg.num_hidden_layers])
        card = (f"**The model card holds, except for its KV cache.** The official model has {total} billion "
                f"parameters in its main model and activates {active} billion per token, as §1.2 says")
        block = (f"**The article's block is not V4's.** Its attention has a `wkv_b` that V4 does not have and output "
                 f"groups of rank {article_o_rank} instead of {cfg.o_lora_rank}; {sum(1 for r in ratios if r)} of the "
                 f"{cfg.num_hidden_layers} official layers add a KV compressor")
    else:
        card = (f"**`{cfg.name}` has {total} billion parameters in its main model** and activates {active} "
                "billion per token")
        block = (f"**`{cfg.name}` is an MLA model ({cfg.model_type}):** {cfg.num_hidden_layers} layers with a "
                 f"`wkv_b` up-projection, {cfg.n_routed_experts} routed experts, no mHC and no compressor"
                 + ("; a lightning indexer on every layer" if cfg.sparse else ""))
    if mtp_gb:
        mtp = (f"**The checkpoint carries an MTP module the article leaves out:** {mtp_gb:.2f} GB beside the "
               f"{main_gb:.2f} GB main model")
    else:
        mtp = f"**This config declares no MTP module:** the main model is {main_gb:.2f} GB as {quant}"
    return {"card": card, "block": block, "mtp": mtp}


def family_table(models=None, *, context: int = 32768) -> pd.DataFrame:
    """The official presets side by side: model type, routed experts (top-k), parameters (billions:
    main model, activated per token, MTP module) and the KV cache per token of context at ``context`` tokens
    in each engine (KB, MTP layers included, averaged over the sequence: windows and states spread over it).

    Source: the tensor inventories (:mod:`pdcalc.model.inventory`) and the engine layouts
    (:mod:`pdcalc.model.kv_layout`).
    """
    from pdcalc.model.config import CONFIG_PRESETS, load_config
    from pdcalc.model.kv_cache import kv_bytes
    from pdcalc.model.kv_layout import ENGINES

    rows = []
    for name in models or CONFIG_PRESETS:
        cfg, counts = load_config(name), get_inventory(name).counts()
        row = {"model": name, "type": cfg.model_type,
               "experts (top-k)": f"{cfg.n_routed_experts} ({cfg.num_experts_per_tok})",
               "params (B)": counts.total / 1e9, "active (B)": counts.activated / 1e9, "MTP (B)": counts.mtp / 1e9}
        for engine in ENGINES:
            row[f"KV {engine} (KB)"] = float(kv_bytes(cfg, context, engine).per_token_bytes_average) / 1e3
        rows.append(row)
    return pd.DataFrame(rows).set_index("model")


def architecture_stories(model, *, quant: str, article_model: str, article_ii_printed) -> dict[str, str]:
    """The architecture chapter's model-dependent sentences (markdown), keyed ``class_ii`` (a finding),
    ``ii_gap`` (what the class-II gap is made of), ``mtp_clause`` and ``loads`` (what the deployment loads)."""
    from pdcalc.model.quant import V4_ASCEND_W8A8, get_scheme, release_scheme, scheme_label, weight_bytes

    cfg = _config(model)
    inv, art = get_inventory(model), get_inventory(article_model)
    off, art_split = class_split(model, quant), class_split(article_model, "article-1byte")
    ii, one = float(off.iloc[1]), float(off.iloc[0])
    v4 = cfg.model_type == "deepseek_v4"
    label = scheme_label(quant)
    if v4:
        class_ii = (f"**The replicated class II is {ii / 1e9:.2f} GB per card, not {article_ii_printed:g} GB.** The "
                    f"article's own shapes give {float(art_split.iloc[1]) / 1e9:.2f} GB; the official model as the {label} "
                    f"checkpoint stores it needs {ii / 1e9:.2f} GB ({ii / 2**30:.2f} GiB) on every card, "
                    f"{ii / float(art_split.iloc[1]):.2f} times the article's figure. EP divides only the "
                    f"{one / 1e9:.1f} GB of routed experts")
        mhc = inv.params(category="mhc") / art.params(category="mhc")
        ii_gap = ("Most of the gap is the attention: wider output projections, the KV compressors and indexers, and mHC "
                  f"mixing weights {mhc:.0f} times the article's estimate. The embedding and output head are also "
                  "untied (the official config sets `tie_word_embeddings: false`), so the head is a second matrix, as "
                  "the article conservatively assumed.")
    else:
        class_ii = (f"**`{cfg.name}` replicates {ii / 1e9:.2f} GB on every card** ({ii / 2**30:.2f} GiB as the {label} "
                    f"checkpoint stores it); EP divides only its {one / 1e9:.1f} GB of routed experts")
        ii_gap = (f"`{cfg.name}` is another model than the article's, so this ratio compares two models; it says "
                  "nothing about the article's arithmetic.")
    mtp_b = inv.counts().mtp / 1e9
    mtp_clause = (f"its MTP module, which speculative decoding loads beside it, adds {mtp_b:.2f} billion more" if mtp_b
                  else "its config declares no MTP module")
    main_gb, mtp_gb = weight_bytes(model, quant) / 1e9, weight_bytes(model, quant, part="mtp") / 1e9
    release = release_scheme(model)
    rel_gb = weight_bytes(model, release, part="all") / 1e9
    sch = get_scheme(quant)
    if quant == V4_ASCEND_W8A8 and v4:
        how = ("The Ascend W8A8 checkpoint, as msModelSlim's recipe writes it, keeps the embedding, output head, norms, "
               "router, mHC weights, the output projections `wo_a` and `wo_b` and the compressors in floating point "
               "and quantizes the other linear layers to int8; vllm-ascend holds each int8 row's scale and offset in "
               "BF16 with an fp32 copy of the scale, and gives the MTP draft an embedding and a head of its own "
               "(`pdcalc.model.quant`).")
    else:
        how = f"The scheme `{quant}`: {sch.description}."
    mtp_part = (f" and the MTP module that speculative decoding loads adds {mtp_gb:.2f} GB, which the article leaves "
                "out of every card" if mtp_gb else "; the config declares no MTP module")
    if sch.mtp_vocab_copies and mtp_gb:
        vocab = 2 * cfg.vocab_size * cfg.hidden_size * 2 / 1e9
        mtp_part += f" (its own embedding and head put another {vocab:.2f} GB on each card)"
    loads = (f"The article assumes one byte per parameter. {how} Under `quant` the main model is {main_gb:.2f} GB"
             f"{mtp_part}. For comparison, the official release ({scheme_label(release)}, main model and MTP) is "
             f"{rel_gb:.1f} GB. Each tensor group's storage, folded:")
    return {"class_ii": class_ii, "ii_gap": ii_gap, "mtp_clause": mtp_clause, "loads": loads}


def kv_words(model) -> dict[str, str]:
    """The KV chapter's model-dependent phrases (markdown): what the slope and the fixed part of a sequence's
    cache are made of (``slope_what``, ``fixed_what``) and how the engines' layouts differ (``engines_differ``).
    Source: :mod:`pdcalc.model.kv_layout` (the layouts and their sources)."""
    cfg = _config(model)
    mtp = " and MTP" if cfg.num_nextn_predict_layers else ""
    if cfg.model_type == "deepseek_v4":
        return {"slope_what": f"the compressed, indexer{mtp} entries",
                "fixed_what": "the sliding windows and compressor states, whatever the context",
                "engines_differ": ("The three engines differ by their entry formats (BF16 on the 910B, FP8 with "
                                   "scales in vLLM's CUDA kernels, BF16 in DeepSeek's reference code) and by page "
                                   "rounding"),
                "ratio_trend": "the cost of the fixed windows fades and the slope takes over"}
    what = "latent, RoPE key and indexer key" if cfg.sparse else "latent and RoPE key"
    return {"slope_what": f"the {what} of every layer{', the MTP layer included' if mtp else ''}",
            "fixed_what": "nothing for this model, which keeps no window and no compressor state",
            "engines_differ": ("The three engines store the MLA latent alike (BF16 by default) and differ by "
                               + ("the indexer's key (FP8 with a scale in the reference code and vLLM, BF16 in "
                                  "vllm-ascend) and " if cfg.sparse else "") + "page rounding"),
            "ratio_trend": "with nothing fixed per sequence, only page rounding moves it"}
