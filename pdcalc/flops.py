"""FLOPs of a DeepSeek-V4 prefill: the weight matmuls plus the hybrid attention.

A prompt of ``L`` tokens costs two FLOPs per activated parameter per token for the weight matmuls,
plus the attention, whose keys per query depend on the layer kind (``compress_ratios`` of
``config.json``; reference ``inference/model.py`` at 60d8d707, ``Attention.forward`` and
``Indexer.forward``):

- every layer attends to the last ``w = sliding_window`` raw tokens (query ``i`` sees ``min(i, w)``);
- a ratio-128 layer also attends to all ``i / 128`` compressed entries;
- a ratio-4 layer attends to the ``index_topk`` compressed entries its indexer selects (at most
  ``i / 4``), and the indexer scores all ``i / 4`` entries with ``index_n_heads`` heads of
  ``index_head_dim``.

Scores and the weighted sum each cost ``2 n_h d`` FLOPs per key (MQA over one latent of ``d =
head_dim``), the indexer ``2 n_I d_I`` per key. Summed over queries ``i = 1..L`` (causal):

.. math::

   F(L) = 2 N_\\text{act} L + \\sum_\\text{layers} \\Big[ 4 n_h d \\sum_i k(i) + 2 n_I d_I \\sum_i \\tfrac{i}{4}
   [r = 4] \\Big]

with ``k(i)`` the keys of query ``i``. Small terms are left out: the compressors' own pooling, the
mHC mixing (``hc_mult`` x ``hidden_size`` per token) and the softmaxes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pdcalc.errors import ConfigError, LayoutError
from pdcalc.inventory import get_inventory
from pdcalc.model import ModelConfig, load_config


def _sum_min(n: np.ndarray, cap: float, step: float = 1.0) -> np.ndarray:
    """``sum_{i=1..n} min(i / step, cap)``, exact for whole ``i / step`` (floor of the compressed count)."""
    i = np.arange(1, int(np.max(n)) + 1, dtype=np.float64)
    c = np.cumsum(np.minimum(np.floor(i / step), cap))
    return c[n - 1]


def prefill_flops(model: str | Path | ModelConfig, prompt_tokens, *, include_attention: bool = True):
    """FLOPs to prefill one prompt of ``prompt_tokens`` tokens (an int or an array of ints).

    Returns a dict of float or arrays: ``matmul`` (2 x activated parameters x tokens), ``attention``
    (window, compressed and selected keys), ``indexer`` (scoring the ratio-4 entries) and ``total``.

    Source: module docstring; activated parameters from :meth:`pdcalc.inventory.Inventory.activated`.
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
    attn = np.zeros(n.shape)
    index = np.zeros(n.shape)
    if include_attention:
        per_key = 4.0 * cfg.num_attention_heads * cfg.head_dim
        window = _sum_min(n, cfg.sliding_window)
        for r in cfg.compress_ratios[:cfg.num_hidden_layers]:
            keys = window.copy()
            if r == 128:
                keys += _sum_min(n, np.inf, 128)
            elif r == 4:
                keys += _sum_min(n, cfg.index_topk, 4)
                index += 2.0 * cfg.index_n_heads * cfg.index_head_dim * _sum_min(n, np.inf, 4)
            attn += per_key * keys
    total = matmul + attn + index
    out = {"matmul": matmul, "attention": attn, "indexer": index, "total": total}
    return {k: float(v[0]) for k, v in out.items()} if scalar else out
