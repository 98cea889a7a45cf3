"""SGLang's DeepSeek-V4 KV pool: what one token of the pool costs, what it reserves per request slot, and how
many tokens a card's room holds.

SGLang does not size a DeepSeek-V4 pool by what a sequence stores (:func:`pdcalc.model.kv_cache.kv_bytes`).
It charges every token of its token index ("full" tokens) for the sliding-window pool, the compressed caches,
the indexer keys and the 4:1 compressor states, each scaled as its pool is scaled to the full pool, and it sets
the 128:1 compressor states aside per request slot (:data:`SOURCES`, SGLang 0.5.15)::

    B = (r K L + K n4 / 4 + K n128 / 128 + I n4 / 4 + r (g4 / w) (S4 + S4i) n4) (L + 1) / L   [speculative]
    F = ceil((m + 1) g128 + g128 + 1, 128) 2 D 4 n128
    tokens = (room - F) / B

with K the bytes of one cached token (FP8 NoPE, BF16 RoPE and scales), I an indexer key, D the head width,
S4 and S4i the 4:1 states of the attention and the indexer (float32), w the sliding window, g4 and g128 the
state rings (longer under speculative decoding), r the launch's ``--swa-full-tokens-ratio``, m the requests a
scheduler runs at most, and L, n4, n128 the main layers (SGLang's slice of ``compress_ratios`` for its pipeline
stage), those compressed 4:1 and 128:1. A draft model's pool takes one layer's share, hence (L + 1) / L.

The window pool holds r tokens per full token, and a co-located server with its radix cache (the default) keeps
in it what a running request's prompt left in the tree: the prefix cache locks the window pool's slots of the
last node it inserted (the prompt, or its last chunk under chunked prefill) until the request ends, and frees
only what decode writes past it, a window or a page behind the front, every :data:`SWA_EVICTION_INTERVAL` steps
(:data:`SOURCES` ``window-lock``, ``window-evict``). Per running request the window pool so holds, on average::

    W = p + max(w, page) + v a / 2

with p the locked part of the prompt, page the pool's page, v the eviction interval and a the tokens a step
emits; the requests a server runs are at most ``r tokens / W`` beside ``tokens / (prompt + output)``
(:meth:`SglangV4Pool.requests`). A disaggregated decode server keeps only the window's tail of a prompt
(``disaggregation/decode.py``, ``_swa_tail_len``), so p = 0 there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from pdcalc.core.errors import ConfigError
from pdcalc.model.config import ModelConfig
from pdcalc.model.kv_layout import model_config

_WHEEL = "sglang 0.5.15 (PyPI wheel, tag 0.5.15, 2026-07-10)"
#: The engine code the pool follows, with its words.
SOURCES = {
    "bytes": (f"{_WHEEL}, sglang/srt/model_executor/pool_configurator.py, "
              "DSV4PoolConfigurator._get_bytes_per_full_token: 'kv_bytes = self.qk_nope_head_dim + "
              "self.qk_rope_head_dim * 2 + 8' ... 'c128_state_ratio = 0' ... 'return (self.swa_ratio * kv_bytes "
              "* self.num_layers_total + c4_frac * kv_bytes * self.num_layers_ca4 + 1 / 128 * kv_bytes * "
              "self.num_layers_ca128 + 1 / 4 * indexer_bytes * self.num_layers_ca4 + self.swa_ratio * "
              "c4_state_ratio * c4_state_bytes * self.num_layers_ca4 + ... + self.swa_ratio * c4_state_ratio * "
              "c4_indexer_state_bytes * self.num_layers_ca4)'"),
    "draft": (f"{_WHEEL}, pool_configurator.py, DSV4PoolConfigurator.__init__: 'if self.is_speculative: ... "
              "draft_layers = 1 ... self.bytes_per_full_token *= (target_layers + draft_layers) / "
              "target_layers'"),
    "c128-fixed": (f"{_WHEEL}, pool_configurator.py, DSV4PoolConfigurator._get_c128_state_fixed_bytes: "
                   "'state_pool_size = num_req_slots * self.c128_ring_size; state_rows = state_pool_size + "
                   "self.c128_ring_size + 1; state_rows = ceil_div(state_rows, 128) * 128; state_last_dim = 2 * "
                   "attn_head_dim' ... 'return state_rows * state_last_dim * c128_state_dtype_size * "
                   "self.num_layers_ca128'; _get_num_req_slots: 'return max_running_requests + 1'; "
                   "calculate_pool_sizes: 'available_bytes_for_tokens = max(available_bytes - "
                   "c128_state_fixed_bytes, 0); full_token = int(available_bytes_for_tokens / "
                   "self.bytes_per_full_token)'"),
    "rings": (f"{_WHEEL}, sglang/srt/mem_cache/deepseek_v4_memory_pool.py, get_compress_state_ring_size: "
              "'if is_speculative: return 16 if compress_ratio == 4 else 256 / else: return 8 if compress_ratio "
              "== 4 else 128' (SGLANG_OPT_USE_ONLINE_COMPRESS, whose ring is 1, is off by default: "
              "environ.py 'SGLANG_OPT_USE_ONLINE_COMPRESS = EnvBool(False)'; state dtype "
              "'SGLANG_DSV4_COMPRESS_STATE_DTYPE = EnvStr(\"float32\")')"),
    "swa-ratio": (f"{_WHEEL}, sglang/srt/arg_groups/overrides.py, DeepSeek-V4 overrides: 'if "
                  "server_args.swa_full_tokens_ratio == ServerArgs.swa_full_tokens_ratio: "
                  "overrides[\"swa_full_tokens_ratio\"] = 0.1' (the global default, 0.8, is replaced; "
                  "page_size = 256)"),
}
SOURCES.update({
    "window-lock": (f"{_WHEEL}, sglang/srt/mem_cache/swa_radix_cache.py, SWARadixCache.inc_lock_ref: 'It locks "
                    "the swa_lock_ref for nodes between the [last node, swa_uuid_for_lock], inclusive.' ... 'if "
                    "swa_lock_size < self.sliding_window_size: ... swa_lock_size += len(node.value)' (a node is "
                    "what cache_unfinished_req inserted: the prefilled prompt, or one chunk of it); "
                    "managers/scheduler_components/batch_result_processor.py: 'elif not batch.decoding_reqs or req "
                    "not in batch.decoding_reqs: maybe_cache_unfinished_req(req, self.tree_cache)' after a prompt's "
                    "prefill; environ.py 'SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW = EnvBool(False)' (the "
                    "lock is not released once decode passes the window); mem_cache/registry.py: the hybrid-window "
                    "pool takes SWARadixCache unless the radix cache is disabled"),
    "window-evict": (f"{_WHEEL}, sglang/srt/mem_cache/common.py, free_swa_out_of_window_slots: 'evict_floor = "
                     "max(req.cache_protected_len, ...)' ... 'evict_threshold = pre_len - "
                     "max(sliding_window_size, page_size)' ... 'new_swa_evicted_seqlen = (new_swa_evicted_seqlen // "
                     "page_size) * page_size'; managers/schedule_batch.py, maybe_evict_swa: 'swa_maintenance_step = "
                     "(self.forward_iter or 0) % eviction_interval == 0'; environ.py 'SGLANG_SWA_EVICTION_INTERVAL "
                     "= EnvInt(128)'; arg_groups/overrides.py: 'page_size = 256' (128 when device == \"npu\")"),
})
#: Scheduler steps between two evictions of a window pool (:data:`SOURCES` ``window-evict``).
SWA_EVICTION_INTERVAL = 128
#: The pool's page for DeepSeek-V4, in tokens: on CUDA devices and on Ascend NPUs (:data:`SOURCES`
#: ``window-evict``).
SGLANG_V4_PAGE = {"nvidia": 256, "ascend": 128}
#: ``--swa-full-tokens-ratio`` of a DeepSeek-V4 launch that gives none (:data:`SOURCES` ``swa-ratio``).
SGLANG_SWA_RATIO = 0.1
#: Bytes of one compressor-state value (float32).
STATE_VALUE_BYTES = 4
#: The indexer keys' FP8 quantization block (one float32 scale per block).
INDEXER_QUANT_BLOCK = 128
#: Rows of the 128:1 state pool are allocated in multiples of this.
STATE_ROW_ALIGN = 128


@dataclass(frozen=True)
class SglangV4Pool:
    """SGLang's DeepSeek-V4 pool on one card: bytes per full token, by part and in all, and the bytes set aside
    for the 128:1 compressor states of its request slots."""

    swa_ratio: float
    speculative: bool
    max_running_requests: int
    layers: int                 # L: the main layers (SGLang's slice of compress_ratios)
    parts: dict                 # bytes per full token by pool, before the draft's share
    bytes_per_token: float      # B, the draft's share included
    fixed_bytes: float          # F

    def tokens(self, room_bytes: float) -> float:
        """Full tokens the pool holds in ``room_bytes`` of a card (before SGLang's page rounding)."""
        return max(room_bytes - self.fixed_bytes, 0.0) / self.bytes_per_token

    def requests(self, room_bytes: float, *, context: float, window_held: float) -> float:
        """Requests the pool holds at once in ``room_bytes``: ``context`` full tokens each, and ``window_held``
        tokens each of the window pool (:func:`window_tokens_held`)."""
        full = self.tokens(room_bytes)
        return min(full / context, self.swa_ratio * full / window_held)


def sglang_v4_pool(model: str | Path | ModelConfig, *, swa_ratio: float, speculative: bool,
                   max_running_requests: int) -> SglangV4Pool:
    """SGLang's pool of a DeepSeek-V4 model on one card (module docstring); ``max_running_requests`` per
    scheduler (per DP rank)."""
    cfg = model_config(model)
    if cfg.model_type != "deepseek_v4":
        raise ConfigError(cfg.source, "model_type", f"SGLang's compressed pool is DeepSeek-V4's; got "
                          f"{cfg.model_type!r}")
    if not 0 < swa_ratio <= 1:
        raise ConfigError("spec", "swa_full_tokens_ratio", f"must be in (0, 1], got {swa_ratio!r}")
    layers = cfg.num_hidden_layers
    ratios = [cfg.compress_ratio(i) for i in range(layers)]
    n4, n128 = ratios.count(4), ratios.count(128)
    rope, hd, ihd = cfg.qk_rope_head_dim, cfg.head_dim, cfg.index_head_dim
    K = (hd - rope) + rope * 2 + 8
    I = ihd + ihd // INDEXER_QUANT_BLOCK * 4
    ring4, ring128 = (16, 256) if speculative else (8, 128)
    share = ring4 / cfg.sliding_window
    parts = {
        "swa": swa_ratio * K * layers,
        "c4": K * n4 / 4,
        "c128": K * n128 / 128,
        "indexer": I * n4 / 4,
        "c4_state": swa_ratio * share * 2 * 2 * hd * STATE_VALUE_BYTES * n4,
        "indexer_state": swa_ratio * share * 2 * 2 * ihd * STATE_VALUE_BYTES * n4,
    }
    per_token = sum(parts.values()) * ((layers + 1) / layers if speculative else 1.0)
    rows = (max_running_requests + 1) * ring128 + ring128 + 1
    rows = math.ceil(rows / STATE_ROW_ALIGN) * STATE_ROW_ALIGN
    fixed = rows * 2 * hd * STATE_VALUE_BYTES * n128 if n128 else 0
    return SglangV4Pool(swa_ratio=swa_ratio, speculative=speculative, max_running_requests=max_running_requests,
                        layers=layers, parts=parts, bytes_per_token=per_token, fixed_bytes=float(fixed))


def window_tokens_held(model: str | Path | ModelConfig, *, locked_prompt: float, emitted: float, page: int) -> float:
    """Tokens of SGLang's window pool one running request holds on average (module docstring, ``W``):
    ``locked_prompt`` tokens of its prompt locked by the prefix cache (0 where nothing is locked), the
    ``max(window, page)`` it keeps behind its front and half of what ``emitted`` tokens a step write between two
    evictions."""
    cfg = model_config(model)
    return locked_prompt + max(cfg.sliding_window, page) + SWA_EVICTION_INTERVAL * emitted / 2
