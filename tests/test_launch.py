"""pdcalc.plan.launch: the commands the "What to run" chapter prints start as printed.

Every flag and JSON key of every printed command is one the engine's programs accept (pdcalc/data/engine_args.toml,
vllm 0.27.1 and vllm-ascend@182b75ea), each command is valid shell, and a layout that spans nodes has one command
per node whose DP ranks partition the instance's. The commands come from the chapter's own code
(:func:`pdcalc.audit.answers.recommend_vs_article` and ``Recommendation.script``).
"""

import json
import math
import shlex
import shutil
import subprocess

import pytest

from pdcalc.audit import answers
from pdcalc.layout import memory
from pdcalc.layout.deployment import get_deployment
from pdcalc.plan import launch as L
from pdcalc.plan.labels import card_plans
from pdcalc.plan.splits import evaluate_split
from pdcalc.plan.workload import Setup, Workload

V4 = "deepseek-v4-flash"
V3 = "deepseek-v3"


# ------------------------------------------------------------------------------------------ reading a script
def commands(text: str) -> list[list[str]]:
    """The shell commands of ``text`` as argument lists: continuation lines joined, newlines inside quotes kept,
    comments dropped."""
    out, cur = [], ""
    for line in text.splitlines():
        cur += line + "\n"
        body = cur.replace("\\\n", " ")
        try:
            tokens = shlex.split(body, comments=True)
        except ValueError:                       # an open quote: the command goes on
            continue
        if cur.rstrip().endswith("\\"):
            continue
        if tokens:
            out.append(tokens)
        cur = ""
    assert not cur.strip(), f"unterminated command: {cur!r}"
    return out


def program(tokens: list[str]) -> str | None:
    """The program of ``engine_args.toml`` a command runs (leading ``NAME=value`` assignments skipped)."""
    rest = [t for t in tokens if not (t.split("=", 1)[0].isidentifier() and "=" in t and not t.startswith("-"))]
    if rest[:2] == ["vllm", "serve"]:
        return "vllm-serve"
    if rest[:2] == ["python", "launch_online_dp.py"]:
        return "launch_online_dp"
    if rest[:2] == ["python", L.tutorials()["pd"]["proxy_script"]]:
        return "load_balance_proxy"
    return None


def options(tokens: list[str]) -> dict[str, str | None]:
    """Flag to its value (the next token unless that is a flag; ``None`` for a switch); a repeated flag fails."""
    out = {}
    for i, t in enumerate(tokens):
        if t.startswith("--"):
            assert t not in out, f"{t} given twice"
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            out[t] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def env_of(tokens: list[str]) -> dict[str, str]:
    """The ``NAME=value`` assignments that lead a command."""
    out = {}
    for t in tokens:
        if "=" not in t or t.startswith("-") or not t.split("=", 1)[0].isidentifier():
            break
        k, v = t.split("=", 1)
        out[k] = v
    return out


def _json_problems(flag: str, value: str, keys: dict) -> list[str]:
    spec = keys[flag]
    data = json.loads(value)
    bad = [f"{flag}: unknown key {k!r}" for k in data if k not in spec["keys"]]
    for name, nested in spec.get("nested", {}).items():
        sub = data.get(name) if name in data else (data.get("kv_connector_extra_config") or {}).get(name)
        if isinstance(sub, dict):
            bad += [f"{flag}: unknown key {name}.{k!r}" for k in sub if k not in nested["keys"]]
    values = L.engine_args()["values"]
    for key in ("cudagraph_mode", "method", "kv_connector", "kv_role"):
        if key in data and data[key] not in values[key]["values"]:
            bad.append(f"{flag}: {key} {data[key]!r} is not one the engine registers")
    return bad


