"""The vllm-ascend launch commands of a layout: what the engine's DeepSeek tutorials run, with pdcalc's sizes.

A P/D split runs as the DeepSeek-V4-Flash tutorial's Atlas 800 A2 P/D deployment does: one ``vllm serve`` per DP
rank (external data parallelism), each node starting its ranks with ``launch_online_dp.py`` through the role's
``run_dp_template.sh``, the Mooncake connector between the roles and a proxy in front. A co-located layout runs as
the DeepSeek-V3.1 tutorial's multi-node data-parallel deployment: one ``vllm serve`` per node, the first with the
API server, the others ``--headless`` with their first DP rank.

What pdcalc computes (DP and TP sizes, ``--max-num-seqs``, ``--max-num-batched-tokens``, ``--max-model-len``,
``--gpu-memory-utilization``, MTP draft tokens, the node of every rank) comes from the plan; the rest is copied
from the tutorials (``pdcalc/data/launch_tutorials.toml``, each setting with its file, lines and commit). Every
flag and JSON key printed is one the engine accepts (``pdcalc/data/engine_args.toml``, vllm 0.27.1 and
vllm-ascend; ``tests/test_launch.py``).

Source: vllm-project/vllm-ascend@182b75ea docs/source/tutorials/models/DeepSeek-V4-Flash.md (5.2.2),
DeepSeek-V3.1.md (5.2, 5.3), docs/source/tutorials/features/pd_disaggregation_mooncake_multi_node.md.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from pdcalc.layout.memory import activation_bytes
from pdcalc.model.inventory import get_inventory
from pdcalc.model.quant import V4_ASCEND_W4A8, V4_ASCEND_W8A8
from pdcalc.plan.roles import p_step_tokens, seq_kv_bytes
from pdcalc.plan.workload import Setup, Workload

#: The published deployment whose launch settings the P/D flags follow (vllm-ascend tutorial, Atlas 800 A2).
TUTORIAL = "v4-flash-910b-pd"
#: The role of each side in the KV transfer (P produces, D consumes: the tutorials' ``kv_role``).
KV_ROLES = {"P": "kv_producer", "D": "kv_consumer"}
#: Checkpoint schemes that are msModelSlim's and load with ``--quantization ascend``.
ASCEND_SCHEMES = ("w8a8", "w4a8", V4_ASCEND_W8A8, V4_ASCEND_W4A8)
#: Widest line of a printed command (the book shows it in a code cell output).
WIDTH = 112


@cache
def tutorials() -> dict:
    """``pdcalc/data/launch_tutorials.toml``: the settings copied from the tutorials, with their sources."""
    with resources.files("pdcalc").joinpath("data", "launch_tutorials.toml").open("rb") as fh:
        return tomllib.load(fh)


@cache
def engine_args() -> dict:
    """``pdcalc/data/engine_args.toml``: the flags and JSON keys the engine's programs accept, with their sources."""
    with resources.files("pdcalc").joinpath("data", "engine_args.toml").open("rb") as fh:
        return tomllib.load(fh)


def family_of(model) -> str:
    """The tutorial family a model launches with: ``deepseek_v4`` for a DeepSeek-V4 config, else ``deepseek_v3``."""
    cfg = get_inventory(model).config
    return "deepseek_v4" if cfg is not None and cfg.model_type == "deepseek_v4" else "deepseek_v3"


#: KV-transfer connector of the tutorial deployment (DeepSeek-V4-Flash: MooncakeHybridConnector).
KV_CONNECTOR = tutorials()["families"]["deepseek_v4"]["kv_connector"]


# ------------------------------------------------------------------------------------------ launch settings
@dataclass(frozen=True, kw_only=True)
class Launch:
    """The vllm-ascend settings of one role of a P/D split (every instance of the role runs the same).

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
    family: str = "deepseek_v4"      # tutorial family (:func:`family_of`)
    quantization: str | None = "ascend"   # --quantization (None: the checkpoint's own dtype)

    @property
    def kv_connector(self) -> str:
        return tutorials()["families"][self.family]["kv_connector"]

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

    @property
    def activation_bytes(self) -> float:
        """Activations per card at this role's token budget (:func:`pdcalc.layout.memory.activation_bytes`)."""
        return activation_bytes(self.max_num_batched_tokens)


