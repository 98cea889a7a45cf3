"""What a serving engine schedules when its launch leaves the limits unset: sequences a DP rank decodes at once
and prompt tokens it takes per step. A served run is held to these (:func:`pdcalc.perf.served.served_tables`)
as well as to the KV cache a card holds.

Each rule is the engine's own code, quoted in :data:`SOURCES`:

- vLLM (and the engines built on its scheduler: vllm-ascend, omni-infer): ``max_num_seqs`` and
  ``max_num_batched_tokens`` of the API server, :data:`VLLM_LARGE` on a device of at least
  :data:`VLLM_LARGE_DEVICE_BYTES` that is not an A100, else :data:`VLLM_SMALL` (``EngineArgs.get_batch_defaults``);
  Ascend's 64 GiB devices take the second row.
- SGLang: ``--chunked-prefill-size`` by device memory (:data:`SGLANG_CHUNK`), divided over the DP ranks under DP
  attention; DeepSeek-V4 is admitted up to ``max_running_requests`` :data:`SGLANG_V4_RUNNING` per server, divided
  over the DP ranks. Other models are held by their KV cache only. On Ascend NPUs SGLang takes its NPU defaults,
  which are not read here: the chunk is the fallback. Where a launch gives no ``--mem-fraction-static``, SGLang
  sets one from its reserve for activations and CUDA graphs (:func:`sglang_mem_fraction`, NVIDIA cards).
- Other engines: :data:`pdcalc.perf.served.DEFAULT_MAX_SEQS` and ``DEFAULT_TOKEN_BUDGET``.

A limit the spec states (``max_num_seqs``, ``max_num_batched_tokens``, per DP rank) always wins.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdcalc.core.units import GiB, MiB
from pdcalc.hardware.cards import get_card
from pdcalc.model.config import load_config

#: The engine code each rule reads, with its words.
SOURCES = {
    "vllm": ("vllm-project/vllm, vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults: 'if device_memory >= 70 "
             "* GiB_bytes and \"a100\" not in device_name: ... UsageContext.OPENAI_API_SERVER: 8192 ... "
             "UsageContext.OPENAI_API_SERVER: 1024 ... else: ... UsageContext.OPENAI_API_SERVER: 2048 ... "
             "UsageContext.OPENAI_API_SERVER: 256'"),
    "sglang-chunk": ("sgl-project/sglang, python/sglang/srt/server_args.py, _handle_gpu_memory_settings: "
                     "'elif gpu_mem < 160 * 1024: # H20, H200 ... self.chunked_prefill_size = 8192 ... else: # "
                     "B200, MI300 ... self.chunked_prefill_size = 16384'; under DP attention the size is divided "
                     "by dp_size"),
    "sglang-v4": ("sgl-project/sglang, python/sglang/srt/arg_groups/deepseek_v4_hook.py, apply_deepseek_v4_defaults: "
                  "'if cfg.max_running_requests is None: declare_resolution(server_args, "
                  "\"apply_deepseek_v4_defaults\", max_running_requests=256'; the scheduler of each DP rank takes "
                  "max_running_requests // dp_size"),
}

#: vLLM: the device memory from which the larger defaults apply, and the two rows (sequences, tokens).
VLLM_LARGE_DEVICE_BYTES = 70 * GiB
VLLM_LARGE = (1024, 8192)
VLLM_SMALL = (256, 2048)
#: SGLang's ``--chunked-prefill-size`` by device memory: (below this many bytes, size), then the largest.
SGLANG_CHUNK = ((20 * GiB, 2048), (35 * GiB, 2048), (60 * GiB, 4096), (160 * GiB, 8192))
SGLANG_CHUNK_LARGEST = 16384
#: SGLang's admission limit for DeepSeek-V4 (per server, over its DP ranks).
SGLANG_V4_RUNNING = 256
#: SGLang's decode CUDA-graph batch by device memory: (below this many bytes, batch below TP 4, batch from TP 4),
#: then :data:`SGLANG_GRAPH_BS_LARGEST`.
SGLANG_GRAPH_BS = ((20 * GiB, 8, 8), (35 * GiB, 24, 80), (60 * GiB, 32, 160), (90 * GiB, 256, 512),
                   (160 * GiB, 256, 512))
SGLANG_GRAPH_BS_LARGEST = 512
#: ``--mem-fraction-static`` when a launch gives none (SGLang 0.5.15, server_args.py, _handle_gpu_memory_settings;
#: all in MiB): 'reserved_mem = 512' ... 'reserved_mem += max(self.chunked_prefill_size, 2048) * 1.5' (a decode
#: server: 'max(running_requests * draft_tokens, 2048) * 1.5') ... 'reserved_mem += decode_cuda_graph_config.max_bs
#: * 2' (not on a prefill server) ... 'reserved_mem += self.tp_size * self.pp_size / 8 * 1024' ... under DP attention
#: 'reserved_mem += decode_cuda_graph_config.max_bs * self.dp_size * 3' and, above a batch of 300, '* 1.5' more ...
#: 'if gpu_mem is not None and gpu_mem > 60 * 1024: reserved_mem = max(reserved_mem, 10 * 1024)' ...
#: 'self.mem_fraction_static = round((gpu_mem - reserved_mem) / gpu_mem, 3)'. The prefill CUDA graph adds nothing
#: for DeepSeek models (_disable_breakable_cudagraph_if_incompatible: 'MLA attention', 'DeepSeek-V4'); DeepEP's
#: 2 GiB is not added (the spec names no all-to-all backend).
SGLANG_RESERVE_FLOOR_MIB = 10 * 1024
SGLANG_RESERVE_FLOOR_FROM = 60 * GiB
#: Engines that run vLLM's scheduler and its defaults.
VLLM_FAMILY = ("vllm", "vllm-ascend", "omni-infer")


@dataclass(frozen=True)
class Limits:
    """A DP rank's limits: sequences it decodes at once (``None``: its KV cache only) and prompt tokens per
    step, and where each came from."""

    max_seqs: int | None
    budget: int
    seqs_from: str
    budget_from: str


def sglang_chunk(mem_bytes: float) -> int:
    """SGLang's ``--chunked-prefill-size`` on a device of ``mem_bytes`` (:data:`SGLANG_CHUNK`), per server."""
    return next((size for below, size in SGLANG_CHUNK if mem_bytes < below), SGLANG_CHUNK_LARGEST)


