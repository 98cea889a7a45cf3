"""Benchmark clients' result files: what vLLM, SGLang and AISBench wrote after measuring a served deployment.

:func:`read_result` reads one run from one of these files and returns it as a :class:`ClientResult`:

* **vLLM**: ``vllm bench serve --save-result`` (and the older ``benchmarks/benchmark_serving.py
  --save-result``). The file is one JSON object; with ``--append-result`` further objects follow, one per
  line. ``request_rate`` is the string ``"inf"`` when infinite. The per-request lists (``--save-detailed``,
  always present in the legacy script) are ignored.
* **SGLang**: ``python -m sglang.bench_serving --output-file X.jsonl``. The file is JSONL, one object
  appended per run, and ``request_rate`` inf is the bare token ``Infinity`` (not strict JSON, read here).
* **AISBench** (``ais_bench ... -m perf``): the common-metrics file
  ``performances/<model_abbr>/<dataset>.json``, shaped ``{"<Metric Name>": {"<stage>": value}}``, where
  durations and rates are strings with units (``"40152.6953 ms"``, ``"3264.3388 token/s"``,
  ``"0.797 req/s"``) and counts are bare numbers. The stage is ``"total"`` (``"stable"`` with the
  ``stable_stage`` summarizer). Latency statistics live in the ``.csv`` beside it, which this module
  does not read: an AISBench result has no TTFT, TPOT or ITL here.

Values are kept as the client computed them; nothing is recomputed from per-request data. The only
arithmetic is unit conversion (AISBench's ``ms`` duration to seconds) and the two means the record asks for,
``mean_input_tokens = total input tokens / completed`` and ``mean_output_tokens = total output tokens /
completed`` (both totals cover successful requests only, in all three clients). ``NaN`` in a file counts as
absent.

Metric definitions relied on (read in the clients' code; see ``tests/data/results/PROVENANCE.md``):

* vLLM ``vllm/benchmarks/serve.py`` at commit 009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1,
  ``vllm/benchmarks/lib/endpoint_request_func.py`` at 02cfb534df5674737558730b10f23d1b7aef9b7c and the
  legacy ``benchmarks/benchmark_serving.py`` at 0049e29c41fd383bda519a3f250e3227713081ef
  (vllm-project/vllm). ``duration`` is wall-clock seconds (``perf_counter``) from the first request's
  dispatch to the last response, warm-ups excluded. ``completed`` counts successful requests.
  ``output_throughput = sum(output_lens) / duration``; ``total_token_throughput = (total_input +
  sum(output_lens)) / duration``; ``request_throughput = completed / duration``. TTFT runs to the first
  streamed chunk with choices; TPOT per request is ``(E2EL - TTFT) / (output_len - 1)`` and is averaged
  over requests; ITL statistics pool every inter-chunk gap. TTFT and E2EL start after the
  ``--max-concurrency`` semaphore, so client-side queueing is excluded. ``max_concurrency`` is the
  client's cap on requests in flight (null or 0: none, ``Semaphore(n) if n else nullcontext()``);
  ``request_rate`` inf sends every request at time 0.
* SGLang ``sglang/bench_serving.py`` of the PyPI wheel sglang 0.5.6 (the same formulas in
  ``sglang/benchmark/serving.py`` from 0.5.23). The same definitions as vLLM, except: the total is
  ``total_throughput`` (not ``total_token_throughput``); ``duration`` also covers one
  ``/get_server_info`` call for ``sglang*`` backends; ``ignore_eos`` is on by default; ``num_prompts`` and
  the model name are not saved (the model is taken from ``server_info.model_path`` where present).
* AISBench github.com/AISBench/benchmark at 29c363e38e9d1560e6f19eff582f6117943b6a77
  (``ais_bench/benchmark/calculators/base_perf_metric_calculator.py``, ``summarizers/default_perf.py``,
  ``utils/results/results.py``). ``Benchmark Duration`` is the last request's last chunk minus the first
  request's send, in ms; ``Output Token Throughput = Total Generated Tokens / duration``; ``Total Token
  Throughput = (Total Input Tokens + Total Generated Tokens) / duration``; ``Request Throughput = Success
  Requests / duration`` (each rounded to 4 decimals by the client). Token totals cover successful requests
  only. ``Max Concurrency`` is the model config's ``batch_size``, the client's cap on requests in flight.
  The request rate is not written to the file.

Key variants across client versions that are read:

* vLLM before ``total_token_throughput`` (v0.5/0.6) wrote ``input_throughput``, which is *input* tokens
  per second, not the total: such a file has ``total_tokens_per_s`` None. vllm-ascend CI files of early 2025
  hold only the configuration and the TTFT/TPOT/ITL statistics (no duration, counts or throughput).
* SGLang lines of late 2024 hold a short key set: no ``request_throughput``, ``total_throughput``, mean
  TTFT or any TPOT (``median_ttft_ms`` and ``median_itl_ms`` only). ``request_rate`` may be ``"trace"``
  (timestamp replay): read as None.
* AISBench keys are matched ignoring case and repeated spaces: the code writes ``"Total Generated
  Tokens"``, older builds and the MindIE docs ``"Total generated tokens"``; ``"Total Output Tokens"`` is
  accepted too.

Layer ``reality``; it imports only :mod:`pdcalc.core.errors`.

Every problem with a file (unreadable, not UTF-8, not JSON, not one of these clients, a value of the wrong
type or sign, a run index out of range, a run in which every request failed) is one
:class:`~pdcalc.core.errors.ConfigError` naming the file.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass

from pdcalc.core.errors import ConfigError, read_user_file

CLIENTS = ("vllm", "sglang", "aisbench")
CLIENT_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "aisbench": "AISBench"}

#: Largest result file read. A ``--save-detailed`` vLLM file carries every generated text, so it can be
#: far larger than a configuration file; beyond this it is refused rather than parsed.
MAX_RESULT_BYTES = 64 * 2**20


@dataclass(frozen=True, kw_only=True)
class ClientResult:
    """One benchmark run as its client reported it. Absent values are None; times in ms unless named ``_s``."""

    client: str                     #: one of :data:`CLIENTS`
    source: str                     #: the file as given (for messages)
    run: int                        #: which run (line) of a JSONL file, 0-based; 0 for single-object files
    completed: int | None           #: requests that finished successfully
    duration_s: float | None        #: wall-clock length of the benchmark, seconds
    output_tokens_per_s: float | None
    total_tokens_per_s: float | None
    request_throughput: float | None  #: completed requests per second
    mean_ttft_ms: float | None
    median_ttft_ms: float | None
    mean_tpot_ms: float | None
    median_tpot_ms: float | None
    mean_itl_ms: float | None
    concurrency: int | None         #: the client's cap on requests in flight (None: unbounded)
    request_rate: float | None      #: requests per second; ``math.inf`` when all were sent at once
    num_prompts: int | None         #: requests the client was asked to send
    mean_input_tokens: float | None   #: total input tokens / completed
    mean_output_tokens: float | None  #: total output tokens / completed
    model_id: str | None


#: Values that carry a measurement; a run with none of them is not usable.
MEASURED = ("duration_s", "output_tokens_per_s", "total_tokens_per_s", "request_throughput", "mean_ttft_ms",
            "median_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "mean_itl_ms")

#: Keys only SGLang's bench_serving writes (any version).
SGLANG_KEYS = frozenset({"total_output_tokens_retokenized", "total_throughput", "mean_e2e_latency_ms",
                         "median_e2e_latency_ms", "server_info", "accept_length", "random_range_ratio",
                         "sharegpt_output_len", "total_input_text_tokens"})
#: Keys only vLLM's benchmark scripts write (any version).
VLLM_KEYS = frozenset({"model_id", "model_ids", "tokenizer_id", "burstiness", "endpoint_type", "best_of",
                       "use_beam_search", "total_token_throughput", "request_goodput", "request_goodput:",
                       "mean_e2el_ms", "median_e2el_ms", "rtfx"})
#: Metric keys shared by vLLM and SGLang: a file with none of them is neither.
SERVE_METRIC_KEYS = ("output_throughput", "mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
                     "mean_itl_ms", "median_itl_ms")

#: ClientResult field -> the key vLLM and SGLang write it under (the first present one is read).
SERVE_FLOATS = {
    "duration_s": ("duration",),
    "output_tokens_per_s": ("output_throughput",),
    "request_throughput": ("request_throughput",),
    "mean_ttft_ms": ("mean_ttft_ms",),
    "median_ttft_ms": ("median_ttft_ms",),
    "mean_tpot_ms": ("mean_tpot_ms",),
    "median_tpot_ms": ("median_tpot_ms",),
    "mean_itl_ms": ("mean_itl_ms",),
}
#: The total-token rate: vLLM's and SGLang's names differ (vLLM's old ``input_throughput`` is not a total).
TOTAL_RATE_KEYS = {"vllm": ("total_token_throughput",), "sglang": ("total_throughput", "total_token_throughput")}

#: AISBench common metric (normalised: case-folded, single spaces) -> (ClientResult field, unit written).
AIS_RATES = {
    "benchmark duration": ("duration_s", "ms"),
    "output token throughput": ("output_tokens_per_s", "token/s"),
    "total token throughput": ("total_tokens_per_s", "token/s"),
    "request throughput": ("request_throughput", "req/s"),
}
AIS_GENERATED = ("total generated tokens", "total output tokens")
#: Normalised AISBench keys that mark its common-metrics file.
AIS_MARKERS = ("output token throughput", "benchmark duration")
#: Stage preferred when an AISBench file holds several.
AIS_STAGES = ("total", "stable")

_UNIT_VALUE = re.compile(r"\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?inf(?:inity)?|nan)\s*(\S*)\s*",
                         re.IGNORECASE)


class _Where:
    """Where a run sits, for messages: the file as given and, in a file of several runs, the run and line."""

    def __init__(self, source: str, prefix: str = ""):
        self.source, self.prefix = source, prefix

    def error(self, field: str | None, message: str) -> ConfigError:
        return ConfigError(self.source, field, self.prefix + message)


def read_result(path, *, client: str | None = None, run: int | None = None) -> ClientResult:
    """One run of a benchmark client's result file (see the module docstring for the formats).

    ``client`` (one of :data:`CLIENTS`) skips detection from the content; ``run`` picks a run of a file of
    several (0-based; default: the last, the most recently appended). Any problem is one
    :class:`~pdcalc.core.errors.ConfigError` naming the file, a run in which every request failed included.
    """
    source = os.fspath(path) if isinstance(path, os.PathLike) else str(path)
    if client is not None and client not in CLIENTS:
        raise ConfigError(source, "client", f"unknown client {client!r}; known: {', '.join(CLIENTS)}")
    if run is not None and (isinstance(run, bool) or not isinstance(run, int) or run < 0):
        raise ConfigError(source, "run", f"a run is a line number counted from 0, not {run!r}")
    records = _records(read_user_file(path, source, max_bytes=MAX_RESULT_BYTES), source)
    if run is not None and run >= len(records):
        held = "1 run (run 0)" if len(records) == 1 else f"{len(records)} runs (0 to {len(records) - 1})"
        raise ConfigError(source, "run", f"no run {run}: the file holds {held}")
    index = len(records) - 1 if run is None else run
    line, obj = records[index]
    where = _Where(source, f"run {index} (line {line}): " if len(records) > 1 else "")
    kind = client or _detect(obj, where)
    values = _AIS(obj, where).values() if kind == "aisbench" else _serve_values(kind, obj, where)
    result = ClientResult(client=kind, source=source, run=index, **values)
    _check_usable(result, obj, where)
    return result


def _records(data: bytes, source: str) -> list[tuple[int, dict]]:
    """The JSON objects of a result file with the line each starts on: one for a JSON file, one per non-blank
    line for JSONL."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(source, None, f"not UTF-8 text (byte 0x{exc.object[exc.start:exc.start + 1].hex()} "
                                        f"at offset {exc.start:,}); result files are JSON") from None
    if not text.strip():
        raise ConfigError(source, None, "empty file; expected a benchmark client's JSON or JSONL result")
    try:
        whole = json.loads(text)
    except json.JSONDecodeError as exc:
        if not exc.msg.startswith("Extra data"):
            raise ConfigError(source, None, _json_problem(exc, text)) from None
        extra = exc                                 # more than one value: JSONL, one object per line
    except (ValueError, RecursionError) as exc:
        raise ConfigError(source, None, f"not usable JSON ({_short(exc)})") from None
    else:
        return [(1, _object(whole, source, ""))]
    records = []
    for number, line in enumerate(text.split("\n"), start=1):   # not splitlines: U+2028 may sit in a string
        if not line.strip():
            continue
        try:
            records.append((number, _object(json.loads(line), source, f"line {number}: ")))
        except json.JSONDecodeError as exc:
            if not records:                         # not line-structured: one JSON value and then more text
                raise ConfigError(source, None, _json_problem(extra, text)) from None
            raise ConfigError(source, None, f"line {number}: {_json_problem(exc, line, lines=False)}") from None
        except (ValueError, RecursionError) as exc:
            raise ConfigError(source, None, f"line {number}: not usable JSON ({_short(exc)})") from None
    return records


