"""The served-benchmark corpus: published numbers a benchmark client printed for a served DeepSeek-family
deployment (``vllm bench serve``, SGLang ``bench_serving``, AISBench, ``trtllm-bench`` ...), each with the
deployment and workload that produced it as a served-deployment spec (:mod:`pdcalc.layout.served`).

``pdcalc/data/served.toml`` holds one ``[[run]]`` per published deployment x workload:

- metadata: ``id`` (unique), ``source_id`` (one document or configuration file: the runs read from one document
  share it and are held out together when a model is validated source by source), ``source``, ``url``,
  ``locator`` (where in the source), ``date``, ``serving``, ``kind`` (``"measured"``, or ``"baseline"``: a
  threshold an engine's CI expects to reach, set by its maintainers from nightly runs), and as the source states
  them ``model_stated``, ``card_stated``, ``quant_stated``, ``engine_version``, ``client``, ``graph_mode``;
  ``unstated`` (the conditions the source does not give) and ``notes``;
- ``not_predictable``: why the run cannot be predicted from a spec (a model, card or quantization without a
  preset, a layout or workload the source does not state, a serving feature the spec has no field for), absent
  when it can;
- ``[run.spec]``: the deployment as :func:`pdcalc.layout.served.spec_from_dict` reads it (cards as the engine
  counts devices, ``tp x dp`` cards per instance, ``max_num_seqs`` per DP rank). Only names pdcalc knows are
  given: a run whose model, card or quantization has no preset leaves it out, and its spec does not validate
  (:attr:`ServedRun.spec` is None, :attr:`ServedRun.spec_error` says why);
- ``[run.launch]``: each role's launch flags, verbatim (text);
- ``[[run.metric]]``: ``name``, ``value`` exactly as printed (the unit is the name's: ``_ms`` milliseconds,
  ``_s`` seconds, ``tokens_per_s`` tokens per second), a verbatim ``quote`` that prints the value, ``scope``
  (``"deployment"``, ``"per card"``, ``"per node"``, ``"per user"``) and ``kind``.

Every entry is checked when loaded: unique ids, known fields, quotes that print their values, a spec that
validates for every run that is not marked ``not_predictable``. A malformed entry is a one-line
:class:`~pdcalc.core.errors.ConfigError` naming the run and the field.

Examples
--------
>>> from pdcalc.reality import served_runs
>>> run = served_runs.get("sglang-cookbook-r1-b200-tp8-1k1k-c16")
>>> run.vendor, run.model_family, run.spec.cards, run.metric("output_tokens_per_s").value
('nvidia', 'v3', 8, 795.3)
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field, fields
from functools import cache
from importlib import resources
from types import MappingProxyType

import pandas as pd

from pdcalc.core.errors import ConfigError, PdcalcError, UnknownNameError, load_toml
from pdcalc.core.quotes import number_in_text
from pdcalc.hardware.cards import card_names, get_card
from pdcalc.layout.served import ROLES, Mtp, Role, ServedSpec, ServedWorkload, spec_from_dict

#: Where the packaged corpus lives (used in error messages).
DEFAULT_SOURCE = "pdcalc/data/served.toml"
#: ``kind`` of a run or a metric: a published measurement, or a CI baseline.
KINDS = ("measured", "baseline")
#: What a metric's value is per.
SCOPES = ("deployment", "per card", "per node", "per user")
#: Metric names (the unit is in the name; values are kept as printed).
METRIC_NAMES = (
    "output_tokens_per_s", "total_tokens_per_s", "request_throughput", "output_tokens_per_s_per_card",
    "output_tokens_per_s_per_user", "total_tokens_per_s_per_card", "input_tokens_per_s_per_card",
    "tpot_ms_mean", "tpot_ms_median", "tpot_ms_p99", "tpot_ms", "tpot_s", "itl_ms_mean",
    "ttft_ms_mean", "ttft_ms_median", "ttft_ms_p99", "ttft_s", "e2el_ms_mean", "acceptance_length",
)
#: Model families a run belongs to (the architecture, not the checkpoint).
MODEL_FAMILIES = ("v3", "v3.2", "v4", "kimi-k2")
#: Model presets by family (DeepSeek-R1, V3.1 and V3.1-Terminus share DeepSeek-V3's architecture).
PRESET_FAMILY = {"deepseek-v3": "v3", "deepseek-v3.2-exp": "v3.2", "deepseek-v4-flash": "v4", "deepseek-v4-pro": "v4",
                 "kimi-k2": "kimi-k2"}
#: Metric values :func:`frame` gives a column each.
FRAME_METRICS = ("output_tokens_per_s", "output_tokens_per_s_per_card", "tpot_ms_mean", "ttft_ms_mean")

_TEXT = ("id", "source_id", "source", "url", "locator", "model_stated", "card_stated", "engine_version", "client",
         "graph_mode", "notes", "kind")
_OPTIONAL_TEXT = ("date", "serving", "quant_stated", "not_predictable")
_RUN_KEYS = frozenset(_TEXT + _OPTIONAL_TEXT + ("unstated", "spec", "launch", "metric"))
_METRIC_KEYS = ("name", "value", "quote", "scope", "kind")
#: Keys each table of a spec may hold (read from the spec's own dataclasses).
_SPEC_KEYS = {
    "": frozenset(f.name for f in fields(ServedSpec)) - {"source"},
    **{r: frozenset(f.name for f in fields(Role)) for r in ROLES},
    "mtp": frozenset(f.name for f in fields(Mtp)),
    "workload": frozenset(f.name for f in fields(ServedWorkload)),
}
_SLUG = re.compile(r"[a-z0-9]+(?:[-.][a-z0-9]+)*")


@dataclass(frozen=True)
class Metric:
    """One printed number of a run: ``value`` as printed, in the unit its ``name`` says."""

    name: str
    value: float
    quote: str
    scope: str
    kind: str


@dataclass(frozen=True)
class ServedRun:
    """One published served run: where it was read, the deployment as a spec, and the numbers it printed."""

    id: str
    source_id: str
    source: str
    url: str
    locator: str
    date: str
    model_stated: str
    card_stated: str
    engine_version: str
    client: str
    graph_mode: str
    notes: str
    unstated: tuple[str, ...]
    kind: str
    not_predictable: str | None
    spec: ServedSpec | None
    metrics: tuple[Metric, ...]
    quant_stated: str = ""
    serving_stated: str = ""
    launch: tuple[tuple[str, str], ...] = ()
    spec_error: str | None = None               # why the spec does not validate (only for not_predictable runs)
    spec_table: MappingProxyType = field(default_factory=lambda: MappingProxyType({}), compare=False, repr=False)

    @property
    def predictable(self) -> bool:
        """Whether the run can be predicted from its spec."""
        return self.not_predictable is None

    @property
    def card(self) -> str | None:
        """The card preset of the spec (None where the card has none)."""
        return self.spec_table.get("card")

    @property
    def engine(self) -> str | None:
        return self.spec_table.get("engine")

    @property
    def vendor(self) -> str:
        """``"ascend"``, ``"nvidia"``, ... : the family of the card preset, else read from ``card_stated``."""
        if self.card in card_names():
            return get_card(self.card).family
        text = self.card_stated.lower()
        if re.search(r"\bmi3\d\d|amd|instinct", text):
            return "amd"
        if re.search(r"ascend|atlas|910|\ba[23]\b", text):
            return "ascend"
        if re.search(r"nvidia|\b[bgh]\d{2,3}|\bgb\d{3}", text):
            return "nvidia"
        return "unknown"

    @property
    def model_family(self) -> str:
        """``"v3"`` (DeepSeek-V3, R1, V3.1), ``"v3.2"``, ``"v4"`` (V4-Flash, V4-Pro) or ``"kimi-k2"``."""
        preset = self.spec_table.get("model")
        if preset in PRESET_FAMILY:
            return PRESET_FAMILY[preset]
        text = self.model_stated.lower()
        for pattern, family in ((r"kimi", "kimi-k2"), (r"v4", "v4"), (r"v3\.2", "v3.2"), (r"r1|v3", "v3")):
            if re.search(pattern, text):
                return family
        return "unknown"

    @property
    def serving(self) -> str:
        """``"colocated"`` (one ``[serve]`` role) or ``"disaggregated"`` (prefill and decode apart)."""
        if "serve" in self.spec_table:
            return "colocated"
        if "prefill" in self.spec_table or "decode" in self.spec_table:
            return "disaggregated"
        return "disaggregated" if "disaggregated" in self.serving_stated else "colocated"

    @property
    def cards(self) -> int | None:
        """Every card of the deployment as the engine counts them; None where a role's layout is not stated."""
        if self.spec is not None:
            return self.spec.cards
        roles = [self.spec_table[r] for r in ROLES if r in self.spec_table]
        if not roles or any("tp" not in t and "dp" not in t for t in roles):
            return None
        return sum(t.get("instances", 1) * t.get("tp", 1) * t.get("dp", 1) for t in roles)

    def metric(self, name: str) -> Metric | None:
        """The run's first metric called ``name`` (None if it printed none)."""
        return next((m for m in self.metrics if m.name == name), None)


