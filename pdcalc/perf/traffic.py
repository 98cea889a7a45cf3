"""Bytes a step moves on one card: the weights it holds and reads (experts hit by the step's tokens),
and the KV cache one sequence holds, reads in decode and writes in prefill, as each engine lays it out.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from pdcalc.core.errors import LayoutError, UnknownNameError
from pdcalc.layout.memory import card_weights
from pdcalc.model.config import load_config
from pdcalc.model.kv_cache import mla_bytes_per_token
from pdcalc.model.kv_layout import ENGINES, engine_layout, indexer_entry_bytes
from pdcalc.perf.routing import expected_experts_hit
from pdcalc.perf.shape import ModelShape, as_array, check_phase, model_key, model_shape, scalar_or_array

DEFAULT_KV_BYTES = 2.0             # BF16 latent + RoPE key cache (reference MLA.__init__)
DEFAULT_V4_ENGINE = "vllm-ascend"  # engine whose KV layout a DeepSeek-V4 step reads (pdcalc.model.kv_layout)


#: Tokens at which a cache format's bytes per latent value are read off the engine's layout (a multiple of every
#: block size, so no partial block).
_PROBE_TOKENS = 65536


def kv_step_kwargs(model, engine: str, kv_cache_dtype: str | None = None) -> dict:
    """The KV arguments of :func:`step` for ``model`` served by ``engine`` with the cache format
    ``kv_cache_dtype``: DeepSeek-V4 reads the engine's layout; the other MLA models read the latent at the
    bytes per value the engine's layout stores in that format (:func:`pdcalc.model.kv_cache.kv_bytes`: FP8 is
    1, vLLM's ``fp8_ds_mla`` 656 / 576 with its scales and BF16 RoPE keys; a format the engine does not store
    is refused there, as ``pdcalc kv`` and ``pdcalc memory`` refuse it), and V3.2 also the engine's indexer
    keys."""
    cfg = load_config(model)
    if cfg.model_type == "deepseek_v4":
        return {"engine": engine}
    out = {}
    if kv_cache_dtype not in (None, "auto"):
        from pdcalc.model.kv_cache import kv_bytes

        r = kv_bytes(model, _PROBE_TOKENS, engine, include_mtp=False, kv_cache_dtype=kv_cache_dtype)
        latent = float(r.by_cache.get("latent", r.total_bytes))
        values = cfg.kv_lora_rank + cfg.qk_rope_head_dim
        out["kv_bytes"] = latent / (_PROBE_TOKENS * cfg.num_hidden_layers * values)
    if cfg.model_type == "deepseek_v32":
        out["engine"] = engine
    return out


# ------------------------------------------------------------------------------ bytes per card
@cache
def _weights_cached(model: str, quant: str, ep: int, tp: int):
    return card_weights(model, quant, ep=ep, tp=tp)


def card_weights_cached(model, quant, ep, tp):
    if isinstance(model, str) and isinstance(quant, str):
        return _weights_cached(model, quant, ep, tp)
    return card_weights(model, quant, ep=ep, tp=tp)


def weight_bytes_per_card(model, quant: str = "w8a8", *, tp: int = 1, ep: int | None = None,
                          routed_tokens=None):
    """Weight bytes one card holds, or reads in one step when ``routed_tokens`` is given.

    Non-expert tensors come from :func:`pdcalc.layout.memory.card_weights` (replicated in full, TP-split ones
    ``1/t``). Routed experts: the card's EP share (``ep``), or with ``ep=None`` ``1/t`` of every expert.
    In a step, a card reads its lookup tables only a row per token (left out) and of its experts only
    those the step's tokens hit (:func:`expected_experts_hit`), ``routed_tokens`` being the tokens routed
    inside the card's EP group (or TP rank):

    .. math:: B_\\text{w} = W_\\text{non-routed} - W_\\text{lookup} + W_\\text{routed}\\,\\bigl(1 - (1 - k/E)^{B}\\bigr)
    """
    w = card_weights_cached(model, quant, ep or 1, tp)
    routed = w.class_i_bytes if ep else w.class_i_bytes / tp
    if routed_tokens is None:
        return w.class_ii_bytes + routed
    s = model_shape(model)
    lookup = w.by_category.get("embedding", 0.0) + w.by_category.get("hash_routing", 0.0)
    hit = expected_experts_hit(routed_tokens, s.n_experts, s.top_k) / s.n_experts
    return w.class_ii_bytes - lookup + routed * hit


def kv_bytes_per_token(model, kv_bytes: float = DEFAULT_KV_BYTES) -> float:
    """MLA cache bytes of one token over all layers (:func:`pdcalc.model.kv_cache.mla_bytes_per_token`)."""
    return mla_bytes_per_token(model, dtype_bytes=kv_bytes)


def index_key_bytes_per_token(model, engine: str | None = None) -> float:
    """DeepSeek-V3.2: lightning-indexer key bytes of one token over all layers (0 without an indexer), as
    ``engine`` stores them (:func:`pdcalc.model.kv_layout.indexer_entry_bytes`; None: the reference code's, ``d_I``
    FP8 values and one fp32 scale per 128 of them, as vLLM; vllm-ascend keeps BF16 keys)."""
    s = model_shape(model)
    return s.layers * indexer_entry_bytes(s.config, engine or "reference") if s.sparse else 0.0


@dataclass(frozen=True)
class _KVKind:
    """The caches of one kind of DeepSeek-V4 main layer, as one engine stores them."""

    layers: int                # main layers of this kind
    window: int                # raw tokens of the sliding window
    window_entry: float        # bytes of one window entry
    ratio: int                 # tokens per compressed entry (0: none)
    compressed_entry: float    # bytes of one compressed entry
    selected: float            # compressed entries a query attends to at most (index_topk, or all)
    indexer_ratio: int         # tokens per indexer key (0: no indexer)
    indexer_entry: float       # bytes of one indexer key
    caches: tuple              # CacheSpec of every cache of the layer (stored bytes)


def _build_v4_kv(model, engine: str) -> tuple[_KVKind, ...]:
    s = model_shape(model)
    layout = engine_layout(engine, s.config)
    out = []
    for kind in layout.kinds(include_mtp=False):
        c = {cs.name: cs for cs in kind.caches}
        comp, idx = c.get("compressed"), c.get("indexer")
        out.append(_KVKind(
            layers=kind.n_layers, window=kind.window_entries, window_entry=kind.window_entry_bytes,
            ratio=comp.tokens_per_entry if comp else 0, compressed_entry=comp.entry_bytes if comp else 0.0,
            selected=float(s.config.index_topk) if idx else np.inf,
            indexer_ratio=idx.tokens_per_entry if idx else 0, indexer_entry=idx.entry_bytes if idx else 0.0,
            caches=kind.caches))
    return tuple(out)


@cache
def _v4_kv_cached(model: str, engine: str) -> tuple[_KVKind, ...]:
    return _build_v4_kv(model, engine)


def v4_kv_kinds(model, engine: str) -> tuple[_KVKind, ...]:
    key = model_key(model)
    return _v4_kv_cached(key, engine) if key is not None else _build_v4_kv(model, engine)


def step_engine(s: ModelShape, engine: str | None) -> str | None:
    """The engine whose KV layout a step reads: V4 default :data:`DEFAULT_V4_ENGINE`; V3.2 the engine's indexer
    keys (None: the reference's); the other MLA models none (their latent's dtype is ``kv_bytes``)."""
    if not s.v4:
        if s.sparse:
            if engine is not None and engine not in ENGINES:
                raise UnknownNameError("engine", engine, ENGINES)
            return engine
        if engine not in (None, "reference"):
            raise LayoutError(f"engine={engine!r}: {s.model_type} steps read the MLA latent at the dtype kv_bytes "
                              f"sets, the same in every engine; engine must be None or 'reference'")
        return None
    engine = DEFAULT_V4_ENGINE if engine is None else engine
    if engine not in ENGINES:
        raise UnknownNameError("engine", engine, ENGINES)
    return engine


def kv_read_bytes_per_sequence(model, context, *, phase: str = "decode", engine: str | None = None,
                               kv_bytes: float = DEFAULT_KV_BYTES):
    """KV bytes one sequence moves in one step: read in decode, written in prefill.

    DeepSeek-V3: the whole MLA cache in decode, the new tokens' entries in prefill, ``b_KV`` =
    :func:`kv_bytes_per_token` bytes each (``engine`` None or "reference").

    DeepSeek-V3.2: in decode the ``min(L, K)`` latents the indexer selects and all ``L`` index keys
    (:func:`index_key_bytes_per_token` ``b_I``); a prefill writes both for every token:

    .. math:: B_\\text{read}(L) = \\min(L, K)\\,b_\\text{KV} + L\\,b_I, \\qquad B_\\text{write}(L) = L\\,(b_\\text{KV} + b_I)

    DeepSeek-V4: the new token reads only what it attends to and what its indexer scores, with the entry
    sizes ``e`` of ``engine``'s layout (:func:`pdcalc.model.kv_layout.engine_layout`; page padding is not
    read): on every layer the ``min(L, w)`` window entries, on a ratio-4 layer the ``min(L/4, K)``
    entries the indexer selects (``K`` = ``index_topk``) and all ``L/4`` indexer keys, on a ratio-128
    layer all ``L/128`` compressed entries. A prefill writes the entries the prompt leaves in the cache:

    .. math::

       B_\\text{read}(L) = \\sum_\\text{layers} \\Bigl[\\min(L, w)\\,e_\\text{win}
       + \\min(\\lfloor L/r \\rfloor, K_r)\\,e_\\text{c} + [r = 4] \\lfloor L/4 \\rfloor\\,e_\\text{idx}\\Bigr],
       \\qquad K_4 = K,\\; K_{128} = \\infty

       B_\\text{write}(L) = \\sum_\\text{layers} \\Bigl[\\min(L, w)\\,e_\\text{win}
       + \\lfloor L/r \\rfloor\\,e_\\text{c} + [r = 4] \\lfloor L/4 \\rfloor\\,e_\\text{idx}\\Bigr]

    Compressor states (at most a few KB per layer and step, amortised) and the MTP layer are left out.
    ``L`` counts whole tokens (rounded down).

    Source: deepseek-ai/DeepSeek-V4-Flash ``inference/model.py`` (60d8d707): ``get_window_topk_idxs``,
    ``Indexer.forward`` (scores ``kv_cache[:, :end_pos // ratio]``, keeps ``topk(min(index_topk, ...))``),
    ``get_compress_topk_idxs`` (all entries without an indexer), ``sparse_attn`` (gathers the selected
    entries); entry bytes from :mod:`pdcalc.model.kv_layout`.
    """
    s, phase = model_shape(model), check_phase(phase)
    engine = step_engine(s, engine)
    L = as_array(context, "context", 1)
    scalar = np.ndim(context) == 0
    if s.sparse and phase == "decode":
        n = np.floor(L)
        return scalar_or_array(np.minimum(n, s.index_topk) * kv_bytes_per_token(model, kv_bytes)
                    + n * index_key_bytes_per_token(model, engine), scalar)
    if not s.v4:
        per_token = kv_bytes_per_token(model, kv_bytes) + index_key_bytes_per_token(model, engine)
        return scalar_or_array(L * per_token, scalar)
    n = np.floor(L)
    out = np.zeros(n.shape)
    for k in v4_kv_kinds(model, engine):
        b = np.minimum(n, k.window) * k.window_entry
        if k.ratio:
            entries = np.floor(n / k.ratio)
            b = b + (np.minimum(entries, k.selected) if phase == "decode" else entries) * k.compressed_entry
        if k.indexer_ratio:
            b = b + np.floor(n / k.indexer_ratio) * k.indexer_entry
        out = out + k.layers * b
    return scalar_or_array(out, scalar)


def kv_stored_bytes_per_sequence(model, context, *, engine: str | None = None,
                                 kv_bytes: float = DEFAULT_KV_BYTES):
    """KV bytes one sequence of ``L`` tokens holds on a card (main layers; the cache is whole on every TP card).

    DeepSeek-V3: ``L b_KV`` (:func:`kv_bytes_per_token`); V3.2 adds the index keys, ``L (b_KV + b_I)``. DeepSeek-V4: every cache of ``engine``'s
    layout, pages and padding included, MTP layer excluded, i.e.
    ``pdcalc.model.kv_cache.kv_bytes(model, L, engine, include_mtp=False).total_bytes``:

    .. math:: B_\\text{stored}(L) = \\sum_\\text{layers} \\sum_\\text{caches} B_\\text{cache}(L)

    Source: :func:`pdcalc.model.kv_cache.kv_bytes`.
    """
    s = model_shape(model)
    engine = step_engine(s, engine)
    L = as_array(context, "context", 1)
    scalar = np.ndim(context) == 0
    if not s.v4:
        per_token = kv_bytes_per_token(model, kv_bytes) + index_key_bytes_per_token(model, engine)
        return scalar_or_array(L * per_token, scalar)
    n = np.floor(L).astype(np.int64)
    out = np.zeros(n.shape)
    for k in v4_kv_kinds(model, engine):
        for c in k.caches:
            out = out + k.layers * c.bytes_at(n)
    return scalar_or_array(out, scalar)