def _object(value, source: str, prefix: str) -> dict:
    if not isinstance(value, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(value),
                                                                                             "a number")
        raise ConfigError(source, None, f"{prefix}JSON {kind}, not a benchmark result (a JSON object)")
    return value


def _json_problem(exc: json.JSONDecodeError, text: str, *, lines: bool = True) -> str:
    where = f"line {exc.lineno} column {exc.colno}" if lines else f"column {exc.colno}"
    ends = exc.pos >= len(text.rstrip())
    return f"not valid JSON ({exc.msg} at {where}){'; the text ends early: truncated?' if ends else ''}"


def _short(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "arrays or objects nested too deeply"
    text = " ".join(str(exc).split())
    return text[:200] or type(exc).__name__


def _norm(key) -> str:
    return " ".join(str(key).split()).casefold()


def _detect(obj: dict, where: _Where) -> str:
    """Which client wrote ``obj``, from its keys."""
    if any(_norm(k) in AIS_MARKERS for k in obj):
        return "aisbench"
    keys = set(obj)
    if "backend" in keys and keys & set(SERVE_METRIC_KEYS) and keys & {"request_rate", "max_concurrency"}:
        sglang, vllm = sorted(keys & SGLANG_KEYS), sorted(keys & VLLM_KEYS)
        if sglang and not vllm:
            return "sglang"
        if vllm and not sglang:
            return "vllm"
        if not sglang and not vllm:
            raise where.error(None, "a vLLM or SGLang serving result, but it has none of the keys that tell "
                                    "them apart; name the client (vllm or sglang)")
        raise where.error(None, f"has keys of both vLLM ({', '.join(vllm)}) and SGLang ({', '.join(sglang)}) "
                                "results; name the client (vllm or sglang)")
    if "output_throughput" not in keys and "output token throughput" not in {_norm(k) for k in keys}:
        why = "no output throughput ('output_throughput' or 'Output Token Throughput')"
    elif "backend" not in keys:
        why = "no 'backend'"
    else:
        why = "no 'request_rate' or 'max_concurrency'"
    raise where.error(None, f"not a vLLM, SGLang or AISBench result: {why}; {_keys_seen(obj)}")


def _keys_seen(obj: dict) -> str:
    if not obj:
        return "the object is empty"
    shown = ", ".join(repr(str(k)[:40]) for k in list(obj)[:8])
    return f"its keys: {shown}{', ...' if len(obj) > 8 else ''}"


def _serve_values(kind: str, obj: dict, where: _Where) -> dict:
    """The ClientResult fields of a vLLM or SGLang run (their saved keys coincide but for a few)."""
    name = CLIENT_NAMES[kind]
    if "output_throughput" not in obj and not obj.keys() & set(SERVE_METRIC_KEYS):
        raise where.error(None, f"not a {name} result: no output throughput or latency statistic; "
                                f"{_keys_seen(obj)}")
    values = {field: _number(obj, keys, where) for field, keys in SERVE_FLOATS.items()}
    values["total_tokens_per_s"] = _number(obj, TOTAL_RATE_KEYS[kind], where)
    completed = _count(obj, "completed", where)
    values.update(completed=completed, concurrency=_count(obj, "max_concurrency", where) or None,
                  request_rate=_rate(obj, where), num_prompts=_count(obj, "num_prompts", where),
                  mean_input_tokens=_per_request(_count(obj, "total_input_tokens", where), completed),
                  mean_output_tokens=_per_request(_count(obj, "total_output_tokens", where), completed),
                  model_id=_text(obj, "model_id", where) if kind == "vllm" else _sglang_model(obj, where))
    return values


def _sglang_model(obj: dict, where: _Where) -> str | None:
    """SGLang saves no model name; its ``server_info`` has ``model_path`` (a router's: per server, in lists)."""
    if "model_id" in obj:
        return _text(obj, "model_id", where)
    info = obj.get("server_info")
    if not isinstance(info, dict):
        return None
    if isinstance(info.get("model_path"), str):
        return info["model_path"]
    for group in ("internal_states", "prefill", "decode"):
        servers = info.get(group)
        if isinstance(servers, list) and servers and isinstance(servers[0], dict) \
                and isinstance(servers[0].get("model_path"), str):
            return servers[0]["model_path"]
    return None


class _AIS:
    """An AISBench common-metrics object, read at one stage."""

    def __init__(self, obj: dict, where: _Where):
        self.where, self.keys = where, {}
        for key in obj:
            self.keys.setdefault(_norm(key), key)
        self.obj = obj
        if not any(k in self.keys for k in AIS_MARKERS):
            raise where.error(None, "not an AISBench result: no 'Output Token Throughput' or 'Benchmark "
                                    f"Duration'; {_keys_seen(obj)}")
        self.stage = self._stage()

    def _stage(self) -> str | None:
        stages = []
        for key in self.keys.values():
            if isinstance(self.obj[key], dict):
                stages += [s for s in self.obj[key] if s not in stages]
        if not stages:
            return None
        if len(stages) == 1:
            return stages[0]
        for stage in AIS_STAGES:
            if stage in stages:
                return stage
        raise self.where.error(None, f"AISBench result with several stages ({', '.join(map(str, stages))}) "
                                     f"and none of {', '.join(AIS_STAGES)}")

    def raw(self, name: str):
        """(key as written, value at the stage) of the metric ``name`` (normalised), or (None, None)."""
        key = self.keys.get(name)
        if key is None:
            return None, None
        value = self.obj[key]
        if isinstance(value, dict):
            return key, value.get(self.stage)
        return key, value

    def rate(self, name: str, unit: str) -> float | None:
        key, value = self.raw(name)
        if value is None:
            return None
        if isinstance(value, str):
            match = _UNIT_VALUE.fullmatch(value)
            if not match:
                raise self.where.error(key, f"{_shown(value)} is not a number with a unit ({unit})")
            number, written = match.groups()
            if written and written != unit:
                raise self.where.error(key, f"{_shown(value)} is in {written!r}; AISBench writes {unit!r}")
            value = float(number)
        return _checked(value, key, self.where)

    def count(self, name: str) -> int | None:
        key, value = self.raw(name)
        return None if value is None else _checked_count(value, key, self.where)

    def values(self) -> dict:
        values = {field: self.rate(name, unit) for name, (field, unit) in AIS_RATES.items()}
        if values["duration_s"] is not None:
            values["duration_s"] /= 1000.0                      # AISBench writes ms
        completed = self.count("success requests")
        generated = next((self.count(n) for n in AIS_GENERATED if n in self.keys), None)
        cap = self.count("max concurrency")
        if cap == 0:
            raise self.where.error(self.keys["max concurrency"], "a concurrency cap of 0 admits no request")
        values.update(completed=completed, concurrency=cap, request_rate=None,
                      num_prompts=self.count("total requests"),
                      mean_input_tokens=_per_request(self.count("total input tokens"), completed),
                      mean_output_tokens=_per_request(generated, completed), model_id=None,
                      **{f: None for f in ("mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
                                           "mean_itl_ms")})
        return values


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _checked(value, key: str, where: _Where) -> float | None:
    """A non-negative finite number (NaN: absent); anything else names ``key``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise where.error(key, f"{_shown(value)} is not a number")
    value = float(value)
    if math.isnan(value):
        return None
    if math.isinf(value) or value < 0:
        raise where.error(key, f"{value!r} is not a finite non-negative number")
    return value


def _checked_count(value, key: str, where: _Where) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 \
            or (isinstance(value, float) and not value.is_integer()):      # is_integer: NaN and inf too
        raise where.error(key, f"{_shown(value)} is not a count (a whole number, 0 or more)")
    return int(value)


def _number(obj: dict, keys: tuple, where: _Where) -> float | None:
    key = next((k for k in keys if k in obj), None)
    return None if key is None or obj[key] is None else _checked(obj[key], key, where)


def _count(obj: dict, key: str, where: _Where) -> int | None:
    return None if obj.get(key) is None else _checked_count(obj[key], key, where)


def _rate(obj: dict, where: _Where) -> float | None:
    """``request_rate``: a number, ``"inf"`` (vLLM) or ``Infinity`` (SGLang) for all at once; SGLang's
    ``"trace"`` (timestamp replay) has no rate."""
    value = obj.get("request_rate")
    if value is None or value == "trace":
        return None
    if isinstance(value, str) and value.strip().casefold() in ("inf", "infinity"):
        return math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise where.error("request_rate", f"{_shown(value)} is not a request rate (a positive number or inf)")
    return float(value)


def _text(obj: dict, key: str, where: _Where) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise where.error(key, f"{_shown(value)} is not a name")
    return value


def _per_request(total: int | None, completed: int | None) -> float | None:
    return total / completed if total is not None and completed else None


def _check_usable(result: ClientResult, obj: dict, where: _Where) -> None:
    """A run from which nothing can be calibrated is an error: every request failed, or no measurement."""
    if result.completed == 0:
        failed = obj.get("failed")
        if result.client == "aisbench":
            failed = _AIS(obj, where).count("failed requests")
        known = isinstance(failed, int) and not isinstance(failed, bool) and failed > 0
        told = f"0 completed, {failed} failed" if known else "0 completed"
        raise where.error(None, f"every request failed ({told}): the run measured nothing to calibrate from")
    if all(getattr(result, f) is None for f in MEASURED):
        raise where.error(None, f"a {CLIENT_NAMES[result.client]} result without a duration, throughput "
                                "or latency statistic")