# ------------------------------------------------------------------------------ checks
def _fail(label: str, where: str | None, message: str):
    raise ConfigError(label, where, message)


def _text(label: str, where: str, value, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        _fail(label, where, f"must be a {'' if allow_empty else 'non-empty '}text, got {value!r}")
    return value


def _check_keys(label: str, table: dict, allowed, where: str) -> None:
    for key in table:
        if key not in allowed:
            _fail(label, f"{where}{key}", f"unknown field; allowed: {', '.join(sorted(allowed))}")


def _metric(label: str, i: int, m) -> Metric:
    where = f"metric[{i}]"
    if not isinstance(m, dict):
        _fail(label, where, "must be a table of name, value, quote, scope, kind")
    _check_keys(label, m, _METRIC_KEYS, f"{where}.")
    for key in _METRIC_KEYS:
        if key not in m:
            _fail(label, f"{where}.{key}", "missing")
    name = _text(label, f"{where}.name", m["name"])
    if name not in METRIC_NAMES:
        _fail(label, f"{where}.name", f"unknown metric {name!r}; known: {', '.join(METRIC_NAMES)}")
    value = m["value"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        _fail(label, f"{where}.value", f"must be a finite number >= 0 as printed, got {value!r}")
    quote = _text(label, f"{where}.quote", m["quote"])
    if not number_in_text(value, quote):
        _fail(label, f"{where}.quote", f"does not print the value {value!r} ({name}): {quote[:80]!r}")
    if m["scope"] not in SCOPES:
        _fail(label, f"{where}.scope", f"must be one of {', '.join(SCOPES)}, got {m['scope']!r}")
    if m["kind"] not in KINDS:
        _fail(label, f"{where}.kind", f"must be one of {', '.join(KINDS)}, got {m['kind']!r}")
    return Metric(name=name, value=float(value), quote=quote, scope=m["scope"], kind=m["kind"])


def _spec_table(label: str, table) -> dict:
    """The ``[run.spec]`` table with every key known (values are checked by :func:`spec_from_dict`)."""
    if not isinstance(table, dict):
        _fail(label, "spec", "missing: give the [run.spec] table (model, card, engine, roles, workload)")
    _check_keys(label, table, _SPEC_KEYS[""], "spec.")
    for key, sub in table.items():
        if key in _SPEC_KEYS and key:
            if not isinstance(sub, dict):
                _fail(label, f"spec.{key}", f"must be a table, got {sub!r}")
            _check_keys(label, sub, _SPEC_KEYS[key], f"spec.{key}.")
    return table


def _spec(label: str, table: dict, predictable: bool) -> tuple[ServedSpec | None, str | None]:
    """The validated spec; for a run marked ``not_predictable`` a spec that does not validate is None and the
    reason is returned instead of raised."""
    try:
        spec = spec_from_dict(table, label)
    except PdcalcError as exc:
        if predictable:
            raise
        return None, str(exc).removeprefix(f"{label}: ")
    if predictable and spec.quant is None:
        _fail(label, "spec.quant", "missing: a predictable run states its quantization scheme")
    return spec, None


def _launch(label: str, table) -> tuple[tuple[str, str], ...]:
    if table is None:
        return ()
    if not isinstance(table, dict):
        _fail(label, "launch", f"must be a table of role = \"flags\", got {table!r}")
    _check_keys(label, table, ROLES, "launch.")
    return tuple((role, _text(label, f"launch.{role}", flags)) for role, flags in table.items())


def run_from_dict(data, source: str = DEFAULT_SOURCE) -> ServedRun:
    """A :class:`ServedRun` from one ``[[run]]`` table; every field checked (a :class:`ConfigError` naming the run
    and the field otherwise)."""
    if not isinstance(data, dict):
        raise ConfigError(source, "run", f"each [[run]] must be a table, got {data!r}")
    rid = data.get("id")
    if not isinstance(rid, str) or not _SLUG.fullmatch(rid):
        raise ConfigError(source, "id", f"must be a lower-case slug (letters, digits, '-' or '.'), got {rid!r}")
    label = f"{source}: run {rid}"
    _check_keys(label, data, _RUN_KEYS, "")
    text = {k: _text(label, k, data.get(k)) for k in _TEXT}
    opt = {k: _text(label, k, data.get(k, ""), allow_empty=True) for k in _OPTIONAL_TEXT}
    if text["kind"] not in KINDS:
        _fail(label, "kind", f"must be one of {', '.join(KINDS)}, got {text['kind']!r}")
    reason = data.get("not_predictable")
    if reason is not None and not reason.strip():
        _fail(label, "not_predictable", "give the reason the run cannot be predicted, or leave the field out")
    unstated = data.get("unstated", [])
    if not isinstance(unstated, list) or not all(isinstance(u, str) and u.strip() for u in unstated):
        _fail(label, "unstated", f"must be a list of condition names, got {unstated!r}")
    metrics = data.get("metric")
    if not isinstance(metrics, list) or not metrics:
        _fail(label, "metric", "missing: give at least one [[run.metric]]")
    metrics = tuple(_metric(label, i, m) for i, m in enumerate(metrics))
    want = "baseline" if {m.kind for m in metrics} == {"baseline"} else "measured"
    if text["kind"] != want:
        _fail(label, "kind", f"is {text['kind']!r} but the metrics make it {want!r} (baseline: every metric a "
              "CI baseline)")
    table = _spec_table(label, data.get("spec"))
    spec, error = _spec(label, table, reason is None)
    return ServedRun(**{k: text[k] for k in _TEXT}, date=opt["date"], quant_stated=opt["quant_stated"],
                     serving_stated=opt["serving"], unstated=tuple(unstated), not_predictable=reason, spec=spec,
                     spec_error=error, metrics=metrics, launch=_launch(label, data.get("launch")),
                     spec_table=_freeze(table))


def _freeze(table: dict) -> MappingProxyType:
    return MappingProxyType({k: _freeze(v) if isinstance(v, dict) else v for k, v in table.items()})


# ------------------------------------------------------------------------------ the corpus
def load_file(path, source: str | None = None) -> tuple[ServedRun, ...]:
    """Every run of a served-corpus TOML file (the packaged one's format), checked; ids must be unique."""
    source = source or str(path)
    data = load_toml(path, source)
    runs = data.get("run")
    if not isinstance(runs, list) or not runs:
        raise ConfigError(source, "run", "no [[run]] tables")
    out, seen = [], set()
    for entry in runs:
        run = run_from_dict(entry, source)
        if run.id in seen:
            raise ConfigError(f"{source}: run {run.id}", "id", "duplicate id: every run has its own")
        seen.add(run.id)
        out.append(run)
    return tuple(out)


@cache
def load() -> tuple[ServedRun, ...]:
    """The packaged corpus (``pdcalc/data/served.toml``), checked once and cached."""
    return load_file(resources.files("pdcalc").joinpath("data", "served.toml"), DEFAULT_SOURCE)


def get(run_id: str) -> ServedRun:
    """The run called ``run_id`` (an :class:`~pdcalc.core.errors.UnknownNameError` listing the closest ids
    otherwise)."""
    runs = {r.id: r for r in load()}
    if run_id not in runs:
        raise UnknownNameError("served run", run_id, runs)
    return runs[run_id]


def _row(run: ServedRun) -> dict:
    work = run.spec_table.get("workload", {})
    rate = work.get("request_rate")
    mtp = run.spec_table.get("mtp", {})
    row = {
        "id": run.id, "source_id": run.source_id, "vendor": run.vendor, "model_family": run.model_family,
        "engine": run.engine, "card": run.card, "serving": run.serving,
        "cards": float("nan") if run.cards is None else run.cards,
        "prompt": work.get("prompt"), "output": work.get("output"), "concurrency": work.get("concurrency"),
        "request_rate": math.inf if rate == "inf" else rate, "num_prompts": work.get("num_prompts"),
        "dataset": work.get("dataset", "random"), "draft_tokens": mtp.get("draft_tokens", 0),
        "kind": run.kind, "predictable": run.predictable,
    }
    for name in FRAME_METRICS:
        m = run.metric(name)
        row[name] = m.value if m else float("nan")
    return row


def frame() -> pd.DataFrame:
    """One row per run: where it comes from, its deployment and workload (as far as stated), whether it can be
    predicted, and the measured values of :data:`FRAME_METRICS` (NaN where the run printed none)."""
    df = pd.DataFrame([_row(r) for r in load()])
    for col in ("prompt", "output", "concurrency", "request_rate", "num_prompts"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
    return df


def summary() -> dict:
    """Counts of the corpus: runs, sources, Ascend runs (and those on A2 / 910B cards), DeepSeek-V4 runs,
    engines, predictable runs; and runs by vendor, engine, model family and kind."""
    runs = load()
    return {
        "runs": len(runs),
        "sources": len({r.source_id for r in runs}),
        "ascend": sum(r.vendor == "ascend" for r in runs),
        "ascend_910b": sum((r.card or "").startswith("ascend-910b") for r in runs),
        "v4": sum(r.model_family == "v4" for r in runs),
        "engines": len({r.engine for r in runs}),
        "predictable": sum(r.predictable for r in runs),
        "by_vendor": dict(Counter(r.vendor for r in runs)),
        "by_engine": dict(Counter(r.engine for r in runs)),
        "by_model_family": dict(Counter(r.model_family for r in runs)),
        "by_kind": dict(Counter(r.kind for r in runs)),
    }
