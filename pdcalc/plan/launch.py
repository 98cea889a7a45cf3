"""The vllm-ascend launch settings of a split: the flags of each role, as the engine's DeepSeek-V4
tutorial deploys them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from pdcalc.plan.roles import seq_kv_bytes
from pdcalc.plan.workload import Setup, Workload

#: The published deployment whose launch settings the flags follow (vllm-ascend tutorial, Atlas 800 A2).
TUTORIAL = "v4-flash-910b-pd"
#: KV-transfer connector and the role of each side, as the tutorial deploys them (reference notes:
#: "MooncakeHybridConnector (P kv_producer, D kv_consumer)").
KV_CONNECTOR = "MooncakeHybridConnector"
KV_ROLES = {"P": "kv_producer", "D": "kv_consumer"}


# ------------------------------------------------------------------------------------------ launch settings
@dataclass(frozen=True, kw_only=True)
class Launch:
    """The vllm-ascend settings of one role (every instance of the role runs the same).

    ``data_parallel_size`` and ``tensor_parallel_size`` per instance, so that ``instances x dp x tp`` is
    the role's cards; ``--enable-expert-parallel`` makes the EP group ``dp x tp`` (the instance).
    ``max_num_seqs`` and ``max_num_batched_tokens`` are per DP rank."""

    role: str                        # "P" or "D"
    instances: int
    data_parallel_size: int
    tensor_parallel_size: int
    gpu_memory_utilization: float
    max_num_seqs: int
    max_model_len: int
    max_num_batched_tokens: int
    speculative_tokens: int          # MTP draft tokens per step (0: no MTP)
    cards_per_node: int
    kv_connector: str = KV_CONNECTOR

    @property
    def kv_role(self) -> str:
        return KV_ROLES[self.role]

    @property
    def expert_parallel_size(self) -> int:
        return self.data_parallel_size * self.tensor_parallel_size

    @property
    def cards(self) -> int:
        return self.instances * self.expert_parallel_size

    @property
    def nodes_per_instance(self) -> int:
        return math.ceil(self.expert_parallel_size / self.cards_per_node)

    @property
    def dp_size_local(self) -> int:
        """DP ranks on one node (the tutorial's ``--dp-size-local``)."""
        return max(1, min(self.data_parallel_size, self.cards_per_node // self.tensor_parallel_size))


def launches(setup: Setup, work: Workload, row, p_room_bytes: float, speculative_tokens: int,
              cards_per_node: int) -> tuple[Launch, Launch]:
    """The P and D settings that realise a split (a row of the plan).

    Both roles: ``--max-model-len`` = prompt + output tokens, ``--gpu-memory-utilization`` = the setup's.
    D: ``--max-num-seqs`` = the sequences in flight per DP rank, rounded up (never above the rank's KV
    capacity, since the split is feasible); ``--max-num-batched-tokens`` = that times one token plus the
    MTP draft's (the tutorial's 60 = 30 x 2). P: ``--max-num-batched-tokens`` = one whole prompt per
    step, as the throughput model's prefill; ``--max-num-seqs`` = the prompts whose KV cache fits the P
    card's room, where finished prompts wait for the transfer."""
    ctx = work.prompt_tokens + work.output_tokens
    d_dp = int(row["d_size"]) // int(row["d_tp"])
    d_seqs = max(1, math.ceil(float(row["concurrency"]) / (int(row["d_instances"]) * d_dp) - 1e-9))
    p_seqs = max(1, int(p_room_bytes // float(seq_kv_bytes(setup, work.prompt_tokens))))
    common = {"gpu_memory_utilization": setup.utilization, "max_model_len": ctx, "cards_per_node": cards_per_node,
              "speculative_tokens": speculative_tokens}
    p = Launch(role="P", instances=int(row["p_instances"]), data_parallel_size=int(row["p_size"]) // int(row["p_tp"]),
               tensor_parallel_size=int(row["p_tp"]), max_num_seqs=p_seqs,
               max_num_batched_tokens=work.prompt_tokens, **common)
    d = Launch(role="D", instances=int(row["d_instances"]), data_parallel_size=d_dp,
               tensor_parallel_size=int(row["d_tp"]), max_num_seqs=d_seqs,
               max_num_batched_tokens=d_seqs * (1 + speculative_tokens), **common)
    return p, d


def launch_script(p: Launch, d: Launch, model_path: str = "$MODEL_PATH") -> str:
    """The flags of both roles as shell commands (ASCII only, to copy): one ``vllm serve`` per role, run on
    every DP rank of every instance of it, with the tutorial's ``launch_online_dp.py`` line that starts the
    ranks of one node."""
    extra = {"prefill": {"dp_size": p.data_parallel_size, "tp_size": p.tensor_parallel_size},
             "decode": {"dp_size": d.data_parallel_size, "tp_size": d.tensor_parallel_size}}
    lines = []
    for x in (p, d):
        kv = {"kv_connector": x.kv_connector, "kv_role": x.kv_role, "kv_connector_extra_config": extra}
        lines += [
            f"# {x.role}: {x.instances} instance{'s' if x.instances > 1 else ''} x {x.expert_parallel_size} cards "
            f"({x.nodes_per_instance} node{'s' if x.nodes_per_instance > 1 else ''} each), EP group "
            f"{x.expert_parallel_size} = DP {x.data_parallel_size} x TP {x.tensor_parallel_size}",
            f"# start the ranks of each node: python launch_online_dp.py --dp-size {x.data_parallel_size} "
            f"--tp-size {x.tensor_parallel_size} --dp-size-local {x.dp_size_local} --dp-rank-start <first rank on "
            f"the node> --dp-address <instance head IP>",
            f"vllm serve {model_path} \\",
            f"  --data-parallel-size {x.data_parallel_size} \\",
            f"  --tensor-parallel-size {x.tensor_parallel_size} \\",
            "  --enable-expert-parallel \\",
            f"  --gpu-memory-utilization {x.gpu_memory_utilization:g} \\",
            f"  --max-model-len {x.max_model_len} \\",
            f"  --max-num-seqs {x.max_num_seqs} \\",
            f"  --max-num-batched-tokens {x.max_num_batched_tokens} \\",
        ]
        if x.speculative_tokens:
            spec = {"num_speculative_tokens": x.speculative_tokens, "method": "mtp"}
            lines.append(f"  --speculative-config '{json.dumps(spec)}' \\")
        lines += [f"  --kv-transfer-config '{json.dumps(kv)}'", ""]
    lines.append("# plus the tutorial's per-rank and model flags (--data-parallel-rank/-address/-rpc-port, "
                 "--quantization ascend, --block-size, parsers, kv_port and engine_id per instance)")
    return "\n".join(lines)


def colocated_script(setup: Setup, work: Workload, row, model_path: str = "$MODEL_PATH") -> str:
    """The flags of a co-located layout (a row of :attr:`pdcalc.plan.search.Plan.aggregated`) as shell commands: one
    ``vllm serve`` per instance, prefill and decode on the same cards with chunked prefill, no KV transfer.

    ``--max-num-seqs`` = the sequences in flight per DP rank, rounded up; ``--max-num-batched-tokens`` = one
    token per sequence plus the MTP draft's, plus the prompt chunk the planner admits per step (rounded up);
    ``--max-model-len`` = prompt + output tokens."""
    dp = int(row["size"]) // int(row["tp"])
    spec_tokens = int(setup.mtp)
    seqs = max(1, math.ceil(float(row["concurrency"]) / (int(row["instances"]) * dp) - 1e-9))
    chunk = max(1, math.ceil(float(row["chunk_tokens"]) - 1e-9))
    lines = [f"# {int(row['instances'])} instance{'s' if int(row['instances']) > 1 else ''} x {int(row['size'])} cards, "
             f"prefill and decode on the same cards (chunked prefill), EP group = DP {dp} x TP {int(row['tp'])}",
             f"vllm serve {model_path} \\",
             f"  --data-parallel-size {dp} \\",
             f"  --tensor-parallel-size {int(row['tp'])} \\",
             "  --enable-expert-parallel \\",
             "  --enable-chunked-prefill \\",
             f"  --gpu-memory-utilization {setup.utilization:g} \\",
             f"  --max-model-len {work.prompt_tokens + work.output_tokens} \\",
             f"  --max-num-seqs {seqs} \\",
             f"  --max-num-batched-tokens {seqs * (1 + spec_tokens) + chunk}"]
    if spec_tokens:
        lines[-1] += " \\"
        lines.append(f"  --speculative-config '{json.dumps({'num_speculative_tokens': spec_tokens, 'method': 'mtp'})}'")
    return "\n".join(lines)
