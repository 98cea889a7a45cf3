"""FLOPs of a DeepSeek-V4 prefill: the weight matmuls plus the hybrid attention.

A prompt of ``L`` tokens costs two FLOPs per activated parameter per token for the weight matmuls,
plus the attention, whose keys per query depend on the layer kind (``compress_ratios`` of
``config.json``; reference ``inference/model.py`` at 60d8d707, ``Attention.forward`` and
``Indexer.forward``):

- every layer attends to the last ``w = sliding_window`` raw tokens (query ``i`` sees ``min(i, w)``);
- a ratio-4 layer attends to the ``index_topk`` compressed entries its indexer selects (at most
  ``i / 4``), and the indexer scores all ``i / 4`` entries with ``index_n_heads`` heads of
  ``index_head_dim``;
- a layer of any other ratio ``r`` (128 in DeepSeek-V4-Flash) has no indexer and attends to all
  ``i / r`` compressed entries (``get_compress_topk_idxs``).

Scores and the weighted sum each cost ``2 n_h d`` FLOPs per key (MQA over one latent of ``d =
head_dim``), the indexer ``2 n_I d_I`` per key. Summed over queries ``i = 1..L`` (causal):

.. math::

   F(L) = 2 N_\\text{act} L + \\sum_\\text{layers} \\Big[ 4 n_h d \\sum_i k(i) + 2 n_I d_I \\sum_i
   \\lfloor i / 4 \\rfloor [r = 4] \\Big]

with ``k(i)`` the keys of query ``i``. The position sums have closed forms (:func:`sum_capped_floor`),
so any prompt length costs the same. Small terms are left out: the compressors' own pooling, the
mHC mixing (``hc_mult`` x ``hidden_size`` per token) and the softmaxes.

:func:`hybrid_attention_flops` is the one implementation of the attention terms; the step model
(:mod:`pdcalc.throughput`) uses it for one decode query and for prefill.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from pdcalc.errors import ConfigError, LayoutError
from pdcalc.inventory import get_inventory
from pdcalc.model import ModelConfig, load_config

PHASES = ("prefill", "decode")


def _sum_floor(n: np.ndarray, step: float) -> np.ndarray:
    """``sum_{i=1..n} floor(i / step)`` for whole ``n >= 0``."""
    q = np.floor(n / step)
    r = n - q * step
    return step * q * (q - 1) / 2 + q * (r + 1)


def sum_capped_floor(n, step: int = 1, cap: float = np.inf):
    """``sum_{i=1..n} min(floor(i / step), cap)`` in closed form (whole ``n >= 0``, arrays welcome).

    With ``q = floor(n / s)`` and ``n = q s + r``, the uncapped sum counts ``s`` positions for each value
    ``0 .. q-1`` and ``r + 1`` for ``q``; the cap holds from position ``c s`` on:

    .. math::

       S(n) = s \\frac{q (q - 1)}{2} + q (r + 1), \\qquad
       \\sum_{i=1}^{n} \\min(\\lfloor i/s \\rfloor, c) = S(\\min(n, c s - 1)) + c \\max(0, n - c s + 1)

    Source: arithmetic; checked against a plain loop in ``tests/test_flops.py``.
    """
    n = np.floor(np.asarray(n, dtype=np.float64))
    if not np.isfinite(cap):
        return _sum_floor(n, step)
    edge = cap * step - 1
    return _sum_floor(np.minimum(n, edge), step) + cap * np.maximum(0.0, n - edge)


def layer_ratios(cfg: ModelConfig) -> tuple[tuple[int, int], ...]:
    """``(compress_ratio, layers)`` of the main model, in first-appearance order (MTP layers excluded)."""
    return tuple(Counter(cfg.compress_ratios[:cfg.num_hidden_layers]).items())


def _config(model) -> ModelConfig:
    cfg = model if isinstance(model, ModelConfig) else load_config(model)
    if cfg.model_type != "deepseek_v4":
        raise ConfigError(cfg.source, "model_type", f"the hybrid attention model covers deepseek_v4, "
                                                    f"not {cfg.model_type!r}")
    return cfg


def hybrid_attention_flops(model: str | Path | ModelConfig, context, *, phase: str = "prefill"):
    """Attention-core and indexer FLOPs of DeepSeek-V4 hybrid attention, summed over the main layers.

    ``phase="decode"``: one query at position ``L`` (``L`` tokens in the cache, the new one included).
    ``phase="prefill"``: all queries ``i = 1..L`` of one prompt of ``L`` tokens. Per layer of ratio
    ``r``, with ``w`` the window, ``K`` = ``index_topk``:

    .. math::

       k(i) = \\min(i, w) + \\begin{cases} 0 & r = 0 \\\\ \\min(\\lfloor i/4 \\rfloor, K) & r = 4 \\\\
       \\lfloor i/r \\rfloor & \\text{otherwise} \\end{cases}

       F_\\text{attn} = 4 n_h d \\sum_\\text{layers} \\sum_i k(i), \\qquad
       F_\\text{index} = 2 n_I d_I \\, n_{r=4} \\sum_i \\lfloor i/4 \\rfloor

    with the sums over ``i = L`` alone in decode. ``context`` counts whole tokens (rounded down).
    Returns ``(attention, indexer)`` as floats or arrays.

    Source: deepseek-ai/DeepSeek-V4-Flash ``inference/model.py`` (60d8d707): ``get_window_topk_idxs``,
    ``get_compress_topk_idxs``, ``Indexer.forward`` (``topk(min(index_topk, end_pos // ratio))``),
    ``Attention.forward`` (``sparse_attn`` over the window and the selected entries).
    """
    if phase not in PHASES:
        raise LayoutError(f"phase must be one of {', '.join(PHASES)}, got {phase!r}")
    cfg = _config(model)
    L = np.floor(np.asarray(context, dtype=np.float64))
    scalar = L.ndim == 0
    if phase == "decode":
        def pos(step=1, cap=np.inf):
            return np.minimum(np.floor(L / step), cap)
    else:
        def pos(step=1, cap=np.inf):
            return sum_capped_floor(L, step, cap)
    window = pos(1, cfg.sliding_window)
    keys = np.zeros(L.shape)
    scored = np.zeros(L.shape)
    for r, n in layer_ratios(cfg):
        k = window
        if r == 4:
            k = k + pos(4, cfg.index_topk)
            scored = scored + n * pos(4)
        elif r:
            k = k + pos(r)
        keys = keys + n * k
    attn = 4.0 * cfg.num_attention_heads * cfg.head_dim * keys
    index = 2.0 * cfg.index_n_heads * cfg.index_head_dim * scored
    return (float(attn), float(index)) if scalar else (attn, index)


def prefill_flops(model: str | Path | ModelConfig, prompt_tokens, *, include_attention: bool = True):
    """FLOPs to prefill one prompt of ``prompt_tokens`` tokens (an int or an array of ints).

    Returns a dict of float or arrays: ``matmul`` (2 x activated parameters x tokens), ``attention``
    (window, compressed and selected keys), ``indexer`` (scoring the ratio-4 entries) and ``total``.

    Source: module docstring; activated parameters from :meth:`pdcalc.inventory.Inventory.activated`;
    attention from :func:`hybrid_attention_flops`.
    """
    cfg = model if isinstance(model, ModelConfig) else load_config(model)
    if cfg.model_type != "deepseek_v4":
        raise ConfigError(cfg.source, "model_type", f"prefill_flops models deepseek_v4 hybrid attention, "
                                                    f"not {cfg.model_type!r}")
    n = np.asarray(prompt_tokens)
    scalar = n.ndim == 0
    if not np.issubdtype(n.dtype, np.integer) or np.any(n < 1):
        raise LayoutError(f"prompt_tokens must be whole numbers >= 1, got {prompt_tokens!r}")
    n = np.atleast_1d(n).astype(np.int64)
    act = get_inventory(cfg).activated()
    matmul = 2.0 * act * n
    if include_attention:
        attn, index = hybrid_attention_flops(cfg, n, phase="prefill")
    else:
        attn, index = np.zeros(n.shape), np.zeros(n.shape)
    total = matmul + attn + index
    out = {"matmul": matmul, "attention": attn, "indexer": index, "total": total}
    return {k: float(v[0]) for k, v in out.items()} if scalar else out


def prefill_compute_seconds(model, card, prompt_tokens, *, mfu: float, matmul_dtype: str = "int8",
                            attn_dtype: str = "bf16"):
    """Compute time of one prefill on one card: the weight matmuls at the ``matmul_dtype`` peak (W8A8
    multiplies int8), attention and indexer at the ``attn_dtype`` peak, both at a share ``mfu`` of peak.

    .. math:: t_p = \\frac{F_\\text{matmul}}{\\mu P_\\text{matmul}} + \\frac{F_\\text{attn} + F_\\text{indexer}}{\\mu P_\\text{attn}}

    Source: :func:`prefill_flops`; peaks from :func:`pdcalc.hardware.get_card`.
    """
    from pdcalc.hardware import get_card

    if not 0 < mfu <= 1:
        raise LayoutError(f"mfu must be in (0, 1], got {mfu!r}")
    dev = get_card(card)
    f = prefill_flops(model, prompt_tokens)
    attention = f["attention"] + f["indexer"]
    return f["matmul"] / (mfu * dev.flops(matmul_dtype)) + attention / (mfu * dev.flops(attn_dtype))
