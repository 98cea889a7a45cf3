"""KV cache per sequence of DeepSeek models, as each inference engine stores it.

The unit of account is one sequence (one request) at a given context length ``L`` (tokens already
in the cache). A layer keeps one or more *caches*; each cache is either

- **growing**: one stored entry per ``r`` tokens (``r = 1`` for a plain per-token cache, ``r`` = the
  compression ratio for a compressed cache), or
- **windowed**: a fixed number of rows per sequence, independent of ``L`` (the sliding-window KV of
  DeepSeek-V4 and the state buffers of its KV compressors).

An engine that pages its cache (vLLM, vllm-ascend) hands out whole pages of ``b`` tokens, each
``P`` bytes including alignment padding; the reference implementation keeps one contiguous buffer per
sequence. Bytes of one cache for one sequence:

.. math::

   B(L) =
   \\begin{cases}
     \\lfloor L / r \\rfloor \\, e & \\text{growing, contiguous} \\\\
     \\lceil L / b \\rceil \\, P & \\text{growing, paged} \\\\
     (w / r) \\, e & \\text{windowed, contiguous} \\\\
     (\\lceil w / b \\rceil + 1) \\, P & \\text{windowed, paged}
   \\end{cases}

with ``e`` the bytes of one stored entry and ``w`` the window in tokens. The last line is vLLM's
own bound for a sliding window with one new token per step (``SlidingWindowSpec.max_memory_usage_bytes``:
``cdiv(sliding_window - 1 + new_tokens, block_size) + 1`` pages, zyongye/vllm@434b1bdb
``vllm/v1/kv_cache_interface.py``): the window rarely starts on a page boundary, so it straddles one
page more.
The sequence total is the sum over layers and caches; it is affine in ``L`` up to page rounding:

.. math:: B_\\text{seq}(L) \\approx B_\\text{fixed} + s \\, L

``fixed_bytes`` collects the windowed caches, ``per_token_bytes_asymptotic`` is the slope ``s``.

Layout facts and where they come from
-------------------------------------
DeepSeek-V4-Flash (``config.json``: 43 layers + 1 MTP layer, ``head_dim`` 512, ``qk_rope_head_dim``
64, ``sliding_window`` 128, ``compress_ratios`` = [0, 0, (4, 128) x 20, 4, 0] i.e. 21 ratio-4 layers,
20 ratio-128 layers, 2 window-only main layers and a window-only MTP layer, ``index_head_dim`` 128).

*Reference* -- deepseek-ai/DeepSeek-V4-Flash ``inference/model.py`` at commit 60d8d707 (vendored copy,
read_file id 70831076062):

- ``Attention.__init__``: ``kv_cache`` of shape ``[max_batch_size, window_size + max_seq_len //
  compress_ratio, head_dim]``: a ring buffer of ``window_size`` raw entries followed by the
  compressed entries (``Compressor.kv_cache`` is a view of ``kv_cache[:, win:]``).
- ``Indexer.__init__`` (ratio-4 layers only): ``kv_cache`` of shape ``[max_batch_size, max_seq_len //
  4, index_head_dim]``.
- ``Compressor.__init__``: ``kv_state`` and ``score_state``, each ``[max_batch_size, coff * ratio,
  coff * head_dim]`` in float32 with ``coff = 2`` for ratio 4 (overlapping windows) and 1 otherwise.
  The indexer owns a second compressor with ``head_dim = index_head_dim``.
- Buffers take the default dtype (bf16); the code simulates FP8 for the 448 non-RoPE dims
  (``act_quant(kv[..., :-rd], 64, ...)``) and FP4 for the indexer (``fp4_act_quant``), and says
  twice "kv could also use fp8 format, though current implementation uses bf16".
- ``Transformer.__init__``: MTP blocks get layer ids ``n_layers + i``, hence ``compress_ratios[43] = 0``
  (window only).

*vLLM* -- vllm-project/vllm ``vllm/model_executor/layers/deepseek_v4_attention.py`` at 0a291a2e and
the DeepSeek-V4 branch zyongye/vllm at 434b1bdb (``vllm/v1/kv_cache_interface.py``,
``vllm/v1/attention/backends/mla/sparse_swa.py``, ``vllm/v1/core/kv_cache_utils.py``) and 40a7e032
(``vllm/model_executor/layers/deepseek_compressor.py``):

- Every main and compressed entry is 584 B: 448 FP8 non-RoPE + 64 x 2 B BF16 RoPE + 7 UE8M0 scales
  + 1 pad (``head_bytes`` in ``DeepseekV4MultiHeadLatentAttentionWrapper.__init__``;
  ``MLAAttentionSpec.real_page_size_bytes``: ``storage_block_size * 584``). V4 only supports this
  ``fp8_ds_mla`` format (``DeepseekV4MLAAttention.__init__`` asserts an fp8 cache dtype).
- Compressed caches: ``MLAAttentionSpec(block_size=cache block, compress_ratio=r, alignment=576)``;
  a page holds ``block_size // r`` entries and is rounded up to a multiple of 576 B
  (``_apply_alignment_padding``). The full-attention block is 256 tokens
  (``DeepseekSparseSWABackend.get_preferred_block_size``; "Full MLA: 256" in
  ``unify_hybrid_kv_cache_specs``).
- Indexer cache: ``DeepseekV4IndexerCache``: 132 B per compressed entry (128 FP8 + one fp32 scale,
  ``k_cache_head_dim = head_dim + head_dim // 128 * 4``), same paging and 576 B alignment; the
  MXFP4 option "still allocate[s] the same amount of memory as FP8".
- Sliding window: ``DeepseekV4SWACache``: ``SlidingWindowMLASpec`` with 64-token pages of 584 B
  entries, window ``sliding_window``, on every layer (the attention spec returns ``None`` for
  ratio <= 1 because "SWA part [is] allocated separately").
- Compressor state: ``CompressorStateCache``: ``SlidingWindowMLASpec`` of fp32 rows of
  ``2 * coff * head_dim`` values (kv + score), window ``coff * ratio``, pages of 4 tokens (ratio 4)
  or 8 tokens (ratio 128), 576 B alignment.
- ``_get_kv_cache_groups_uniform_groups`` pads every sliding-window page to the smallest
  full-attention page that is not smaller.
- MTP: ``DeepseekV4Attention.__init__`` gives layers beyond ``num_hidden_layers`` ratio 1 (window only).

*vllm-ascend* (the engine of the V4 article, Atlas 800I A2 = ``AscendDeviceType.A2``) --
vllm-project/vllm-ascend:

- ``vllm_ascend/models/layer/attention/layer.py`` (007fe2aa), ``get_dsv4_block_sizes``: for
  ``cache_config.block_size`` 128 the pages are 128 rows for the compressed and window caches, 8
  tokens for ratio-4 compressor states and 32 for ratio-128 states; state pages are padded to
  16,640 B (indexer state) and 131,072 B (main states). ``DSAAttention.get_kv_cache_spec``:
  compressed cache ``AscendMLAAttentionSpec(block_size=128 * ratio, head_size=512,
  dtype=kv_cache_dtype)``, so a page holds 128 compressed entries and spans ``128 * ratio`` tokens
  (16,384 tokens for ratio 128).
- ``vllm_ascend/attention/dsa_attn_kv_plan.py`` (9391e44c), ``get_dsv4_attn_kv_dtype``: BF16 unless
  the device is an A5; so 1,024 B per entry on 910B.
- ``vllm_ascend/models/deepseek_v4/model.py`` (01d00526), ``AscendDeepseekV4SWACache``: window cache
  in BF16, 512 values per token, 128-token pages, no alignment padding.
- ``vllm_ascend/models/deepseek_v4/indexer.py`` (1afd7712), ``AscendDeepseekV4IndexerCache``: int8
  keys plus one fp16 scale per entry (130 B) on A2/A3, pages of 128 entries (16,640 B).
- ``vllm_ascend/models/deepseek_v4/compressor.py`` (0d7b8981), ``AscendCompressorStateCache``: fp32
  rows of ``2 * coff * head_dim`` values, window ``coff * ratio`` (inherited from vLLM's
  ``CompressorStateCache``), ``page_size_padded`` as above.
- ``vllm_ascend/core/kv_cache_interface.py`` (00004d08): ``AscendMLAAttentionSpec`` page =
  ``block_size // compress_ratio`` rows; ``AscendSlidingWindowMLASpec`` applies no alignment.
- MTP layers: ``vllm_ascend/utils.py`` ``get_dsv4_compress_ratio`` reads ``compress_ratios`` at
  ``num_hidden_layers + i`` (0 for Flash).

DeepSeek-V3 (MLA) -- deepseek-ai/DeepSeek-V3 ``inference/model.py`` (read at 013e2213), ``MLA.__init__``
with the default ``attn_impl = "absorb"``: ``kv_cache [B, S, kv_lora_rank]`` and ``pe_cache [B, S,
qk_rope_head_dim]``, BF16: 576 x 2 = 1,152 B per token per layer, 61 x 1,152 = 70,272 B per token
(arXiv 2505.09343, Table 1). vLLM's MLA pages hold ``head_size = 576`` values of the cache dtype
(``MLAAttentionSpec.real_page_size_bytes``): 1,152 B in BF16, 576 B with ``kv_cache_dtype="fp8"``
(one per-tensor scale, none stored per token); the 656 B ``fp8_ds_mla`` row (512 FP8 + 4 fp32 scales
+ 64 BF16) is the layout of the *sparse* MLA backends (DeepSeek-V3.2), not of V3's dense MLA.

DeepSeek-V2, V2-Lite and Kimi-K2 cache exactly like V3 (the same MLA, their own ``kv_lora_rank``,
``qk_rope_head_dim`` and layer count). DeepSeek-V3.2-Exp keeps V3's MLA latent and adds, per token and
layer, the key of its lightning indexer (:data:`V32_INDEXER_FORMAT`, :func:`indexer_entry_bytes`): 128 FP8
values and one fp32 scale (132 B) in the reference code and in vLLM, 128 BF16 values (256 B) in
vllm-ascend by default. vLLM (v0.33.0) stores the latent in BF16 by default (1,152 B) and as the 656 B
``fp8_ds_mla`` row when asked for FP8; vllm-ascend keeps its 512 + 64 BF16 values in two tensors
(1,152 B). Pages: 64 tokens in vLLM (FlashMLA sparse forces it), 128 in vllm-ascend (the SFA kernel).

Assumptions are named in :data:`ASSUMPTIONS`; each :class:`KVLayout` lists the ones it relies on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pdcalc.core.errors import ConfigError, LayoutError, UnknownNameError
from pdcalc.hardware.cards import Card, get_card
from pdcalc.model.config import ModelConfig, load_config

ENGINES = ("reference", "vllm", "vllm-ascend")

#: The engine whose KV layout a card's family gets by default (:func:`default_engine`). Source: vLLM's own
#: layouts here are those of its CUDA backends (FlashMLA, ``DeepseekSparseSWABackend``), which run on
#: NVIDIA GPUs; vllm-project/vllm-ascend README: "vLLM Ascend (`vllm-ascend`) is a community maintained
#: hardware plugin for running vLLM seamlessly on the Ascend NPU", and the V4 article serves 910B with it.
ENGINE_BY_FAMILY: dict[str, str] = {"nvidia": "vllm", "ascend": "vllm-ascend"}


def default_engine(card: str | Path | Card) -> str:
    """The KV-cache engine a card runs by default: ``"vllm"`` on NVIDIA, ``"vllm-ascend"`` on Ascend.

    Parameters
    ----------
    card : str, Path or Card
        Preset slug (``"h200"``), card TOML file, or :class:`pdcalc.hardware.cards.Card`.

    Returns
    -------
    str
        One of :data:`ENGINES`, from the card's ``family`` (:data:`ENGINE_BY_FAMILY`).

    Source: :data:`ENGINE_BY_FAMILY`.
    """
    return ENGINE_BY_FAMILY[get_card(card).family]


#: Default scheduler block size (``cache_config.block_size``) per engine and model type.
#: The MLA types (``deepseek_v2``, ``kimi_k2``, ``deepseek_v32``) page like ``deepseek_v3``.
DEFAULT_BLOCK_SIZE: dict[tuple[str, str], int] = {
    ("vllm", "deepseek_v4"): 256,        # DeepseekSparseSWABackend.get_preferred_block_size
    ("vllm-ascend", "deepseek_v4"): 128,  # the V4 article's deployment; get_dsv4_block_sizes key
    ("vllm", "deepseek_v3"): 64,          # assumption v3-vllm-block-64
    ("vllm-ascend", "deepseek_v3"): 128,  # vllm-ascend's usual MLA block size
}


def _block_key(cfg: ModelConfig) -> str:
    return "deepseek_v4" if cfg.model_type == "deepseek_v4" else "deepseek_v3"

#: vllm-ascend (non-A5) ``get_dsv4_block_sizes``: block_size -> (mla, swa, c4 state, c128 state) page
#: rows, and (indexer-state, main-state) padded page bytes. layer.py at 007fe2aa.
ASCEND_DSV4_BLOCK_SIZES: dict[int, tuple[tuple[int, int, int, int], tuple[int, int]]] = {
    128: ((128, 128, 8, 32), (16640, 131072)),
    64: ((64, 64, 4, 16), (8320, 65536)),
    32: ((32, 32, 2, 8), (4160, 32768)),
}

VLLM_V4_ENTRY_BYTES = 584        # 448 fp8 + 64 x 2 B bf16 + 7 ue8m0 scales + 1 pad
VLLM_V4_INDEXER_ENTRY_BYTES = 132  # 128 fp8 + one fp32 scale
VLLM_V4_ALIGNMENT_BYTES = 576    # FlashMLA page alignment
VLLM_V4_SWA_BLOCK_TOKENS = 64    # DeepseekV4SWACache.block_size
VLLM_V4_STATE_BLOCK_TOKENS = {4: 4, 128: 8}  # CompressorStateCache.block_size per ratio
VLLM_FP8_DS_MLA_ENTRY_BYTES = 656  # V3.2 sparse MLA row: 512 fp8 + 4 fp32 scales + 64 bf16
ASCEND_INDEXER_ENTRY_BYTES = 130  # 128 int8 + one fp16 scale (A2/A3)

_BF16 = 2
_FP32 = 4


def _round_up(x: float, multiple: int) -> int:
    return int(math.ceil(x / multiple) * multiple)


# ---------------------------------------------------------------------------------------------
# layout
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class CacheSpec:
    """One cache of one layer as an engine stores it (for one sequence).

    Bytes for a sequence at context ``L`` follow the four cases of the module formula.
    """

    name: str               # "window", "compressed", "indexer", "state", "indexer_state", "latent"
    entry_bytes: float      # bytes of one stored row (token, compressed entry or state row), unpadded
    tokens_per_entry: int   # 1, or the compression ratio
    window_tokens: int = 0  # 0: grows with the context; > 0: keeps a window of this many tokens
    block_tokens: int = 0   # tokens per page (scheduler units); 0: contiguous buffer, not paged
    page_bytes: float = 0.0  # bytes of one page as allocated, padding included; 0 if not paged
    source: str = ""        # where the layout fact comes from

    def __post_init__(self):
        if self.entry_bytes <= 0 or self.tokens_per_entry < 1 or self.window_tokens < 0:
            raise LayoutError(f"cache {self.name!r}: entry bytes, ratio and window must be positive")
        if self.window_tokens % self.tokens_per_entry:
            raise LayoutError(f"cache {self.name!r}: window {self.window_tokens} is not a whole "
                              f"number of {self.tokens_per_entry}-token entries")
        if self.block_tokens:
            if self.block_tokens % self.tokens_per_entry:
                raise LayoutError(f"cache {self.name!r}: a {self.block_tokens}-token page does not hold "
                                  f"whole {self.tokens_per_entry}-token entries")
            rows = self.block_tokens // self.tokens_per_entry
            if self.page_bytes < rows * self.entry_bytes:
                raise LayoutError(f"cache {self.name!r}: page of {self.page_bytes} B cannot hold "
                                  f"{rows} entries of {self.entry_bytes} B")

    @property
    def paged(self) -> bool:
        return self.block_tokens > 0

    @property
    def grows(self) -> bool:
        return self.window_tokens == 0

    @property
    def entries_per_page(self) -> int:
        """Stored entries per page (0 if not paged)."""
        return self.block_tokens // self.tokens_per_entry if self.paged else 0

    @property
    def fixed_bytes(self) -> float:
        """Bytes per sequence of a windowed cache (0 for a growing one).

        .. math:: B = (w / r)\\,e \\;\\text{(contiguous)}, \\qquad B = (\\lceil w / b \\rceil + 1)\\,P \\;\\text{(paged)}
        """
        if self.grows:
            return 0.0
        if self.paged:
            return (math.ceil(self.window_tokens / self.block_tokens) + 1) * self.page_bytes
        return self.window_tokens // self.tokens_per_entry * self.entry_bytes

    @property
    def per_token_bytes(self) -> float:
        """Asymptotic bytes per context token of a growing cache (0 for a windowed one).

        .. math:: s = e / r \\;\\text{(contiguous)}, \\qquad s = P / b \\;\\text{(paged)}
        """
        if not self.grows:
            return 0.0
        return self.page_bytes / self.block_tokens if self.paged else self.entry_bytes / self.tokens_per_entry

    def bytes_at(self, context_tokens: np.ndarray) -> np.ndarray:
        """Bytes for one sequence at each context in ``context_tokens`` (an int array)."""
        ctx = np.asarray(context_tokens, dtype=np.int64)
        if not self.grows:
            return np.full(ctx.shape, self.fixed_bytes, dtype=np.float64)
        if self.paged:
            return -(-ctx // self.block_tokens) * float(self.page_bytes)
        return (ctx // self.tokens_per_entry) * float(self.entry_bytes)


@dataclass(frozen=True, kw_only=True)
class LayerKind:
    """All layers of one attention type (same caches), main model or MTP."""

    kind: str                    # "swa", "c4", "c128" (V4) or "mla" (V3)
    compress_ratio: int          # 0: no compressed cache
    n_layers: int                # how many layers of this kind
    mtp: bool                    # True: MTP (next-token prediction) layers
    caches: tuple[CacheSpec, ...]

    @property
    def key(self) -> str:
        """Name in breakdowns: the kind, prefixed with ``mtp:`` for MTP layers."""
        return f"mtp:{self.kind}" if self.mtp else self.kind

    def _cache(self, name: str) -> CacheSpec | None:
        return next((c for c in self.caches if c.name == name), None)

    @property
    def window_entries(self) -> int:
        """Raw tokens kept in the sliding window (0 if none)."""
        c = self._cache("window")
        return c.window_tokens if c else 0

    @property
    def window_entry_bytes(self) -> float:
        """Bytes of one window entry (0 if none)."""
        c = self._cache("window")
        return c.entry_bytes if c else 0.0

    @property
    def main_entry_bytes(self) -> float:
        """Bytes of one entry of the growing main cache (compressed entry, or MLA latent)."""
        c = self._cache("compressed") or self._cache("latent")
        return c.entry_bytes if c else 0.0

    @property
    def indexer_entry_bytes(self) -> float:
        """Bytes of one indexer entry (0 without an indexer)."""
        c = self._cache("indexer")
        return c.entry_bytes if c else 0.0

    @property
    def fixed_bytes_per_layer(self) -> float:
        """Window plus compressor-state bytes of one layer for one sequence."""
        return sum(c.fixed_bytes for c in self.caches)

    @property
    def per_token_bytes_per_layer(self) -> float:
        """Asymptotic bytes per context token of one layer."""
        return sum(c.per_token_bytes for c in self.caches)


@dataclass(frozen=True, kw_only=True)
class KVLayout:
    """The KV cache of one model as one engine lays it out."""

    engine: str                      # one of ENGINES
    model: str                       # model name (preset or file)
    model_type: str                  # the config's model_type
    block_size: int | None           # scheduler block size (cache_config.block_size); None: not paged
    kv_cache_dtype: str              # the engine's cache format, e.g. "bf16", "fp8_ds_mla"
    layer_kinds: tuple[LayerKind, ...]
    assumptions: tuple[str, ...] = ()  # keys of ASSUMPTIONS this layout relies on
    source: str = ""

    def kinds(self, include_mtp: bool = True) -> tuple[LayerKind, ...]:
        return tuple(k for k in self.layer_kinds if include_mtp or not k.mtp)

    def fixed_bytes(self, include_mtp: bool = True) -> float:
        """Per-sequence bytes that do not depend on the context (windows, compressor states)."""
        return sum(k.n_layers * k.fixed_bytes_per_layer for k in self.kinds(include_mtp))

    def per_token_bytes(self, include_mtp: bool = True) -> float:
        """Asymptotic per-sequence bytes per context token (the slope)."""
        return sum(k.n_layers * k.per_token_bytes_per_layer for k in self.kinds(include_mtp))


def model_config(model: str | Path | ModelConfig) -> ModelConfig:
    return model if isinstance(model, ModelConfig) else load_config(model)


def _check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise UnknownNameError("engine", engine, ENGINES)
    return engine


def _v4_layer_counts(cfg: ModelConfig) -> list[tuple[int, bool, int]]:
    """(compress_ratio, is_mtp, count) in first-appearance order, main layers then MTP layers."""
    counts: dict[tuple[int, bool], int] = {}
    n = cfg.num_hidden_layers
    for i in range(n + cfg.num_nextn_predict_layers):
        ratio = cfg.compress_ratio(i)
        if ratio not in (0, 1, 4, 128):
            raise ConfigError(cfg.source, "compress_ratios", f"layer {i}: ratio {ratio} has no known cache "
                              "layout (DeepSeek-V4 uses 0, 4 and 128)")
        key = (0 if ratio <= 1 else ratio, i >= n)
        counts[key] = counts.get(key, 0) + 1
    return [(r, m, c) for (r, m), c in counts.items()]


_KIND = {0: "swa", 4: "c4", 128: "c128"}


def _v4_caches_reference(cfg: ModelConfig, ratio: int) -> tuple[CacheSpec, ...]:
    src = "deepseek-ai/DeepSeek-V4-Flash@60d8d707 inference/model.py"
    hd, ihd, win = cfg.head_dim, cfg.index_head_dim, cfg.sliding_window
    caches = [CacheSpec(name="window", entry_bytes=hd * _BF16, tokens_per_entry=1, window_tokens=win,
                        source=f"{src} Attention.__init__: kv_cache[:, :window_size, head_dim]")]
    if ratio:
        coff = 2 if ratio == 4 else 1
        caches.append(CacheSpec(name="compressed", entry_bytes=hd * _BF16, tokens_per_entry=ratio,
                                source=f"{src} Attention.__init__: kv_cache[:, window_size:] "
                                       "(max_seq_len // compress_ratio entries)"))
        caches.append(CacheSpec(name="state", entry_bytes=2 * coff * hd * _FP32, tokens_per_entry=1,
                                window_tokens=coff * ratio,
                                source=f"{src} Compressor.__init__: kv_state + score_state fp32 "
                                       "[coff*ratio, coff*head_dim]"))
        if ratio == 4:
            caches.append(CacheSpec(name="indexer", entry_bytes=ihd * _BF16, tokens_per_entry=ratio,
                                    source=f"{src} Indexer.__init__: kv_cache [max_seq_len // 4, "
                                           "index_head_dim]"))
            caches.append(CacheSpec(name="indexer_state", entry_bytes=2 * coff * ihd * _FP32,
                                    tokens_per_entry=1, window_tokens=coff * ratio,
                                    source=f"{src} Indexer.__init__: Compressor(args, 4, index_head_dim)"))
    return tuple(caches)


def _v4_caches_vllm(cfg: ModelConfig, ratio: int, block: int, canonical: list[int]) -> tuple[CacheSpec, ...]:
    """vLLM V4 caches; ``canonical`` = the full-attention page sizes used to pad window-type pages."""
    src_interface = "zyongye/vllm@434b1bdb vllm/v1/kv_cache_interface.py"
    src_attn = "vllm-project/vllm@0a291a2e vllm/model_executor/layers/deepseek_v4_attention.py"
    src_comp = "zyongye/vllm@40a7e032 vllm/model_executor/layers/deepseek_compressor.py"
    src_swa = "zyongye/vllm@434b1bdb vllm/v1/attention/backends/mla/sparse_swa.py"
    src_pad = "zyongye/vllm@434b1bdb vllm/v1/core/kv_cache_utils.py _get_kv_cache_groups_uniform_groups"
    align = VLLM_V4_ALIGNMENT_BYTES

    def window_page(raw: float) -> int:  # alignment, then padding to the nearest full-attention page
        aligned = _round_up(raw, align)
        bigger = [p for p in canonical if p >= aligned]
        if not bigger:
            raise LayoutError(f"vLLM block_size {block}: a {aligned} B window page exceeds every "
                              "full-attention page; vLLM asserts the opposite")
        return min(bigger)

    hd, ihd, win = cfg.head_dim, cfg.index_head_dim, cfg.sliding_window
    e = VLLM_V4_ENTRY_BYTES
    swa_b = VLLM_V4_SWA_BLOCK_TOKENS
    caches = [CacheSpec(name="window", entry_bytes=e, tokens_per_entry=1, window_tokens=win,
                        block_tokens=swa_b, page_bytes=window_page(swa_b * e),
                        source=f"{src_swa} DeepseekV4SWACache (64-token pages, 584 B, alignment 576); "
                               f"{src_pad}")]
    if ratio:
        coff = 2 if ratio == 4 else 1
        caches.append(CacheSpec(name="compressed", entry_bytes=e, tokens_per_entry=ratio, block_tokens=block,
                                page_bytes=_round_up(block // ratio * e, align),
                                source=f"{src_attn} DeepseekV4MLAAttention.get_kv_cache_spec; {src_interface} "
                                       "MLAAttentionSpec.real_page_size_bytes (storage_block_size * 584)"))
        sb = VLLM_V4_STATE_BLOCK_TOKENS[ratio]
        row = 2 * coff * hd * _FP32
        caches.append(CacheSpec(name="state", entry_bytes=row, tokens_per_entry=1, window_tokens=coff * ratio,
                                block_tokens=sb, page_bytes=window_page(sb * row),
                                source=f"{src_comp} CompressorStateCache; {src_pad}"))
        if ratio == 4:
            ie = VLLM_V4_INDEXER_ENTRY_BYTES
            caches.append(CacheSpec(name="indexer", entry_bytes=ie, tokens_per_entry=ratio, block_tokens=block,
                                    page_bytes=_round_up(block // ratio * ie, align),
                                    source=f"{src_attn} DeepseekV4Indexer / DeepseekV4IndexerCache "
                                           "(k_cache_head_dim = 128 + 4, alignment 576)"))
            irow = 2 * coff * ihd * _FP32
            caches.append(CacheSpec(name="indexer_state", entry_bytes=irow, tokens_per_entry=1,
                                    window_tokens=coff * ratio, block_tokens=sb, page_bytes=window_page(sb * irow),
                                    source=f"{src_comp} CompressorStateCache (indexer compressor, head_dim "
                                           f"128); {src_pad}"))
    return tuple(caches)


def _v4_caches_ascend(cfg: ModelConfig, ratio: int, block: int) -> tuple[CacheSpec, ...]:
    src_layer = "vllm-project/vllm-ascend@007fe2aa vllm_ascend/models/layer/attention/layer.py"
    src_model = "vllm-project/vllm-ascend@01d00526 vllm_ascend/models/deepseek_v4/model.py"
    src_idx = "vllm-project/vllm-ascend@1afd7712 vllm_ascend/models/deepseek_v4/indexer.py"
    src_comp = "vllm-project/vllm-ascend@0d7b8981 vllm_ascend/models/deepseek_v4/compressor.py"
    (mla_rows, swa_rows, c4_state_rows, c128_state_rows), (pad_t1, pad_t2) = ASCEND_DSV4_BLOCK_SIZES[block]
    hd, ihd, win = cfg.head_dim, cfg.index_head_dim, cfg.sliding_window
    e = hd * _BF16
    caches = [CacheSpec(name="window", entry_bytes=e, tokens_per_entry=1, window_tokens=win,
                        block_tokens=swa_rows, page_bytes=swa_rows * e,
                        source=f"{src_model} AscendDeepseekV4SWACache (bf16 on A2, no alignment)")]
    if ratio:
        coff = 2 if ratio == 4 else 1
        caches.append(CacheSpec(name="compressed", entry_bytes=e, tokens_per_entry=ratio,
                                block_tokens=mla_rows * ratio, page_bytes=mla_rows * e,
                                source=f"{src_layer} DSAAttention.get_kv_cache_spec "
                                       "(block_size = storage rows x ratio)"))
        state_rows = c4_state_rows if ratio == 4 else c128_state_rows
        row = 2 * coff * hd * _FP32
        caches.append(CacheSpec(name="state", entry_bytes=row, tokens_per_entry=1, window_tokens=coff * ratio,
                                block_tokens=state_rows, page_bytes=max(pad_t2, state_rows * row),
                                source=f"{src_comp} AscendCompressorStateCache (page_size_padded = pads[1])"))
        if ratio == 4:
            ie = ASCEND_INDEXER_ENTRY_BYTES
            caches.append(CacheSpec(name="indexer", entry_bytes=ie, tokens_per_entry=ratio,
                                    block_tokens=mla_rows * ratio, page_bytes=mla_rows * ie,
                                    source=f"{src_idx} AscendDeepseekV4IndexerCache (int8 + fp16 scale)"))
            irow = 2 * coff * ihd * _FP32
            caches.append(CacheSpec(name="indexer_state", entry_bytes=irow, tokens_per_entry=1,
                                    window_tokens=coff * ratio, block_tokens=c4_state_rows,
                                    page_bytes=max(pad_t1, c4_state_rows * irow),
                                    source=f"{src_comp} AscendCompressorStateCache (state_dim 512 -> pads[0])"))
    return tuple(caches)


def _v4_layout(cfg: ModelConfig, engine: str, block_size: int | None, kv_cache_dtype: str | None) -> KVLayout:
    fmt = {"reference": "bf16", "vllm": "fp8_ds_mla", "vllm-ascend": "bf16"}[engine]
    if kv_cache_dtype not in (None, "auto", fmt):
        raise LayoutError(f"DeepSeek-V4 on {engine} stores its KV cache as {fmt}; "
                          f"kv_cache_dtype {kv_cache_dtype!r} is not modelled")
    counts = _v4_layer_counts(cfg)
    common = ("window-full-at-any-context",)
    if engine == "reference":
        if block_size is not None:
            raise LayoutError("the reference implementation does not page its cache; block_size must be None")
        kinds = tuple(LayerKind(kind=_KIND[r], compress_ratio=r, n_layers=c, mtp=m,
                                caches=_v4_caches_reference(cfg, r)) for r, m, c in counts)
        return KVLayout(engine=engine, model=cfg.name, model_type=cfg.model_type, block_size=None,
                        kv_cache_dtype=fmt, layer_kinds=kinds,
                        assumptions=("reference-buffer-sized-to-context", "reference-bf16", *common),
                        source="deepseek-ai/DeepSeek-V4-Flash@60d8d707 inference/model.py")
    block = block_size if block_size is not None else DEFAULT_BLOCK_SIZE[(engine, _block_key(cfg))]
    if engine == "vllm":
        if block % 128 or block < 256:
            raise LayoutError(f"vLLM block_size {block} for DeepSeek-V4: must be a multiple of 128 (a page "
                              "holds whole ratio-128 entries) and at least 256 (the 64-token window page must "
                              "fit under the ratio-4 page)")
        ratios = {r for r, _, _ in counts}
        canonical = sorted({_round_up(block // r * VLLM_V4_ENTRY_BYTES, VLLM_V4_ALIGNMENT_BYTES)
                            for r in ratios if r}
                           | ({_round_up(block // 4 * VLLM_V4_INDEXER_ENTRY_BYTES, VLLM_V4_ALIGNMENT_BYTES)}
                              if 4 in ratios else set()))
        kinds = tuple(LayerKind(kind=_KIND[r], compress_ratio=r, n_layers=c, mtp=m,
                                caches=_v4_caches_vllm(cfg, r, block, canonical)) for r, m, c in counts)
        return KVLayout(engine=engine, model=cfg.name, model_type=cfg.model_type, block_size=block,
                        kv_cache_dtype=fmt, layer_kinds=kinds,
                        assumptions=(*common, "decode-one-new-token", "no-prefix-sharing", "no-pool-tuple-padding"),
                        source="vllm-project/vllm@0a291a2e, zyongye/vllm@434b1bdb (DeepSeek-V4 support)")
    if block not in ASCEND_DSV4_BLOCK_SIZES:
        raise LayoutError(f"vllm-ascend block_size {block} for DeepSeek-V4: supported "
                          f"{sorted(ASCEND_DSV4_BLOCK_SIZES)} (get_dsv4_block_sizes)")
    kinds = tuple(LayerKind(kind=_KIND[r], compress_ratio=r, n_layers=c, mtp=m,
                            caches=_v4_caches_ascend(cfg, r, block)) for r, m, c in counts)
    return KVLayout(engine=engine, model=cfg.name, model_type=cfg.model_type, block_size=block,
                    kv_cache_dtype=fmt, layer_kinds=kinds,
                    assumptions=(*common, "decode-one-new-token", "no-prefix-sharing", "ascend-a2"),
                    source="vllm-project/vllm-ascend (files and commits in each cache's source)")


_V3_DTYPES = {"auto": 2.0, "bf16": 2.0, "fp8": 1.0}

#: DeepSeek-V3.2 lightning-indexer key per token and layer, per engine: (value bytes, scale bytes per
#: scale, values per scale). Each entry is ``d_I`` values plus one scale per group of values.
V32_INDEXER_FORMAT: dict[str, tuple[float, float, int, str]] = {
    "reference": (1.0, 4.0, 128, "deepseek-ai/DeepSeek-V3.2-Exp@3b99a535 inference/model.py Indexer.__init__ "
                                 "(L448-449): k_cache float8_e4m3fn [max_seq_len, index_head_dim] + k_scale_cache "
                                 "float32 [max_seq_len, index_head_dim // block_size], block_size 128"),
    "vllm": (1.0, 4.0, 128, "vLLM v0.33.0 vllm/models/deepseek_v32/attention.py L91-100 (v0.11.0: "
                            "model_executor/models/deepseek_v2.py L767-775): DeepseekV32IndexerCache(head_dim = "
                            "head_dim + head_dim // quant_block_size * 4, dtype uint8), 64-token pages"),
    "vllm-ascend": (2.0, 0.0, 128, "vllm-project/vllm-ascend@182b75ea vllm_ascend/core/kv_cache_interface.py "
                                   "L137-144 and worker/model_runner_v1.py L4730-4746: AscendSFAIndexerCacheSpec("
                                   "head_size=index_head_dim, dtype=kv_cache_dtype, scale_dim=0), BF16 keys without "
                                   "a scale unless enable_sparse_li_c8"),
}


def indexer_entry_bytes(model: str | Path | ModelConfig, engine: str = "reference") -> float:
    """DeepSeek-V3.2: bytes of one token's indexer key on one layer in ``engine``.

    .. math:: e_I = d_I\\,s_\\text{value} + \\lceil d_I / g \\rceil\\,s_\\text{scale}

    with the value and scale sizes and the group ``g`` of :data:`V32_INDEXER_FORMAT` (reference and vLLM:
    128 FP8 values and one fp32 scale, 132 B).
    """
    cfg = model_config(model)
    if not cfg.sparse:
        raise ConfigError(cfg.source, "model_type", f"model_type {cfg.model_type!r} has no lightning indexer "
                          "(deepseek_v32 has)")
    value, scale, group, _ = V32_INDEXER_FORMAT[_check_engine(engine)]
    return cfg.index_head_dim * value + math.ceil(cfg.index_head_dim / group) * scale


def _v3_layout(cfg: ModelConfig, engine: str, block_size: int | None, kv_cache_dtype: str | None) -> KVLayout:
    width = cfg.kv_lora_rank + cfg.qk_rope_head_dim  # 576 for DeepSeek-V3
    dtype = kv_cache_dtype or "auto"
    allowed = {"reference": ("auto", "bf16"), "vllm": ("auto", "bf16", "fp8", "fp8_ds_mla"),
               "vllm-ascend": ("auto", "bf16")}[engine]
    if dtype not in allowed:
        raise LayoutError(f"{cfg.model_type} on {engine}: kv_cache_dtype {dtype!r} not modelled "
                          f"(modelled: {', '.join(allowed)})")
    if dtype == "fp8_ds_mla" or (cfg.sparse and engine == "vllm" and dtype == "fp8"):
        # vLLM serves any quantized cache of a sparse-MLA model (V3.2) as fp8_ds_mla: v0.33.0
        # layers/attention/mla_attention.py _canonicalize_sparse_mla_kv_cache_dtype (L359-369)
        entry = float(VLLM_FP8_DS_MLA_ENTRY_BYTES)
        src = ("zyongye/vllm@434b1bdb vllm/v1/kv_cache_interface.py MLAAttentionSpec.real_page_size_bytes "
               "(block_size * 656; the sparse-MLA layout of DeepSeek-V3.2, not used by V3's dense MLA)")
    else:
        entry = width * _V3_DTYPES[dtype]
        src = ("deepseek-ai/DeepSeek-V3 inference/model.py MLA.__init__ (kv_cache + pe_cache, absorb)"
               if engine == "reference" else
               "vLLM MLAAttentionSpec.real_page_size_bytes: block * heads(1) * head_size(576) * dtype size")
    assumptions: tuple[str, ...] = ("no-prefix-sharing",)
    if engine == "reference":
        if block_size is not None:
            raise LayoutError("the reference implementation does not page its cache; block_size must be None")
        block, page = 0, 0.0
        assumptions = ("reference-buffer-sized-to-context", "reference-bf16")
    else:
        block = block_size if block_size is not None else DEFAULT_BLOCK_SIZE[(engine, _block_key(cfg))]
        if block < 1:
            raise LayoutError(f"block_size must be positive, got {block}")
        page = block * entry
        if engine == "vllm" and block_size is None:
            assumptions = (*assumptions, "v3-vllm-block-64")
    caches = [CacheSpec(name="latent", entry_bytes=entry, tokens_per_entry=1, block_tokens=block,
                        page_bytes=page, source=src)]
    if cfg.sparse:
        ie = indexer_entry_bytes(cfg, engine)
        caches.append(CacheSpec(name="indexer", entry_bytes=ie, tokens_per_entry=1, block_tokens=block,
                                page_bytes=block * ie, source=V32_INDEXER_FORMAT[engine][3]))
    kinds = [LayerKind(kind="mla", compress_ratio=0, n_layers=cfg.num_hidden_layers, mtp=False,
                       caches=tuple(caches))]
    if cfg.num_nextn_predict_layers:
        kinds.append(LayerKind(kind="mla", compress_ratio=0, n_layers=cfg.num_nextn_predict_layers, mtp=True,
                               caches=tuple(caches)))
    return KVLayout(engine=engine, model=cfg.name, model_type=cfg.model_type, block_size=block or None,
                    kv_cache_dtype="bf16" if dtype == "auto" else dtype, layer_kinds=tuple(kinds),
                    assumptions=assumptions, source=src)


def engine_layout(engine: str, model: str | Path | ModelConfig, *, block_size: int | None = None,
                  kv_cache_dtype: str | None = None) -> KVLayout:
    """The KV cache layout of ``model`` in ``engine``: per layer kind, its caches and their bytes.

    Parameters
    ----------
    engine : str
        One of :data:`ENGINES`.
    model : str, Path or ModelConfig
        A preset name (``"deepseek-v3"``, ``"deepseek-v4-flash"``), a ``config.json`` path, or a config.
    block_size : int, optional
        The scheduler block size (``cache_config.block_size``); ``None``: the engine's default
        (:data:`DEFAULT_BLOCK_SIZE`). Must be ``None`` for the unpaged reference.
    kv_cache_dtype : str, optional
        DeepSeek-V3 on vLLM only: ``"auto"``/``"bf16"`` (2 B per value), ``"fp8"`` (1 B) or
        ``"fp8_ds_mla"`` (656 B rows). V4 formats are fixed per engine.

    Returns
    -------
    KVLayout

    Notes
    -----
    Per layer and sequence, the growing caches add ``e / r`` bytes per token (or ``P / b`` when paged)
    and the windowed ones a constant:

    .. math:: B_\\text{layer}(L) = \\sum_\\text{growing} \\lceil L / b \\rceil P + \\sum_\\text{windowed} (\\lceil w / b \\rceil + 1) P

    Source: see the module docstring; every :class:`CacheSpec` carries its own ``source``.
    """
    _check_engine(engine)
    cfg = model_config(model)
    if cfg.model_type == "deepseek_v4":
        return _v4_layout(cfg, engine, block_size, kv_cache_dtype)
    return _v3_layout(cfg, engine, block_size, kv_cache_dtype)
