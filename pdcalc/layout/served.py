"""A served deployment as one TOML spec: the model, card, checkpoint and engine, the roles that serve it
(one co-located ``[serve]``, or ``[prefill]`` and ``[decode]`` for disaggregated serving), MTP speculative
decoding, and the workload a benchmark client puts on it.

The same spec describes a user's deployment (``pdcalc predict SPEC.toml``), a published benchmark run
(the served corpus, :mod:`pdcalc.reality.served_runs`) and a calibration's reference run
(``pdcalc calibrate``)::

    model = "deepseek-v4-flash"     # preset or path to a config.json
    card = "ascend-910c-die"        # preset or path to a card file
    quant = "w8a8-msmodelslim"      # optional: the card family's default
    engine = "vllm-ascend"          # SERVING_ENGINES
    kv_dtype = "bf16"               # optional

    [prefill]                       # [prefill] + [decode], or one [serve]
    instances = 1
    tp = 4
    dp = 4
    ep = 16                         # optional: no expert parallelism
    max_num_batched_tokens = 16384  # optional

    [decode]
    tp = 1
    dp = 16
    ep = 16
    max_num_seqs = 60               # optional, per DP rank
    memory_utilization = 0.9        # optional: --gpu-memory-utilization (vLLM) / --mem-fraction-static (SGLang)
    swa_full_tokens_ratio = 0.1     # optional: SGLang's --swa-full-tokens-ratio (DeepSeek-V4's pool)
    radix_cache = true              # optional: false for SGLang's --disable-radix-cache

    [mtp]                           # optional
    draft_tokens = 3
    acceptance = 0.7                # optional: per draft token

    [workload]
    prompt = 3500
    output = 1500
    concurrency = 1024              # closed loop; and/or request_rate (requests/s)
    num_prompts = 4096              # optional
    dataset = "random"              # optional
    min_length_ratio = 1.0          # optional: lengths drawn from [ratio x length, length] per request
    seed = 42                       # optional: the client's --seed, which draws those lengths
    temperature = 0.0               # optional: the client's sampling temperature (its default: 0, greedy)

An SGLang role serving DeepSeek-V4 may give ``swa_full_tokens_ratio``: its launch's ``--swa-full-tokens-ratio``,
which sizes the pool's sliding-window ring per token (:mod:`pdcalc.model.kv_sglang`), and ``radix_cache = false``
where it runs with ``--disable-radix-cache`` (its prefix cache then locks no prompt in that ring).
A co-located SGLang role with DP attention may give ``prefill_delay_passes``: its launch's
``--enable-prefill-delayer`` and ``--prefill-delayer-max-delay-passes`` (:data:`SGLANG_PREFILL_DELAY_PASSES` where
it gives none).

Cards are counted as the engine counts devices: an Atlas A3 node has 16 (``ascend-910c-die``). Every field is
checked; an unknown or misspelt field is an error naming it, as is a layout that cannot exist (a TP degree the
heads do not divide, an EP group that does not divide the instance). A layout that does not fit in memory is not
an error here: it is a result of the prediction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pdcalc.core import checks
from pdcalc.core.checks import MAX_CARDS, MAX_SEQUENCES, MAX_TOKENS, RATE_PER_S
from pdcalc.core.errors import ConfigError, PdcalcError, load_toml

#: Serving engines a spec may name, each with the KV-cache layout it keeps (:data:`pdcalc.model.kv_layout.ENGINES`;
#: None: the card family's) and the benchmark client its published runs use.
#: ``schedule`` is how a co-located rank fits prefill beside decode: ``mixed``, prompt chunks and decode tokens
#: in one step under the token budget (vLLM v1's scheduler, TensorRT-LLM's in-flight batching); ``prefill-first``,
#: a step of waiting prompts runs on its own and the decode batch waits for it (SGLang's scheduler without
#: ``--enable-mixed-chunk``, MindIE's default).
SERVING_ENGINES: dict[str, dict] = {
    "vllm": {"kv_layout": "vllm", "client": "vllm bench serve", "schedule": "mixed"},
    "vllm-ascend": {"kv_layout": "vllm-ascend", "client": "vllm bench serve / AISBench", "schedule": "mixed"},
    "sglang": {"kv_layout": None, "client": "sglang.bench_serving", "schedule": "prefill-first"},
    "trtllm": {"kv_layout": "vllm", "client": "trtllm-serve + benchmark_serving / trtllm-bench",
               "schedule": "mixed"},
    "mindie": {"kv_layout": "vllm-ascend", "client": "AISBench", "schedule": "prefill-first"},
    "omni-infer": {"kv_layout": "vllm-ascend", "client": "vllm benchmark_serving", "schedule": "mixed"},
}
#: KV-cache formats a spec may name (each engine's layout says which it stores).
KV_DTYPES = ("auto", "bf16", "fp8", "fp8_ds_mla", "int8")
#: Benchmark datasets: what the prompts are (MTP acceptance depends on it, :mod:`pdcalc.perf.speculative`).
DATASETS = ("random", "sharegpt", "gsm8k", "aime", "gpqa", "mt-bench", "humaneval", "longbench", "custom")
#: ``--seed`` of SGLang's ``bench_serving`` where a run gives none (:data:`SOURCES` ``sglang-lengths``), and the
#: largest seed NumPy's generator takes.
SGLANG_BENCH_SEED = 42
MAX_SEED = 2**32 - 1
#: Where the client's draws are read.
SOURCES = {
    "sglang-lengths": ("sgl-project/sglang 0.5.15 (PyPI wheel), sglang/benchmark/serving.py: "
                       "'parser.add_argument(\"--seed\", type=int, default=42' and 'random.seed(args.seed)' / "
                       "'np.random.seed(args.seed)' before the dataset is sampled; benchmark/datasets/random.py, "
                       "sample_random_requests: 'input_lens = compute_random_lens(full_len=input_len, ...)' then "
                       "'output_lens = compute_random_lens(full_len=output_len, ...)'; datasets/common.py, "
                       "compute_random_lens: 'np.random.randint(max(int(full_len * range_ratio), 1), full_len + 1, "
                       "size=num)'. SGLang 0.5.6 draws prompts alike but outputs from int(output_len * range_ratio) "
                       "and seeds with 1 by default"),
}
#: The highest sampling temperature a workload may give (OpenAI-compatible servers accept up to 2).
MAX_TEMPERATURE = 2.0
#: Draft tokens per step MTP may be given (engines run 1 to a few).
MAX_DRAFT_TOKENS = 16
ROLES = ("serve", "prefill", "decode")

_TOP = ("model", "card", "quant", "engine", "kv_dtype", "graph", *ROLES, "mtp", "workload")
_ROLE = ("instances", "tp", "dp", "ep", "max_num_seqs", "max_num_batched_tokens", "memory_utilization",
         "swa_full_tokens_ratio", "prefill_delay_passes", "radix_cache")
#: SGLang's ``--prefill-delayer-max-delay-passes`` where a launch with ``--enable-prefill-delayer`` gives none
#: (sgl-project/sglang python/sglang/srt/server_args.py: ``prefill_delayer_max_delay_passes: int = 30``).
SGLANG_PREFILL_DELAY_PASSES = 30
#: The most passes ``prefill_delay_passes`` may give (a check on the input, not an engine limit).
MAX_PREFILL_DELAY_PASSES = 1000
_MTP = ("draft_tokens", "acceptance")
_WORK = ("prompt", "output", "concurrency", "request_rate", "num_prompts", "dataset", "min_length_ratio", "seed",
         "temperature")


@dataclass(frozen=True, kw_only=True)
class Role:
    """One role of a deployment: ``instances`` copies of a TP x DP instance (cards as the engine counts them)."""

    instances: int = 1
    tp: int = 1
    dp: int = 1
    ep: int | None = None                      # EP group in cards; None: experts split over TP in each rank
    max_num_seqs: int | None = None            # sequences per DP rank (the engine's default where None)
    max_num_batched_tokens: int | None = None  # tokens per scheduler step per DP rank
    memory_utilization: float | None = None    # share of the card the engine takes (None: pdcalc's default)
    swa_full_tokens_ratio: float | None = None  # SGLang's window pool per full token (None: the engine's default)
    prefill_delay_passes: int | None = None    # SGLang's prefill delayer: passes a rank's prompts wait at most
    radix_cache: bool = True                   # SGLang's prefix cache (False: --disable-radix-cache)

    @property
    def cards_per_instance(self) -> int:
        return self.tp * self.dp

    @property
    def cards(self) -> int:
        return self.instances * self.tp * self.dp


@dataclass(frozen=True, kw_only=True)
class Mtp:
    """MTP speculative decoding: draft tokens per step, and the acceptance of each if known."""

    draft_tokens: int
    acceptance: float | None = None


@dataclass(frozen=True, kw_only=True)
class ServedWorkload:
    """What the benchmark client sends: a closed loop of ``concurrency`` requests and/or an open loop of
    ``request_rate`` requests per second (``math.inf``: all at once), ``num_prompts`` in all.

    ``prompt`` and ``output`` are the lengths asked for; with ``min_length_ratio`` r < 1 each request's lengths
    are drawn uniformly from ``[r x length, length]``, as SGLang's ``bench_serving --random-range-ratio r`` draws
    them (its default, when the flag is absent, is 0: lengths from 1 to the stated one), from its ``--seed``
    (``seed``, :data:`SGLANG_BENCH_SEED` where the client gives none), so that a run of few prompts is simulated
    with the very lengths the client sent (:func:`client_lengths`). vLLM's ``--random-range-
    ratio`` draws symmetrically about the stated length, whose mean that is: leave it at 1. ``temperature`` is the
    sampling temperature the client asks for: ``vllm bench serve`` and ``bench_serving`` sample greedily (0) unless
    told otherwise, and MTP accepts fewer drafts when tokens are sampled (:mod:`pdcalc.perf.speculative`)."""

    prompt: int
    output: int
    concurrency: int | None = None
    request_rate: float | None = None
    num_prompts: int | None = None
    dataset: str = "random"
    min_length_ratio: float = 1.0
    temperature: float = 0.0
    seed: int = SGLANG_BENCH_SEED   # the client's --seed (random lengths)

    @property
    def mean_prompt(self) -> float:
        """Mean prompt tokens per request."""
        return max(1.0, self.prompt * (1 + self.min_length_ratio) / 2)

    @property
    def mean_output(self) -> float:
        """Mean output tokens per request."""
        return max(1.0, self.output * (1 + self.min_length_ratio) / 2)


@dataclass(frozen=True, kw_only=True)
class ServedSpec:
    """A served deployment and its workload (see the module docstring); ``source`` names where it was read."""

    model: str
    card: str
    engine: str
    workload: ServedWorkload
    quant: str | None = None
    kv_dtype: str | None = None
    graph: bool = True                          # graph capture (CUDA graphs, Ascend graph mode)
    serve: Role | None = None
    prefill: Role | None = None
    decode: Role | None = None
    mtp: Mtp | None = None
    source: str = field(default="spec", compare=False)

    @property
    def disaggregated(self) -> bool:
        return self.serve is None

    @property
    def cards(self) -> int:
        """Every card of the deployment, as the engine counts them."""
        return self.serve.cards if self.serve else self.prefill.cards + self.decode.cards

    @property
    def draft_tokens(self) -> int:
        return self.mtp.draft_tokens if self.mtp else 0

    def roles(self) -> dict[str, Role]:
        """The roles present, by name."""
        return {r: getattr(self, r) for r in ROLES if getattr(self, r) is not None}

    def describe(self) -> str:
        """The deployment and its workload in one line."""
        def role(r: Role) -> str:
            return f"{r.instances} x TP{r.tp} DP{r.dp}{f' EP{r.ep}' if r.ep else ''}"

        w = self.workload
        roles = (f"P {role(self.prefill)}, D {role(self.decode)}" if self.disaggregated
                 else f"co-located {role(self.serve)}")
        load = ", ".join(x for x in (f"{w.concurrency:,} concurrent" if w.concurrency else "",
                                     f"{w.request_rate:g} requests/s" if w.request_rate is not None else "") if x)
        return (f"{self.model} on {self.cards:,} x {self.card}, {self.engine}, {roles}"
                f"{f', MTP {self.draft_tokens}' if self.draft_tokens else ''}; {w.prompt:,} -> {w.output:,} tokens, "
                f"{load}{f', {w.num_prompts:,} prompts' if w.num_prompts else ''}")


def _field(source: str, where: str) -> callable:
    """A checker that turns :class:`pdcalc.core.checks.InputError` into a :class:`ConfigError` naming ``where``."""

    def check(fn, name, value, **kw):
        try:
            return fn("", value, **kw)
        except checks.InputError as exc:
            raise ConfigError(source, f"{where}{name}", str(exc)) from None

    return check


def _unknown(source: str, table: dict, allowed: tuple, where: str) -> None:
    for key in table:
        if key not in allowed:
            raise ConfigError(source, f"{where}{key}", f"unknown field; allowed: {', '.join(allowed)}")


def _role(source: str, name: str, table) -> Role:
    if not isinstance(table, dict):
        raise ConfigError(source, f"[{name}]", f"must be a table, got {checks.show(table)}")
    _unknown(source, table, _ROLE, f"[{name}] ")
    check = _field(source, f"[{name}] ")
    kw = {k: check(checks.integer, k, table[k], low=1, high=MAX_CARDS) for k in ("instances", "tp", "dp", "ep")
          if k in table}
    if "max_num_seqs" in table:
        kw["max_num_seqs"] = check(checks.integer, "max_num_seqs", table["max_num_seqs"], low=1, high=MAX_SEQUENCES)
    if "max_num_batched_tokens" in table:
        kw["max_num_batched_tokens"] = check(checks.integer, "max_num_batched_tokens",
                                             table["max_num_batched_tokens"], low=1, high=MAX_TOKENS)
    if "memory_utilization" in table:
        kw["memory_utilization"] = check(checks.number, "memory_utilization", table["memory_utilization"],
                                         low=0.0, low_open=True, high=1.0)
    if "swa_full_tokens_ratio" in table:
        kw["swa_full_tokens_ratio"] = check(checks.number, "swa_full_tokens_ratio", table["swa_full_tokens_ratio"],
                                            low=0.0, low_open=True, high=1.0)
    if "prefill_delay_passes" in table:
        kw["prefill_delay_passes"] = check(checks.integer, "prefill_delay_passes", table["prefill_delay_passes"],
                                           low=1, high=MAX_PREFILL_DELAY_PASSES)
    if "radix_cache" in table:
        kw["radix_cache"] = check(checks.boolean, "radix_cache", table["radix_cache"])
    role = Role(**kw)
    if role.cards > MAX_CARDS:
        raise ConfigError(source, f"[{name}]", f"instances x tp x dp = {role.cards:,} cards; at most {MAX_CARDS:,}")
    if role.ep is not None and role.cards_per_instance % role.ep:
        raise ConfigError(source, f"[{name}] ep", f"{role.ep} does not divide the instance's tp x dp = "
                          f"{role.cards_per_instance} cards: every card must belong to one EP group")
    return role


def _workload(source: str, table) -> ServedWorkload:
    if not isinstance(table, dict):
        raise ConfigError(source, "[workload]", "missing: give prompt, output and a concurrency or request_rate")
    _unknown(source, table, _WORK, "[workload] ")
    check = _field(source, "[workload] ")
    for key in ("prompt", "output"):
        if key not in table:
            raise ConfigError(source, f"[workload] {key}", "missing: tokens per request")
    kw = {k: check(checks.integer, k, table[k], low=1, high=MAX_TOKENS) for k in ("prompt", "output")}
    if "concurrency" in table:
        kw["concurrency"] = check(checks.integer, "concurrency", table["concurrency"], low=1, high=MAX_SEQUENCES)
    if "request_rate" in table:
        rate = table["request_rate"]
        kw["request_rate"] = (math.inf if isinstance(rate, str) and rate.strip().lower() == "inf"
                              else check(checks.number, "request_rate", rate, low=RATE_PER_S[0], high=RATE_PER_S[1]))
    if "concurrency" not in kw and "request_rate" not in kw:
        raise ConfigError(source, "[workload]", "give a concurrency (closed loop) or a request_rate (requests/s)")
    if kw.get("request_rate") == math.inf and "concurrency" not in kw and "num_prompts" not in table:
        raise ConfigError(source, "[workload] num_prompts", "required with request_rate = \"inf\" and no "
                          "concurrency: every prompt is sent at once")
    if "num_prompts" in table:
        kw["num_prompts"] = check(checks.integer, "num_prompts", table["num_prompts"], low=1, high=MAX_SEQUENCES)
    if "dataset" in table:
        ds = check(checks.text, "dataset", table["dataset"])
        if ds not in DATASETS:
            raise ConfigError(source, "[workload] dataset", f"unknown dataset {checks.show(ds)}; known: "
                              f"{', '.join(DATASETS)}")
        kw["dataset"] = ds
    if "min_length_ratio" in table:
        kw["min_length_ratio"] = check(checks.number, "min_length_ratio", table["min_length_ratio"], low=0.0,
                                       high=1.0)
    if "temperature" in table:
        kw["temperature"] = check(checks.number, "temperature", table["temperature"], low=0.0, high=MAX_TEMPERATURE)
    if "seed" in table:
        kw["seed"] = check(checks.integer, "seed", table["seed"], low=0, high=MAX_SEED)
    return ServedWorkload(**kw)


def client_lengths(w: ServedWorkload, n: int) -> list[tuple[int, int]]:
    """The prompt and output tokens of the first ``n`` requests as SGLang's ``bench_serving`` draws them for a
    random dataset with ``--random-range-ratio`` ``w.min_length_ratio`` and ``--seed`` ``w.seed``: NumPy's
    global generator seeded with it, every prompt's length, then every output's, each uniform from
    ``max(int(ratio x length), 1)`` to the length (:data:`SOURCES` ``sglang-lengths``)."""
    rs = np.random.RandomState(w.seed)
    r = w.min_length_ratio
    prompts = rs.randint(max(int(w.prompt * r), 1), w.prompt + 1, size=n)
    outputs = rs.randint(max(int(w.output * r), 1), w.output + 1, size=n)
    return [(int(p), int(o)) for p, o in zip(prompts, outputs)]


def _mtp(source: str, table) -> Mtp | None:
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError(source, "[mtp]", f"must be a table, got {checks.show(table)}")
    _unknown(source, table, _MTP, "[mtp] ")
    check = _field(source, "[mtp] ")
    if "draft_tokens" not in table:
        raise ConfigError(source, "[mtp] draft_tokens", "missing: draft tokens per step")
    n = check(checks.integer, "draft_tokens", table["draft_tokens"], low=1, high=MAX_DRAFT_TOKENS)
    acc = check(checks.number, "acceptance", table["acceptance"], low=0, high=1) if "acceptance" in table else None
    return Mtp(draft_tokens=n, acceptance=acc)


def _names(source: str, data: dict) -> dict:
    """The top-level names, checked to exist: model, card, quantization scheme, engine, KV format."""
    from pdcalc.hardware.cards import get_card
    from pdcalc.model.config import load_config
    from pdcalc.model.quant import get_scheme, refuse_v4_recipe

    out = {}
    for key in ("model", "card", "engine"):
        if key not in data:
            raise ConfigError(source, key, "missing" + (f"; one of {', '.join(SERVING_ENGINES)}" if key == "engine"
                                                        else ": a preset name or a file path"))
        out[key] = _field(source, "")(checks.text, key, data[key])
    base = Path(source).parent if source not in ("spec", "") else Path(".")
    for key, loader in (("model", load_config), ("card", get_card)):
        value = out[key]
        path = base / value
        if ("/" in value or value.endswith((".json", ".toml"))) and path.is_file():
            value = out[key] = str(path)
        try:
            loader(value)
        except PdcalcError as exc:
            raise ConfigError(source, key, str(exc)) from None
    if out["engine"] not in SERVING_ENGINES:
        raise ConfigError(source, "engine", f"unknown engine {checks.show(out['engine'])}; known: "
                          f"{', '.join(SERVING_ENGINES)}")
    if data.get("quant") is not None:
        out["quant"] = _field(source, "")(checks.text, "quant", data["quant"])
        try:
            get_scheme(out["quant"])
        except PdcalcError as exc:
            raise ConfigError(source, "quant", str(exc)) from None
        try:
            refuse_v4_recipe(out["model"], out["quant"])
        except PdcalcError as exc:
            raise ConfigError(source, "quant", str(exc)) from None
    if data.get("kv_dtype") is not None:
        kv = _field(source, "")(checks.text, "kv_dtype", data["kv_dtype"])
        if kv not in KV_DTYPES:
            raise ConfigError(source, "kv_dtype", f"unknown KV format {checks.show(kv)}; known: {', '.join(KV_DTYPES)}")
        out["kv_dtype"] = kv
    if "graph" in data:
        out["graph"] = _field(source, "")(checks.boolean, "graph", data["graph"])
    return out


def _check_delayer(source: str, engine: str, roles: dict[str, Role]) -> None:
    """SGLang's prefill delayer (``--enable-prefill-delayer``) holds a DP rank's prompts until every DP-attention
    rank of the instance has prompts to prefill; SGLang allows it only with DP attention and without P/D
    disaggregation (``PrefillDelayer.__init__`` asserts both)."""
    for name, role in roles.items():
        if role.prefill_delay_passes is None:
            continue
        where = f"[{name}] prefill_delay_passes"
        if engine != "sglang":
            raise ConfigError(source, where, f"SGLang's --enable-prefill-delayer; engine is {engine!r}")
        if name != "serve":
            raise ConfigError(source, where, "SGLang's prefill delayer runs only co-located: give it in [serve]")
        if role.dp < 2:
            raise ConfigError(source, where, "SGLang's prefill delayer needs DP attention: dp of 2 or more")


def _check_layout(source: str, spec: ServedSpec) -> None:
    """Each role's TP degree divides the model's heads and its EP group can hold the routed experts."""
    from pdcalc.core.checks import tp_problem
    from pdcalc.model.config import load_config

    cfg = load_config(spec.model)
    v4 = cfg.model_type == "deepseek_v4"
    for name, role in spec.roles().items():
        problem = tp_problem(role.tp, heads=cfg.num_attention_heads, o_groups=cfg.o_groups if v4 else None,
                             index_heads=cfg.index_n_heads if v4 else None)
        if problem:
            raise ConfigError(source, f"[{name}] tp", f"TP degree {problem}")
        if role.swa_full_tokens_ratio is not None and (spec.engine != "sglang" or not v4):
            raise ConfigError(source, f"[{name}] swa_full_tokens_ratio", "SGLang's --swa-full-tokens-ratio sizes "
                              f"its DeepSeek-V4 pool; this spec runs {spec.model} on {spec.engine!r}")
        if not role.radix_cache and spec.engine != "sglang":
            raise ConfigError(source, f"[{name}] radix_cache", "SGLang's --disable-radix-cache; engine is "
                              f"{spec.engine!r}")
        if role.ep is not None and role.ep > cfg.n_routed_experts:
            raise ConfigError(source, f"[{name}] ep", f"{role.ep} exceeds the model's {cfg.n_routed_experts} routed "
                              f"experts: {role.ep - cfg.n_routed_experts} cards would hold no expert")


def spec_from_dict(data: dict, source: str = "spec") -> ServedSpec:
    """A :class:`ServedSpec` from a parsed TOML table; every field checked (a :class:`ConfigError` naming the
    field and what is allowed otherwise)."""
    if not isinstance(data, dict):
        raise ConfigError(source, None, "a spec is a TOML table")
    _unknown(source, data, _TOP, "")
    names = _names(source, data)
    present = [r for r in ROLES if r in data]
    if present == ["serve"]:
        roles = {"serve": _role(source, "serve", data["serve"])}
    elif sorted(present) == ["decode", "prefill"]:
        roles = {r: _role(source, r, data[r]) for r in ("prefill", "decode")}
    else:
        raise ConfigError(source, None, "give one [serve] table (co-located) or a [prefill] and a [decode] table "
                          f"(disaggregated); found: {', '.join(f'[{r}]' for r in present) or 'none'}")
    _check_delayer(source, names["engine"], roles)
    spec = ServedSpec(**names, **roles, mtp=_mtp(source, data.get("mtp")),
                      workload=_workload(source, data.get("workload")), source=source)
    if spec.cards > MAX_CARDS:
        raise ConfigError(source, None, f"{spec.cards:,} cards in all; at most {MAX_CARDS:,}")
    _check_layout(source, spec)
    return spec


def load_spec(path) -> ServedSpec:
    """A served deployment from a TOML file (see the module docstring)."""
    return spec_from_dict(load_toml(path, str(path)), str(path))