def _is_v4(model) -> bool:
    return load_config(model).model_type == "deepseek_v4"


def engine_limits(spec, role, *, fallback_seqs: int, fallback_budget: int) -> Limits:
    """The limits of one DP rank of ``role`` in ``spec`` (:class:`pdcalc.layout.served.ServedSpec`)."""
    card = get_card(spec.card)
    mem = card.usable_base_bytes                 # what the framework reports, as the engines read it
    dp = max(role.dp, 1)
    seqs, budget = fallback_seqs, fallback_budget
    seqs_from = budget_from = "assumed (the engine's default is not read here)"
    if spec.engine in VLLM_FAMILY:
        large = mem >= VLLM_LARGE_DEVICE_BYTES and "a100" not in card.name
        seqs, budget = VLLM_LARGE if large else VLLM_SMALL
        seqs_from = budget_from = SOURCES["vllm"]
    elif spec.engine == "sglang":
        if card.family == "nvidia":
            budget = sglang_chunk(mem)
            budget_from = SOURCES["sglang-chunk"]
        budget = max(budget // dp, 1)
        if _is_v4(spec.model):
            seqs, seqs_from = max(SGLANG_V4_RUNNING // dp, 1), SOURCES["sglang-v4"]
        else:
            seqs, seqs_from = None, "the KV cache (SGLang admits what its KV pool holds)"
    if role.max_num_seqs:
        seqs, seqs_from = role.max_num_seqs, "the spec"
    if role.max_num_batched_tokens:
        budget, budget_from = role.max_num_batched_tokens, "the spec"
    return Limits(max_seqs=seqs, budget=int(budget), seqs_from=seqs_from, budget_from=budget_from)


def sglang_graph_bs(mem_bytes: float, tp: int) -> int:
    """SGLang's decode CUDA-graph batch on a device of ``mem_bytes`` with ``tp`` ranks per server
    (:data:`SGLANG_GRAPH_BS`)."""
    return next(((small if tp < 4 else large) for below, small, large in SGLANG_GRAPH_BS if mem_bytes < below),
                SGLANG_GRAPH_BS_LARGEST)


def sglang_mem_fraction(spec, name: str, role) -> float | None:
    """SGLang's ``--mem-fraction-static`` for a role whose launch gives none (:data:`SGLANG_RESERVE_FLOOR_MIB` for
    the rule), on an NVIDIA card; None elsewhere (SGLang's NPU defaults are not read here). ``name`` is the
    role's table: a ``decode`` or ``prefill`` role is a disaggregated server of that mode."""
    card = get_card(spec.card)
    if spec.engine != "sglang" or card.family != "nvidia":
        return None
    mem = card.usable_base_bytes
    mib = mem / MiB
    dp = max(role.dp, 1)
    tp_size = role.tp * dp                       # SGLang's --tp spans the DP-attention ranks
    graph_bs = sglang_graph_bs(mem, tp_size)
    chunk = role.max_num_batched_tokens * dp if role.max_num_batched_tokens else sglang_chunk(mem)
    reserved = 512.0
    if name == "decode":
        running = role.max_num_seqs * dp if role.max_num_seqs else graph_bs
        drafts = spec.mtp.draft_tokens + 1 if spec.mtp is not None else 1
        reserved += max(running * drafts, 2048) * 1.5
    else:
        reserved += max(chunk, 2048) * 1.5
    if name != "prefill":
        reserved += graph_bs * 2
    reserved += tp_size / 8 * 1024
    if dp > 1 and name != "prefill":
        reserved += graph_bs * dp * 3
        if graph_bs > 300:
            reserved += graph_bs * dp * 1.5
    if mem > SGLANG_RESERVE_FLOOR_FROM:
        reserved = max(reserved, SGLANG_RESERVE_FLOOR_MIB)
    return round((mib - reserved) / mib, 3)