def problems(text: str) -> list[str]:
    """Every flag, JSON key and registry value of ``text`` the engine's programs do not accept."""
    args = L.engine_args()
    progs, keys, values = args["programs"], args["json_keys"], args["values"]
    bad = []
    for tokens in commands(text):
        prog = program(tokens)
        if prog is None:
            continue
        for flag, value in options(tokens).items():
            if flag not in progs[prog]["flags"]:
                bad.append(f"{prog}: unknown flag {flag}")
                continue
            if prog == "vllm-serve" and flag in keys:
                bad += _json_problems(flag, value, keys)
            if prog == "vllm-serve" and flag in values and value not in values[flag]["values"]:
                bad.append(f"{flag} {value!r} is not one the engine registers")
    return bad


# ------------------------------------------------------------------------------------------ the chapter's commands
@pytest.fixture(scope="module")
def v4():
    """DeepSeek-V4-Flash on the V4 article's 64 x 910B, under the roofline so that a P/D split fits."""
    args = {**answers.article_setup(V4), **answers.article_workload(V4), "costs": "roofline", "ttft_s": None,
            "tpot_s": 0.05}
    rec = answers.recommend_vs_article(V4, **args)
    assert rec.fits and not rec.colocated_wins
    return rec


@pytest.fixture(scope="module")
def v3():
    """DeepSeek-V3 on the V3 article's cluster as the chapter runs it (the served model): co-located wins."""
    rec = answers.article_cases()["v3"]
    assert rec.colocated_wins
    return rec