def quantization_for(setup: Setup) -> str | None:
    """``--quantization``: ``ascend`` for msModelSlim's W8A8 checkpoints (the tutorials' ``--quantization ascend``),
    none for a checkpoint in its own dtype."""
    return tutorials()["shell"]["quantization"] if setup.quant in ASCEND_SCHEMES else None


def launches(setup: Setup, work: Workload, row, p_room_bytes: float, speculative_tokens: int,
              cards_per_node: int) -> tuple[Launch, Launch]:
    """The P and D settings that realise a split (a row of the plan).

    Both roles: ``--max-model-len`` = prompt + output tokens, ``--gpu-memory-utilization`` = the setup's.
    D: ``--max-num-seqs`` = the sequences in flight per DP rank, rounded up (never above the rank's KV
    capacity, since the split is feasible); ``--max-num-batched-tokens`` = that times one token plus the
    MTP draft's (the tutorial's 60 = 30 x 2). P: ``--max-num-batched-tokens`` = the step whose activations the
    P card books (:func:`p_step_tokens`); ``--max-num-seqs`` = the prompts whose KV cache fits the P card's room,
    where finished prompts wait for the transfer; MTP with one draft token, as the tutorial advises for P."""
    ctx = work.prompt_tokens + work.output_tokens
    d_dp = int(row["d_size"]) // int(row["d_tp"])
    d_seqs = max(1, math.ceil(float(row["concurrency"]) / (int(row["d_instances"]) * d_dp) - 1e-9))
    p_seqs = max(1, int(p_room_bytes // float(seq_kv_bytes(setup, work.prompt_tokens))))
    p_spec = min(speculative_tokens, int(tutorials()["pd"]["p_speculative_tokens"]))
    common = {"gpu_memory_utilization": setup.utilization, "max_model_len": ctx, "cards_per_node": cards_per_node,
              "family": family_of(setup.model), "quantization": quantization_for(setup)}
    p = Launch(role="P", instances=int(row["p_instances"]), data_parallel_size=int(row["p_size"]) // int(row["p_tp"]),
               tensor_parallel_size=int(row["p_tp"]), max_num_seqs=p_seqs, speculative_tokens=p_spec,
               max_num_batched_tokens=p_step_tokens(setup), **common)
    d = Launch(role="D", instances=int(row["d_instances"]), data_parallel_size=d_dp,
               tensor_parallel_size=int(row["d_tp"]), max_num_seqs=d_seqs, speculative_tokens=speculative_tokens,
               max_num_batched_tokens=d_seqs * (1 + speculative_tokens), **common)
    return p, d


# ------------------------------------------------------------------------------------------ nodes
@dataclass(frozen=True, kw_only=True)
class Node:
    """One node's share of one instance: the DP ranks it runs and where the instance's head is.

    ``name`` is the shell variable the commands read the node's IP from (``P0``, ``D3``, ``N1``)."""

    role: str                # "P", "D" or "A" (co-located)
    name: str
    instance: int            # instance index within the role
    head: str                # the name of the instance's first node: its DP address
    dp_start: int            # first DP rank on this node
    dp_local: int            # DP ranks on this node
    device_offset: int       # first card of the instance on this node (several instances per node)
    slot: int                # the instance's place among those sharing the node (ports shift by it)

    @property
    def headless(self) -> bool:
        """Not the instance's first node (vLLM's ``--headless``: no API server)."""
        return self.name != self.head


def nodes(role: str, instances: int, dp: int, tp: int, cards_per_node: int) -> list[Node]:
    """Where each DP rank of each instance runs: an instance of at least a node's cards fills whole nodes (as
    many ranks per node as fit), smaller ones share a node side by side. Nodes are numbered over the role."""
    if tp > cards_per_node:
        raise ValueError(f"TP {tp} spans nodes of {cards_per_node} cards: no tutorial launch covers it")
    per_node = cards_per_node // tp
    out, size, prefix = [], dp * tp, "N" if role == "A" else role
    if size < cards_per_node:                        # several instances on one node
        slots = cards_per_node // size
        for i in range(instances):
            name = f"{prefix}{i // slots}"
            out.append(Node(role=role, name=name, instance=i, head=name, dp_start=0, dp_local=dp,
                            device_offset=(i % slots) * size, slot=i % slots))
        return out
    k = 0
    for i in range(instances):
        head = f"{prefix}{k}"
        for start in range(0, dp, per_node):
            out.append(Node(role=role, name=f"{prefix}{k}", instance=i, head=head,
                            dp_start=start, dp_local=min(per_node, dp - start), device_offset=0, slot=0))
            k += 1
    return out


def node_names(ns: list[Node]) -> list[str]:
    """The distinct node names, in order."""
    return list(dict.fromkeys(n.name for n in ns))


# ------------------------------------------------------------------------------------------ rendering
def _value(flag: str, v) -> str:
    """A flag's value as the shell reads it: JSON in single quotes, other text as is."""
    if isinstance(v, (dict, list)):
        return "'" + json.dumps(v) + "'"
    if isinstance(v, str) and v.startswith("'"):     # already quoted for the shell
        return v
    if isinstance(v, str) and v.lstrip().startswith("{"):
        return "'" + json.dumps(json.loads(v)) + "'"
    return str(v)


def serve_lines(model_path: str, flags: list[tuple[str, object]], lead: str = "vllm serve") -> list[str]:
    """``vllm serve`` with ``flags`` (``(flag, value)``, ``None`` or ``""`` for a switch), packed into lines of at
    most :data:`WIDTH` characters, a JSON value on a line of its own."""
    lines, cur = [f"{lead} {model_path} \\"], "  "
    for flag, v in flags:
        piece = flag if v in (None, "") else f"{flag} {_value(flag, v)}"
        if "'" in piece or len(cur) + len(piece) + 3 > WIDTH:
            if cur.strip():
                lines.append(cur.rstrip() + " \\")
            cur = "  "
        if "'" in piece:
            lines += wrap_json("  " + piece)
            lines[-1] += " \\"
            continue
        cur += piece + " "
    if cur.strip():
        lines.append(cur.rstrip() + " \\")
    lines[-1] = lines[-1].removesuffix(" \\")
    return lines


def wrap_json(line: str, indent: str = "    ") -> list[str]:
    """A line holding a single-quoted JSON value, broken after ``", "`` where it passes :data:`WIDTH` (the
    newlines stay inside the quotes, where JSON allows them)."""
    out, cur = [], ""
    for part in line.split(", "):
        if cur and len(cur) + len(part) + 2 > WIDTH - 3:   # room for "," or " \\"
            out.append(cur + ",")
            cur = indent + part
        else:
            cur = f"{cur}, {part}" if cur else part
    return out + [cur]


def export_lines(env: dict) -> list[str]:
    """``export`` lines for ``env`` (name to value, in order), several per line up to :data:`WIDTH`."""
    lines, cur = [], ""
    for k, v in env.items():
        piece = f"{k}={v}"
        if cur and len(cur) + len(piece) + 1 > WIDTH:
            lines.append(cur)
            cur = ""
        cur = (cur + " " + piece) if cur else "export " + piece
    return lines + ([cur] if cur else [])


def _table_flags(table: dict) -> list[tuple[str, object]]:
    return [(k, v) for k, v in table.items()]


def _spec(tokens: int, family: str) -> list[tuple[str, object]]:
    if not tokens:
        return []
    spec = {"num_speculative_tokens": tokens, "method": "mtp"}
    if tutorials()["families"][family]["speculative_enforce_eager"]:
        spec["enforce_eager"] = True
    return [("--speculative-config", spec)]


def sizes_flags(x, spec_tokens: int) -> list[tuple[str, object]]:
    """The flags pdcalc sizes: memory utilisation, context, sequences and tokens per step, quantization, MTP."""
    out = [("--gpu-memory-utilization", f"{x.gpu_memory_utilization:g}"), ("--max-model-len", x.max_model_len),
           ("--max-num-seqs", x.max_num_seqs), ("--max-num-batched-tokens", x.max_num_batched_tokens)]
    if x.quantization:
        out.append(("--quantization", x.quantization))
    return out + _spec(spec_tokens, x.family)


def _fam(family: str) -> dict:
    return tutorials()["families"][family]


def _header(what: str, family: str, how: str, names: list[str]) -> list[str]:
    """The comment lines that open a script: the layout, the tutorial it follows and what to set first."""
    t, e = tutorials(), engine_args()
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(n[0], []).append(n)
    ips = ", ".join(g[0] if len(g) == 1 else f"{g[0]}..{g[-1]}" for g in groups.values())
    return [f"# {what}",
            f"# vllm-ascend@{t['source']['commit'][:8]} {_fam(family)['tutorial'].rsplit('/', 1)[-1]}: {how} "
            f"({e['engine']['name']} {e['engine']['version']}).",
            f"# On every node: export MODEL_PATH (the checkpoint), NIC_NAME (the NIC of the node's IP) and {ips}",
            "# (the nodes' IPs)."]


# ------------------------------------------------------------------------------------------ P/D split
def _kv_config(x: Launch, p: Launch, d: Launch) -> str:
    """``--kv-transfer-config`` of a role, its ``kv_port`` and ``engine_id`` read from the launcher's environment
    (``KV_PORT``, ``ENGINE_ID``: they differ per instance)."""
    kv = {"kv_connector": x.kv_connector, "kv_role": x.kv_role, "kv_port": "@KV_PORT@", "engine_id": "@ENGINE_ID@",
          "kv_connector_extra_config": {
              "prefill": {"dp_size": p.data_parallel_size, "tp_size": p.tensor_parallel_size},
              "decode": {"dp_size": d.data_parallel_size, "tp_size": d.tensor_parallel_size}}}
    text = json.dumps(kv)
    for var in ("KV_PORT", "ENGINE_ID"):
        text = text.replace(f"@{var}@", f"'\"${var}\"'")
    return "'" + text + "'"


def _devices(packed: bool) -> str:
    """The cards of one rank: the launcher's ``$1``, shifted by ``DEVICE_OFFSET`` where instances share a node."""
    if not packed:
        return "$1"
    return ("$(echo $1 | awk -F, -v o=$DEVICE_OFFSET "
            "'{for (i = 1; i <= NF; i++) printf \"%s%d\", (i > 1 ? \",\" : \"\"), $i + o}')")


def template_lines(x: Launch, p: Launch, d: Launch, packed: bool) -> list[str]:
    """The role's ``run_dp_template.sh``: the tutorial's environment and one ``vllm serve`` for the DP rank the
    launcher passes (``$1`` cards, ``$2`` port, ``$3`` DP size, ``$4`` DP rank, ``$5`` DP address, ``$6`` RPC
    port, ``$7`` TP size)."""
    fam = _fam(x.family)
    env = {**fam["env"]["pd"], **fam["env"].get(f"pd_{x.role}", {})}
    args = tutorials()["pd"]["template_args"]
    flags = list(zip(args, ["0.0.0.0", "$2", "$3", "$4", "$5", "$6", "$7"]))
    flags += _table_flags(fam["flags"]["common"]) + sizes_flags(x, x.speculative_tokens)
    flags += _table_flags(fam["flags"][x.role]) + [("--kv-transfer-config", _kv_config(x, p, d))]
    return ([f"# ---- {x.role} nodes: save as run_dp_template.sh (launch_online_dp.py runs it once per DP rank)",
             f"LOCAL_IP={tutorials()['shell']['local_ip']}"] + export_lines(env) + [f"export ASCEND_RT_VISIBLE_DEVICES={_devices(packed)}"]
            + serve_lines("$MODEL_PATH", flags))


def launcher_lines(x: Launch, ns: list[Node], first_engine: int) -> list[str]:
    """One ``launch_online_dp.py`` per node and instance: its DP ranks, the instance's head as DP address, and
    the instance's ``KV_PORT`` and ``ENGINE_ID`` (the tutorial's 30000 + 100 x engine)."""
    pd = tutorials()["pd"]
    packed = any(n.device_offset for n in ns)
    out = [f"# ---- on each {x.role} node, beside launch_online_dp.py and the template above"]
    for n in ns:
        engine = first_engine + n.instance
        env = f"KV_PORT={pd['kv_port_first'] + pd['kv_port_step'] * engine} ENGINE_ID={engine} "
        env += f"DEVICE_OFFSET={n.device_offset} " if packed else ""
        out.append(f"{env}python launch_online_dp.py --dp-size {x.data_parallel_size} "
                   f"--tp-size {x.tensor_parallel_size} --dp-size-local {n.dp_local} \\")
        out.append(f"  --dp-rank-start {n.dp_start} --dp-address ${n.head} --dp-rpc-port {pd['dp_rpc_port'] + n.slot} "
                   f"--vllm-start-port {_first_port(x, n)}" + (" &" if packed else "") + f"   # on {n.name}")
    return out + (["wait"] if packed else [])


def _first_port(x: Launch, n: Node) -> int:
    """API port of the node's first rank (``--vllm-start-port``; instances sharing a node follow one another)."""
    return tutorials()["pd"]["vllm_start_port"] + n.slot * x.data_parallel_size


def proxy_lines(p: Launch, d: Launch, pn: list[Node], dn: list[Node]) -> list[str]:
    """The tutorial's P/D proxy on the first P node, listing every P and D rank's API server."""
    pd = tutorials()["pd"]
    out = [f"# ---- the proxy, on {pn[0].name} ({pd['proxy']})",
           f"python {pd['proxy_script']} --host ${pn[0].name} --port {pd['proxy_port']} \\"]
    for label, x, ns in (("prefiller", p, pn), ("decoder", d, dn)):
        out.append(f"  --{label}-hosts \\")
        out += ["    " + " ".join([f"${n.name}"] * n.dp_local) + " \\" for n in ns]
        out.append(f"  --{label}-ports \\")
        out += ["    " + " ".join(str(_first_port(x, n) + i) for i in range(n.dp_local)) + " \\" for n in ns]
    out[-1] = out[-1].removesuffix(" \\")
    return out


def launch_script(p: Launch, d: Launch, model_path: str = "$MODEL_PATH") -> str:
    """The commands of a P/D split (ASCII only, to copy): each role's ``run_dp_template.sh``, one
    ``launch_online_dp.py`` line per node, and the proxy. ``model_path`` replaces ``$MODEL_PATH``."""
    try:
        pn = nodes("P", p.instances, p.data_parallel_size, p.tensor_parallel_size, p.cards_per_node)
        dn = nodes("D", d.instances, d.data_parallel_size, d.tensor_parallel_size, d.cards_per_node)
    except ValueError as exc:
        return f"# not launched: {exc}"
    names = node_names(pn) + node_names(dn)
    what = (f"{p.instances} x P{p.expert_parallel_size} (DP {p.data_parallel_size} x TP {p.tensor_parallel_size}) + "
            f"{d.instances} x D{d.expert_parallel_size} (DP {d.data_parallel_size} x TP {d.tensor_parallel_size}), "
            f"EP = DP x TP per instance, on {len(names)} nodes of {p.cards_per_node} cards")
    lines = _header(what, p.family, "one API server per DP rank, a proxy in front", names)
    for x, ns, first in ((p, pn, 0), (d, dn, p.instances)):
        lines += [""] + template_lines(x, p, d, any(n.device_offset for n in ns))
        lines += [""] + launcher_lines(x, ns, first)
    lines += [""] + proxy_lines(p, d, pn, dn)
    text = "\n".join(lines)
    return text if model_path == "$MODEL_PATH" else text.replace("$MODEL_PATH", model_path)


# ------------------------------------------------------------------------------------------ co-located
def colocated_launch(setup: Setup, work: Workload, row, cards_per_node: int) -> Launch:
    """The settings of a co-located layout (a row of :attr:`pdcalc.plan.search.Plan.aggregated`), as a
    :class:`Launch` of role ``"A"``: ``--max-num-seqs`` = the sequences in flight per DP rank, rounded up;
    ``--max-num-batched-tokens`` = one token per sequence plus the MTP draft's, plus the prompt chunk the planner
    admits per step (rounded up); ``--max-model-len`` = prompt + output tokens."""
    dp = int(row["size"]) // int(row["tp"])
    spec = int(setup.draft_tokens) if setup.mtp else 0
    seqs = max(1, math.ceil(float(row["concurrency"]) / (int(row["instances"]) * dp) - 1e-9))
    chunk = max(1, math.ceil(float(row["chunk_tokens"]) - 1e-9))
    return Launch(role="A", instances=int(row["instances"]), data_parallel_size=dp,
                  tensor_parallel_size=int(row["tp"]), gpu_memory_utilization=setup.utilization, max_num_seqs=seqs,
                  max_model_len=work.prompt_tokens + work.output_tokens,
                  max_num_batched_tokens=seqs * (1 + spec) + chunk, speculative_tokens=spec,
                  cards_per_node=cards_per_node, family=family_of(setup.model), quantization=quantization_for(setup))


def node_command(x: Launch, n: Node, spans: bool) -> list[str]:
    """One node's ``vllm serve`` of a co-located instance: the first node runs the API server, the others
    ``--headless`` from their first DP rank (``spans``: the instance spans several nodes)."""
    co, fam = tutorials()["colocated"], _fam(x.family)
    flags = [("--host", "0.0.0.0"), ("--port", co["port"] + n.slot)]
    flags += [("--headless", "")] if n.headless else []
    flags += [("--data-parallel-size", x.data_parallel_size)]
    if spans:
        flags += [("--data-parallel-size-local", n.dp_local)]
        flags += [("--data-parallel-start-rank", n.dp_start)] if n.headless else []
        flags += [("--data-parallel-address", f"${n.head}"), ("--data-parallel-rpc-port", co["dp_rpc_port"] + n.slot)]
    flags += [("--tensor-parallel-size", x.tensor_parallel_size)] + _table_flags(fam["flags"]["common"])
    flags += sizes_flags(x, x.speculative_tokens) + _table_flags(fam["flags"]["A"])
    cards = n.dp_local * x.tensor_parallel_size
    lead = "vllm serve"
    if cards < x.cards_per_node:
        lead = f"ASCEND_RT_VISIBLE_DEVICES={','.join(str(n.device_offset + i) for i in range(cards))} " + lead
    last = n.dp_start + n.dp_local - 1
    role = "headless" if n.headless else "the API server"
    head = f"# {n.name}" + (f", instance {n.instance}" if x.instances > 1 else "")
    return [f"{head}: DP ranks {n.dp_start}-{last}, {role}"] + serve_lines("$MODEL_PATH", flags, lead)


def colocated_script(setup: Setup, work: Workload, row, model_path: str = "$MODEL_PATH",
                     cards_per_node: int | None = None) -> str:
    """The commands of a co-located layout (ASCII only, to copy): the tutorial's environment, then one
    ``vllm serve`` per node of each instance (:func:`node_command`); prefill and decode on the same cards, no KV
    transfer. ``cards_per_node`` defaults to the tutorial deployment's."""
    if cards_per_node is None:
        from pdcalc.layout.deployment import get_deployment

        cards_per_node = int(get_deployment(TUTORIAL)["cards_per_server"])
    x = colocated_launch(setup, work, row, cards_per_node)
    try:
        ns = nodes("A", x.instances, x.data_parallel_size, x.tensor_parallel_size, cards_per_node)
    except ValueError as exc:
        return f"# not launched: {exc}"
    names = node_names(ns)
    what = (f"{x.instances} x {x.expert_parallel_size} co-located (DP {x.data_parallel_size} x TP "
            f"{x.tensor_parallel_size} = EP per instance) on {len(names)} node{'s' if len(names) > 1 else ''} "
            f"of {cards_per_node} cards; P and D share the cards")
    lines = _header(what, x.family, "multi-node data parallelism, one API server per instance", names)
    lines += [f"LOCAL_IP={tutorials()['shell']['local_ip']}"] + export_lines(_fam(x.family)["env"]["colocated"])
    per_instance = {i: sum(1 for n in ns if n.instance == i) for i in range(x.instances)}
    for n in ns:
        lines += node_command(x, n, per_instance[n.instance] > 1)
    if any(n.device_offset for n in ns):
        lines.append("# instances that share a node: start each in its own shell")
    text = "\n".join(lines)
    return text if model_path == "$MODEL_PATH" else text.replace("$MODEL_PATH", model_path)