@pytest.fixture(scope="module")
def scripts(v4, v3):
    """Every command the recommendations can print: each one's answer, its other mode, and a layout whose
    instances share a node."""
    per_node = v4.launch[0].cards_per_node
    out = {"v4 P/D": v4.script(), "v3 co-located": v3.script(),
           "v4 co-located": L.colocated_script(v4.setup, v4.workload, v4.aggregated, cards_per_node=per_node)}
    if v3.fits:
        out["v3 P/D"] = L.launch_script(*v3.launch)
    p, d = v4.launch
    small = L.Launch(**{**p.__dict__, "instances": 3, "data_parallel_size": p.cards_per_node // 2})
    out["shared nodes"] = L.launch_script(small, d)
    return out


def test_every_printed_flag_and_json_key_is_one_the_engine_accepts(scripts):
    for name, text in scripts.items():
        assert not text.startswith("# not launched"), name
        assert problems(text) == [], name
        assert text.isascii(), name


@pytest.mark.parametrize("good, bad", [("--block-size", "--block-sise"), ("--enforce-eager", "--enforce-eagre"),
                                       ("enable_cpu_binding", "enable_cpu_bind"), ("deepseek_v4", "deepseek-v4"),
                                       ("--dp-rank-start", "--dp-rank-first"), ("--decoder-ports", "--decode-ports"),
                                       ("FULL_DECODE_ONLY", "FULL_DECODE")])
def test_the_check_fails_on_what_the_engine_does_not_accept(scripts, good, bad):
    text = scripts["v4 P/D"]
    assert good in text
    assert problems(text.replace(good, bad, 1))


def test_every_script_is_valid_shell(scripts):
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    for name, text in scripts.items():
        run = subprocess.run([bash, "-n"], input=text, text=True, capture_output=True)
        assert run.returncode == 0, (name, run.stderr)


# ------------------------------------------------------------------------------------------ one command per node
def test_colocated_runs_one_command_per_node_the_first_with_the_api_server(v3):
    text = v3.script()
    x = L.colocated_launch(v3.setup, v3.workload, v3.aggregated, v3.launch[0].cards_per_node)
    serves = [options(t) for t in commands(text) if program(t) == "vllm-serve"]
    spanned = x.instances * math.ceil(x.expert_parallel_size / x.cards_per_node)
    assert spanned > 1 and len(serves) == spanned
    heads = [o for o in serves if "--headless" not in o]
    assert len(heads) == x.instances
    by_address: dict[str, list] = {}
    for o in serves:
        assert int(o["--data-parallel-size"]) == x.data_parallel_size
        assert int(o["--tensor-parallel-size"]) == x.tensor_parallel_size
        start = int(o.get("--data-parallel-start-rank") or 0)
        assert ("--data-parallel-start-rank" in o) == ("--headless" in o)
        by_address.setdefault(o["--data-parallel-address"], []).append((start, int(o["--data-parallel-size-local"])))
    assert len(by_address) == x.instances
    for ranks in by_address.values():         # the nodes' ranks partition the instance's DP ranks
        got = [r for start, n in ranks for r in range(start, start + n)]
        assert sorted(got) == list(range(x.data_parallel_size))
        assert sum(n for _, n in ranks) * x.tensor_parallel_size == x.expert_parallel_size


def test_pd_runs_one_launcher_per_node_with_its_first_rank(v4):
    p, d = v4.launch
    launchers = [t for t in commands(v4.script()) if program(t) == "launch_online_dp"]
    for x in (p, d):
        mine = [(options(t), env_of(t)) for t in launchers if int(options(t)["--dp-size"]) == x.data_parallel_size
                and int(options(t)["--tp-size"]) == x.tensor_parallel_size]
        assert len(mine) == x.instances * x.nodes_per_instance
        by_head: dict[str, list] = {}
        for o, env in mine:
            by_head.setdefault(o["--dp-address"], []).append((int(o["--dp-rank-start"]), int(o["--dp-size-local"]),
                                                              env["ENGINE_ID"], env["KV_PORT"]))
        assert len(by_head) == x.instances
        for ranks in by_head.values():
            got = [r for start, n, *_ in ranks for r in range(start, start + n)]
            assert sorted(got) == list(range(x.data_parallel_size))
            assert sum(1 for start, *_ in ranks if start == 0) == 1          # one head node per instance
            assert len({(e, k) for *_, e, k in ranks}) == 1                   # one engine and KV port per instance
    engines = {(env_of(t)["ENGINE_ID"], env_of(t)["KV_PORT"]) for t in launchers}
    assert len(engines) == p.instances + d.instances
    assert len({k for _, k in engines}) == len(engines)


def test_shared_nodes_shift_cards_and_ports(scripts, v4):
    text = scripts["shared nodes"]
    p = v4.launch[0]
    rows = [(options(t), env_of(t)) for t in commands(text) if program(t) == "launch_online_dp"
            and int(options(t)["--dp-size"]) == p.cards_per_node // 2]
    per_node: dict[str, list] = {}
    for o, env in rows:
        per_node.setdefault(o["--dp-address"][1:], []).append((int(env["DEVICE_OFFSET"]), int(o["--vllm-start-port"]),
                                                              int(o["--dp-rpc-port"])))
    for slots in per_node.values():
        assert len({s[0] for s in slots}) == len({s[1] for s in slots}) == len({s[2] for s in slots}) == len(slots)
        assert max(s[0] for s in slots) + p.cards_per_node // 2 <= p.cards_per_node


def test_the_proxy_lists_every_rank_once(v4):
    p, d = v4.launch
    proxy = [t for t in commands(v4.script()) if program(t) == "load_balance_proxy"]
    assert len(proxy) == 1
    tokens = proxy[0]

    def listed(flag):
        i = tokens.index(flag) + 1
        out = []
        while i < len(tokens) and not tokens[i].startswith("--"):
            out.append(tokens[i])
            i += 1
        return out
    for role, x in (("prefiller", p), ("decoder", d)):
        hosts, ports = listed(f"--{role}-hosts"), listed(f"--{role}-ports")
        assert len(hosts) == len(ports) == x.instances * x.data_parallel_size
        assert len(set(zip(hosts, ports))) == len(hosts)


# ------------------------------------------------------------------------------------------ what the flags say
def test_the_token_budgets_fit_the_activations_the_plan_books(v4, v3):
    framework = {"P": memory.P_OVERHEAD_BYTES - memory.ACTIVATION_BYTES,
                 "D": memory.D_OVERHEAD_BYTES - memory.ACTIVATION_BYTES}
    p, d = v4.launch
    assert p.activation_bytes <= v4.setup.p_overhead_bytes - framework["P"]
    assert d.activation_bytes <= v4.setup.d_overhead_bytes - framework["D"]
    # a whole prompt per step would need more than the P card books
    assert memory.activation_bytes(v4.workload.prompt_tokens) > v4.setup.p_overhead_bytes - framework["P"]
    a = L.colocated_launch(v3.setup, v3.workload, v3.aggregated, v3.launch[0].cards_per_node)
    assert a.activation_bytes <= v3.setup.a_overhead_bytes - max(framework.values())
    serve = [options(t) for t in commands(v4.script()) if program(t) == "vllm-serve"]
    assert [int(o["--max-num-batched-tokens"]) for o in serve] == [p.max_num_batched_tokens, d.max_num_batched_tokens]


def test_p_books_more_activations_when_the_budget_grows():
    """The P budget follows the activations booked: twice the article's activations, twice its step."""
    s = Setup(model=V4, cards=64)
    grown = Setup(model=V4, cards=64, p_overhead_bytes=s.p_overhead_bytes + memory.ACTIVATION_BYTES)
    assert L.p_step_tokens(s) == memory.activation_tokens()
    assert L.p_step_tokens(grown) == 2 * memory.activation_tokens()
    assert memory.activation_bytes(L.p_step_tokens(grown)) == pytest.approx(2 * memory.ACTIVATION_BYTES)


def test_the_tutorials_split_prints_the_tutorials_settings():
    """On the tutorial's own split (4 x 1P + 1 x 4D), the commands give the tutorial's P token budget, block
    size, D start ranks and connector (deployments.toml ``v4-flash-910b-pd``)."""
    dep = get_deployment(L.TUTORIAL)
    w = answers.article_workload(V4)
    setup = Setup(model=V4, cards=64, measured_weights=True)
    work = Workload(prompt_tokens=w["prompt_tokens"], output_tokens=w["output_tokens"], concurrency=w["concurrency"])
    row = evaluate_split(setup, work, p_instances=dep["prefill_instances"], p_size=dep["prefill_dp"],
                         d_instances=dep["decode_instances"], d_size=dep["decode_dp"])
    p_card, _ = card_plans(setup, work, row)
    room = p_card.usable_bytes - p_card.parts["weights"] - p_card.parts["overhead"]
    p, d = L.launches(setup, work, row, room, dep["mtp_speculative_tokens"], dep["cards_per_server"])
    text = L.launch_script(p, d)
    assert problems(text) == []
    cmds = commands(text)
    serve = [options(t) for t in cmds if program(t) == "vllm-serve"]
    assert int(serve[0]["--max-num-batched-tokens"]) == dep["prefill_max_num_batched_tokens"]
    assert {int(o["--block-size"]) for o in serve} == {dep["block_size_tokens"]}
    assert all("--no-disable-hybrid-kv-cache-manager" in o for o in serve)
    assert "--enforce-eager" in serve[0] and "--enforce-eager" not in serve[1]
    assert json.loads(serve[1]["--compilation-config"])["cudagraph_mode"] in L.engine_args()["values"]["cudagraph_mode"]["values"]
    d_starts = [int(options(t)["--dp-rank-start"]) for t in cmds if program(t) == "launch_online_dp"
                and int(options(t)["--dp-size"]) == dep["decode_dp"]]
    assert d_starts == list(range(0, dep["decode_dp"], dep["cards_per_server"]))
    assert dep["prefill_instances"] + dep["decode_instances"] * dep["decode_dp"] // dep["cards_per_server"] == len(
        [t for t in cmds if program(t) == "launch_online_dp"])
    kv = json.loads(serve[0]["--kv-transfer-config"])
    assert kv["kv_connector"] == L.KV_CONNECTOR and kv["kv_connector"] in dep["source"]


def test_every_copied_setting_names_its_source():
    t = L.tutorials()
    assert len(t["source"]["commit"]) == 40 and t["source"]["commit"] == L.engine_args()["plugin"]["commit"]
    for section in (t["pd"], t["colocated"], *t["families"].values()):
        assert section["source"]
    for flag, where in L.engine_args()["programs"]["vllm-serve"]["flags"].items():
        assert where.startswith("vllm/"), flag
