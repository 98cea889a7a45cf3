"""Published kernel and communication costs (``pdcalc/data/costs.toml``), as the figures a step-time model can
take its efficiencies from.

Each *table* of the data file is one published table or paragraph (DeepGEMM's GEMM tables, FlashMLA's decoding
figures, DeepEP's dispatch/combine tables, an all-reduce run, ...) with its source, the text that states its
conditions and the conditions in words. Each *point* is one published row or sentence, with the exact text it
was read from (``quote``). Numbers are kept in the file as printed, with the unit in the key name
(``achieved_tflop_per_s``, ``latency_us``, ``bandwidth_gb_per_s``, ``utilization_percent``); this module converts
them once, at load, to SI units (FLOP/s, bytes/s, seconds, fractions). GB is 10**9 bytes and never GiB.

Kinds of cost and their dataclasses:

====================== ======================== ==========================================================
kind                   dataclass                what a point gives
====================== ======================== ==========================================================
``gemm``               :class:`GemmPoint`       achieved FLOP/s and memory bandwidth of one GEMM shape
``mla``                :class:`MlaPoint`        achieved FLOP/s or memory bandwidth of an MLA attention kernel
``dispatch``           :class:`DispatchPoint`   MoE dispatch or combine latency and bandwidth by EP size
``allreduce``          :class:`AllreducePoint`  all-reduce time by message size, or bus/algorithm bandwidth
``overhead``           :class:`OverheadPoint`   per-step fixed costs (host gaps, graph-capture speedups)
``mtp_acceptance``     :class:`MtpPoint`        acceptance rate of speculative (MTP) tokens
``expert_imbalance``   :class:`ImbalancePoint`  routed-token imbalance across EP ranks or expert slots
``overlap``            :class:`OverlapPoint`    what two-micro-batch overlap takes: SMs the communication
                                                kernels hold, communication time alongside computation
====================== ======================== ==========================================================

Efficiency of a compute point is ``achieved / peak``: the peak is the one the source states (``peak_flop_per_s``
of the table) or else the card's dense peak for the point's dtype in ``hardware.toml``; where the source states
the utilisation itself (``utilization_percent``), :attr:`GemmPoint.efficiency` returns that figure and
:attr:`GemmPoint.derived_efficiency` the quotient.

A point derived from published data rather than read from a text (a profiler trace) names the script that
recomputes it (``derived_by``, a path of this repository); its ``quote`` is the line that script prints, and
``tests/test_costs.py`` runs the script where the data is at hand.

Communication fits: :func:`alpha_beta` fits ``t(s) = alpha + s / beta`` (a latency per call plus bytes over a
bandwidth) to published (size, time) points. The fit minimises the squared *relative* residuals
``(t_fit - t) / t``, so that the microsecond-scale latency of small messages and the bandwidth of large ones
weigh alike; the residuals come back with the fit.

Examples
--------
>>> from pdcalc import costs
>>> p = costs.gemm("h800", "fp8", operation="dense")[0]
>>> (p.m, p.n, p.k), p.achieved_flop_per_s
((64, 2112, 7168), 206000000000000.0)
>>> round(p.efficiency, 3)             # 206 TFLOPS of the H800's 1979 TFLOPS FP8 peak
0.104
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from functools import cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType

from pdcalc.core.errors import ConfigError, UnknownNameError, load_toml
from pdcalc.perf.cost_points import (DEFAULT_SOURCE, POINT_CLASSES, AllreducePoint, Costs, DispatchPoint, Gap,
                                     GemmPoint, ImbalancePoint, MlaPoint, MtpPoint, OverheadPoint, OverlapPoint)

#: Unit suffixes of printed keys: (printed suffix, SI suffix, factor to SI).
UNIT_SUFFIXES: tuple[tuple[str, str, float], ...] = (
    ("_tflop_per_s", "_flop_per_s", 1e12),
    ("_gb_per_s", "_bytes_per_s", 1e9),
    ("_tb_per_s", "_bytes_per_s", 1e12),
    ("_us", "_s", 1e-6),
    ("_ms", "_s", 1e-3),
    ("_percent", "_fraction", 1e-2),
    ("_x", "_x", 1.0),
    ("_ratio", "_ratio", 1.0),
    ("_tokens", "_tokens", 1.0),
    ("_tokens_per_s", "_tokens_per_s", 1.0),
)

#: Numeric keys without a unit: shapes and counts (integers).
COUNT_KEYS = frozenset({
    "m", "n", "k", "groups", "m_per_group", "ep_size", "ep_nodes", "ep_per_node", "world_size", "batch_size",
    "heads", "s_q", "topk", "tokens_per_batch", "hidden", "top_k", "num_sms", "slots_per_rank",
    "compute_sms", "comm_sms", "card_sms",
})
#: Counts that may be 0 (communication kernels that hold no SM).
ZERO_KEYS = frozenset({"comm_sms"})

KINDS = ("gemm", "mla", "dispatch", "allreduce", "overhead", "mtp_acceptance", "expert_imbalance", "overlap")
#: Kinds measured per card (the others describe a model or a routing pattern).
CARD_KINDS = ("gemm", "mla", "dispatch", "allreduce", "overhead")

#: Numeric keys each kind may carry (printed names).
_NUMERIC: dict[str, frozenset] = {
    "gemm": frozenset({"m", "n", "k", "groups", "m_per_group", "achieved_tflop_per_s", "memory_gb_per_s",
                       "utilization_percent", "peak_tflop_per_s"}),
    "mla": frozenset({"achieved_tflop_per_s", "memory_gb_per_s", "memory_tb_per_s", "utilization_percent",
                      "throttled_peak_utilization_percent", "peak_tflop_per_s", "peak_memory_tb_per_s",
                      "throttled_peak_tflop_per_s", "batch_size", "heads", "s_q", "topk"}),
    "dispatch": frozenset({"ep_size", "ep_nodes", "ep_per_node", "latency_us", "bandwidth_gb_per_s", "num_sms",
                           "tokens_per_batch", "hidden", "top_k", "link_max_gb_per_s", "nic_max_gb_per_s"}),
    "allreduce": frozenset({"world_size", "time_us", "bus_bandwidth_gb_per_s", "alg_bandwidth_gb_per_s",
                            "line_rate_gb_per_s", "nic_bandwidth_low_gb_per_s", "nic_bandwidth_high_gb_per_s"}),
    "overhead": frozenset({"batch_size", "speedup_x", "block_time_us", "idle_us", "ep_size", "tokens_per_batch",
                           "context_tokens", "node_tokens_per_s"}),
    "mtp_acceptance": frozenset({"acceptance_low_percent", "acceptance_high_percent", "speedup_x"}),
    "expert_imbalance": frozenset({"slots_per_rank", "ep_size", "mean_tokens", "std_tokens", "imbalance_ratio"}),
    "overlap": frozenset({"compute_sms", "comm_sms", "card_sms", "comm_kernel_us", "comm_alongside_us"}),
}

#: Qualifier keys each kind may carry, with their allowed values (None: any non-empty text).
_CHOICES: dict[str, dict[str, frozenset | None]] = {
    "gemm": {"dtype": None, "operation": frozenset({"dense", "grouped_contiguous", "grouped_masked",
                                                     "weight_only_4bit", "unspecified"})},
    "mla": {"dtype": None, "kv_dtype": None, "phase": frozenset({"decode", "prefill"}),
            "attention": frozenset({"dense", "sparse"}), "bound": frozenset({"compute", "memory"})},
    "dispatch": {"mode": frozenset({"normal", "low_latency"}), "operation": frozenset({"dispatch", "combine"}),
                 "link": frozenset({"NVLink", "RDMA", "RDMA+NVLink", "HCCS"}), "dispatch_dtype": None,
                 "combine_dtype": None},
    "allreduce": {"scope": frozenset({"intranode", "internode"}), "basis": frozenset({"measured", "expected"}),
                  "library": None, "algorithm": None, "size_printed": None,
                  "size_prefixes": frozenset({"binary", "decimal"})},
    "overhead": {"what": None, "phase": frozenset({"prefill", "decode"}), "dtype": None},
    "mtp_acceptance": {},
    "expert_imbalance": {"by": frozenset({"rank", "expert_slot"}), "eplb": frozenset({"none", "offline", "online"})},
    "overlap": {"phase": frozenset({"prefill", "decode", "training"}),
                "mode": frozenset({"normal", "low_latency"})},
}

#: Qualifiers a point of each kind must have once the table's values are inherited.
_REQUIRED_QUALIFIERS: dict[str, tuple[str, ...]] = {
    "gemm": ("dtype", "operation"),
    "mla": ("phase", "attention"),
    "dispatch": ("mode", "operation", "link"),
    "allreduce": ("scope", "basis"),
    "overhead": ("what",),
    "mtp_acceptance": (),
    "expert_imbalance": ("by", "eplb"),
    "overlap": ("phase", "mode"),
}

_TABLE_TEXT = ("id", "kind", "source", "quote", "conditions")
_OPTIONAL_TEXT = ("card", "card_as_stated", "url", "commit", "notes", "model", "peak_source", "peak_quote",
                  "derived_by")
#: Point keys that override the table's.
_POINT_OVERRIDES = ("source", "url", "commit", "conditions", "notes")
_SLUG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|KiB|MiB|GiB)")


def si_name(key: str) -> str:
    """The SI field name of a printed key: ``achieved_tflop_per_s`` -> ``achieved_flop_per_s``,
    ``latency_us`` -> ``latency_s``; counts keep their name."""
    for suffix, si_suffix, _ in UNIT_SUFFIXES:
        if key.endswith(suffix):
            return key[: -len(suffix)] + si_suffix
    return key


def to_si(key: str, value: float) -> float:
    """The printed ``value`` of ``key`` in SI units (see :data:`UNIT_SUFFIXES`)."""
    for suffix, _, factor in UNIT_SUFFIXES:
        if key.endswith(suffix):
            return value * factor
    return value


def _is_peak_key(key: str) -> bool:
    return key.startswith("peak_") or key.startswith("throttled_peak_") and not key.endswith("_percent")


# ------------------------------------------------------------------------------------------ parsing
def _positive_number(value) -> bool:
    return (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
            and value > 0)


def size_bytes(printed: str, prefixes: str) -> float:
    """Bytes of a printed size such as ``"16KB"``: ``prefixes`` "binary" reads KB as 1024 B, "decimal" as 1000 B.

    Raises
    ------
    ValueError
        If ``printed`` is not a number followed by B, KB, MB, GB, KiB, MiB or GiB.
    """
    from pdcalc.core.units import BYTE_UNITS

    m = _SIZE.fullmatch(printed.strip())
    if not m:
        raise ValueError(f"not a size: {printed!r}")
    unit = m.group(2)
    if prefixes == "binary" and unit in ("KB", "MB", "GB"):
        unit = unit[0] + "iB"
    return float(m.group(1)) * BYTE_UNITS[unit]


def _parse(path, source: str) -> Costs:
    from pdcalc.core.quotes import number_in_text
    from pdcalc.hardware.cards import card_names

    data = load_toml(path, source)
    extra = set(data) - {"table", "gap", "cards"}
    if extra:
        raise ConfigError(source, sorted(extra)[0], "unknown top-level key; expected [cards], [[table]] and [[gap]]")
    cards = data.get("cards", {})
    if not isinstance(cards, dict) or any(not isinstance(v, str) or not v.strip() for v in cards.values()):
        raise ConfigError(source, "cards", "expected a table of card slug = label")
    for slug in cards:
        if not _SLUG.fullmatch(slug):
            raise ConfigError(source, "cards", f"{slug!r} is not a lowercase slug")
    presets = frozenset(card_names())
    clash = presets & set(cards)
    if clash:
        raise ConfigError(source, "cards", f"{sorted(clash)[0]!r} is already a hardware preset")
    known_cards = presets | set(cards)

    tables = data.get("table", [])
    if not isinstance(tables, list):
        raise ConfigError(source, "table", "expected an array of tables ([[table]])")
    points, seen = [], set()
    for raw in tables:
        for p in _table_points(raw, source, known_cards, number_in_text):
            points.append(p)
        if raw["id"] in seen:
            raise ConfigError(source, "id", f"table {raw['id']!r}: duplicate id")
        seen.add(raw["id"])

    gaps = []
    for raw in data.get("gap", []):
        if not isinstance(raw, dict) or set(raw) - {"kind", "card", "note"}:
            raise ConfigError(source, "gap", f"each [[gap]] has kind, card and note, got {raw!r}")
        if raw.get("kind") not in KINDS:
            raise ConfigError(source, "gap", f"kind must be one of {', '.join(KINDS)}, got {raw.get('kind')!r}")
        if raw.get("card") not in known_cards:
            raise ConfigError(source, "gap", f"unknown card {raw.get('card')!r}")
        if not isinstance(raw.get("note"), str) or not raw["note"].strip():
            raise ConfigError(source, "gap", "note must be a non-empty string")
        gaps.append(Gap(kind=raw["kind"], card=raw["card"], note=raw["note"]))
    return Costs(points=tuple(points), gaps=tuple(gaps), cards=MappingProxyType(dict(cards)), source=source)


def _table_points(raw, source: str, known_cards: frozenset, number_in_text) -> list:
    if not isinstance(raw, dict):
        raise ConfigError(source, "table", f"each [[table]] must be a table, got {raw!r}")
    tid = raw.get("id")
    if not isinstance(tid, str) or not _SLUG.fullmatch(tid):
        raise ConfigError(source, "id", f"table {tid!r}: expected a lowercase slug (a-z, 0-9, '-')")

    def bad(fld: str, message: str) -> ConfigError:
        return ConfigError(source, fld, f"table {tid!r}: {message}")

    for key in _TABLE_TEXT:
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise bad(key, f"expected a non-empty string, got {raw.get(key)!r}")
    for key in _OPTIONAL_TEXT:
        if key in raw and (not isinstance(raw[key], str) or not raw[key].strip()):
            raise bad(key, f"expected a non-empty string, got {raw[key]!r}")
    kind = raw["kind"]
    if kind not in KINDS:
        raise bad("kind", f"{kind!r} is not one of {', '.join(KINDS)}")
    card = raw.get("card")
    if kind in CARD_KINDS and card is None:
        raise bad("card", "missing (a per-card cost needs its card)")
    if card is not None and card not in known_cards:
        raise bad("card", f"{card!r} is neither a hardware preset nor listed under [cards]; known: "
                          f"{', '.join(sorted(known_cards))}")
    if "commit" in raw and not _COMMIT.fullmatch(raw["commit"]):
        raise bad("commit", "expected 40 lowercase hex digits")
    if "derived_by" in raw and not re.fullmatch(r"tools/[A-Za-z0-9_]+\.py", raw["derived_by"]):
        raise bad("derived_by", "expected a script of this repository, tools/<name>.py")
    if "derived_by" in raw and "commit" not in raw:
        raise bad("commit", "a derived figure needs the commit of the data it is derived from")
    if any(_is_peak_key(k) for k in raw) and "peak_quote" not in raw:
        raise bad("peak_quote", "a table with peak_* values needs the text they are read from")
    numeric, choices = _NUMERIC[kind], _CHOICES[kind]
    known = set(_TABLE_TEXT) | set(_OPTIONAL_TEXT) | numeric | set(choices) | {"point"}
    for key in raw:
        if key not in known:
            raise bad(key, f"unknown field for kind {kind!r}")
    table_values = _values(raw, numeric, choices, bad)
    for key, value in table_values.items():
        if key in numeric:
            text = raw.get("peak_quote") if _is_peak_key(key) else raw["quote"]
            if not number_in_text(value, text):
                where = "peak_quote" if _is_peak_key(key) else "quote"
                raise bad(key, f"the table's {where} does not print {value!r}")

    rows = raw.get("point")
    if not isinstance(rows, list) or not rows:
        raise bad("point", "expected a non-empty array of points")
    out = []
    for i, row in enumerate(rows, 1):
        pid = f"{tid}-{i}"

        def pbad(fld: str, message: str, pid=pid) -> ConfigError:
            return ConfigError(source, fld, f"point {pid!r}: {message}")

        if not isinstance(row, dict):
            raise pbad("point", f"expected a table, got {row!r}")
        for key in row:
            if key not in numeric and key not in choices and key not in _POINT_OVERRIDES and key != "quote":
                raise pbad(key, f"unknown field for kind {kind!r}")
            if _is_peak_key(key):
                raise pbad(key, "peak values belong to the table, next to their peak_quote")
        if not isinstance(row.get("quote"), str) or not row["quote"].strip():
            raise pbad("quote", "expected the exact text of the row or sentence")
        for key in _POINT_OVERRIDES:
            if key in row and (not isinstance(row[key], str) or not row[key].strip()):
                raise pbad(key, f"expected a non-empty string, got {row[key]!r}")
        if "commit" in row and not _COMMIT.fullmatch(row["commit"]):
            raise pbad("commit", "expected 40 lowercase hex digits")
        point_values = _values(row, numeric, choices, pbad)
        for key, value in point_values.items():
            if key in numeric and not number_in_text(value, row["quote"]):
                raise pbad(key, f"the quote does not print {value!r}")
        out.append(_build(kind, pid, tid, raw, row, table_values, point_values, pbad))
    return out


def _values(raw: dict, numeric: frozenset, choices: dict, bad) -> dict:
    values = {}
    for key, value in raw.items():
        if key in numeric:
            if not (_positive_number(value) or (key in ZERO_KEYS and value == 0 and type(value) is int)):
                raise bad(key, f"expected a positive number, got {value!r}")
            if key in COUNT_KEYS and (not isinstance(value, int) or isinstance(value, bool)):
                raise bad(key, f"expected an integer count, got {value!r}")
            if key.endswith("_percent") and value > 100:
                raise bad(key, f"a percentage is at most 100, got {value!r}")
            values[key] = value
        elif key in choices:
            allowed = choices[key]
            if not isinstance(value, str) or not value.strip() or (allowed is not None and value not in allowed):
                listed = f"one of {', '.join(sorted(allowed))}" if allowed else "a non-empty string"
                raise bad(key, f"expected {listed}, got {value!r}")
            values[key] = value
    return values


def _build(kind, pid, tid, raw, row, table_values, point_values, pbad):
    merged = {**table_values, **point_values}
    for key in _REQUIRED_QUALIFIERS[kind]:
        if key not in merged:
            raise pbad(key, f"missing (neither the point nor its table gives {key})")
    kwargs = dict(
        id=pid, table_id=tid, kind=kind, card=raw.get("card"), card_as_stated=raw.get("card_as_stated"),
        model=raw.get("model"), source=row.get("source", raw["source"]), url=row.get("url", raw.get("url")),
        commit=row.get("commit", raw.get("commit") if "url" not in row else None), quote=row["quote"],
        table_quote=raw["quote"], peak_quote=raw.get("peak_quote"),
        conditions=row.get("conditions", raw["conditions"]), notes=row.get("notes", raw.get("notes")),
        derived_by=raw.get("derived_by"),
        printed=tuple([(k, v, "peak" if _is_peak_key(k) else "table") for k, v in table_values.items()
                       if k in _NUMERIC[kind] and k not in point_values]
                      + [(k, v, "point") for k, v in point_values.items() if k in _NUMERIC[kind]]),
    )
    for key, value in merged.items():
        if key in _NUMERIC[kind]:
            kwargs[si_name(key)] = int(value) if key in COUNT_KEYS else float(to_si(key, value))
        else:
            kwargs[key] = value
    cls = POINT_CLASSES[kind]
    if kind == "dispatch":
        nodes, per_node = kwargs.get("ep_nodes"), kwargs.get("ep_per_node")
        if "ep_size" not in kwargs:
            if nodes is None or per_node is None:
                raise pbad("ep_size", "missing (give ep_size, or ep_nodes and ep_per_node)")
            kwargs["ep_size"] = nodes * per_node
        if kwargs.get("latency_s") is None and kwargs.get("bandwidth_bytes_per_s") is None:
            raise pbad("bandwidth_gb_per_s", "a dispatch point needs a latency or a bandwidth")
    if kind == "allreduce":
        if kwargs.get("size_printed") is not None:
            if kwargs.get("size_prefixes") is None:
                raise pbad("size_prefixes", "a printed size needs size_prefixes (binary or decimal)")
            try:
                kwargs["size_bytes"] = size_bytes(kwargs["size_printed"], kwargs["size_prefixes"])
            except ValueError as exc:
                raise pbad("size_printed", str(exc)) from None
        if (kwargs.get("time_s") is None) != (kwargs.get("size_bytes") is None):
            raise pbad("time_us", "a time needs its message size, and a size its time")
    if kind == "expert_imbalance" and "imbalance_ratio" not in kwargs:
        raise pbad("imbalance_ratio", "missing")
    if kind == "overlap":
        if kwargs.get("comm_sms") is None and kwargs.get("comm_kernel_s") is None:
            raise pbad("comm_sms", "an overlap point needs the communication's SMs or its kernel time")
        if (kwargs.get("comm_kernel_s") is None) != (kwargs.get("comm_alongside_s") is None):
            raise pbad("comm_alongside_us", "a communication time needs the time alongside computation, and back")
        if kwargs.get("comm_alongside_s", 0) > kwargs.get("comm_kernel_s", math.inf):
            raise pbad("comm_alongside_us", "more time alongside computation than the communication ran")
        parts = [kwargs.get(k) for k in ("compute_sms", "comm_sms", "card_sms")]
        if None not in parts and parts[0] + parts[1] > parts[2]:
            raise pbad("card_sms", f"compute and communication SMs ({parts[0]} + {parts[1]}) exceed the card's")
    names = {f.name for f in fields(cls)}
    unknown = set(kwargs) - names
    if unknown:  # a qualifier the dataclass does not carry (e.g. gemm 'kv_dtype'): a data-model error
        raise pbad(sorted(unknown)[0], f"not a field of {cls.__name__}")
    return cls(**kwargs)


@cache
def _packaged() -> Costs:
    return _parse(resources.files("pdcalc").joinpath("data", "costs.toml"), DEFAULT_SOURCE)


def load(path: str | Path | None = None) -> Costs:
    """Read and validate a costs file (the packaged one by default).

    Raises
    ------
    ConfigError
        If the file is missing or not TOML, or a table, point or gap is malformed; the one-line message names
        the file, the field and the table or point id. A number its quote does not print is malformed.
    """
    if path is None:
        return _packaged()
    return _parse(Path(path), str(path))


# ------------------------------------------------------------------------------------------ lookups
def points(kind: str | None = None, path: str | Path | None = None) -> tuple:
    """All points, or those of one ``kind`` (one of :data:`KINDS`), in file order."""
    if kind is not None and kind not in KINDS:
        raise UnknownNameError("cost kind", kind, KINDS)
    return tuple(p for p in load(path).points if kind is None or p.kind == kind)


def known_cards(path: str | Path | None = None) -> tuple[str, ...]:
    """Hardware presets and the data file's extra card slugs."""
    from pdcalc.hardware.cards import card_names

    return tuple(sorted(set(card_names()) | set(load(path).cards)))


def _check_card(card: str, path) -> str:
    if card not in known_cards(path):
        raise UnknownNameError("card", card, known_cards(path))
    return card


def _check_choice(kind: str, key: str, value) -> None:
    allowed = _CHOICES[kind][key]
    if value is not None and allowed is not None and value not in allowed:
        raise UnknownNameError(key, value, allowed)


def gemm(card: str, dtype: str | None = None, *, operation: str | None = None,
         path: str | Path | None = None) -> tuple[GemmPoint, ...]:
    """Published GEMM points of ``card`` (optionally one ``dtype`` and ``operation``); empty if none."""
    _check_card(card, path)
    _check_choice("gemm", "operation", operation)
    return tuple(p for p in points("gemm", path) if p.card == card and dtype in (None, p.dtype)
                 and operation in (None, p.operation))


def mla(card: str, phase: str | None = None, *, attention: str | None = None,
        path: str | Path | None = None) -> tuple[MlaPoint, ...]:
    """Published MLA attention points of ``card``; empty if none."""
    _check_card(card, path)
    _check_choice("mla", "phase", phase)
    _check_choice("mla", "attention", attention)
    return tuple(p for p in points("mla", path) if p.card == card and phase in (None, p.phase)
                 and attention in (None, p.attention))


def mla_decode(card: str, *, attention: str | None = None, path: str | Path | None = None) -> tuple[MlaPoint, ...]:
    """Published MLA decoding points of ``card`` (``attention`` "dense" or "sparse" to narrow)."""
    return mla(card, "decode", attention=attention, path=path)


def dispatch(card: str, ep_size: int | None = None, mode: str | None = None, *, operation: str | None = None,
             path: str | Path | None = None) -> tuple[DispatchPoint, ...]:
    """Published MoE dispatch/combine points of ``card`` (optionally one EP size, ``mode`` "normal" or
    "low_latency", ``operation`` "dispatch" or "combine"); empty if none."""
    _check_card(card, path)
    _check_choice("dispatch", "mode", mode)
    _check_choice("dispatch", "operation", operation)
    return tuple(p for p in points("dispatch", path) if p.card == card and ep_size in (None, p.ep_size)
                 and mode in (None, p.mode) and operation in (None, p.operation))


def allreduce(card: str, scope: str | None = None, *, path: str | Path | None = None) -> tuple[AllreducePoint, ...]:
    """Published all-reduce points of ``card`` (``scope`` "intranode" or "internode"); empty if none."""
    _check_card(card, path)
    _check_choice("allreduce", "scope", scope)
    return tuple(p for p in points("allreduce", path) if p.card == card and scope in (None, p.scope))


def overheads(card: str | None = None, *, path: str | Path | None = None) -> tuple[OverheadPoint, ...]:
    """Published per-step overhead points (of one ``card``, or all)."""
    if card is not None:
        _check_card(card, path)
    return tuple(p for p in points("overhead", path) if card in (None, p.card))


def mtp_acceptance(model: str | None = None, *, path: str | Path | None = None) -> tuple[MtpPoint, ...]:
    """Published MTP acceptance points (of one ``model``, as the source names it, or all)."""
    return tuple(p for p in points("mtp_acceptance", path) if model in (None, p.model))


def expert_imbalance(by: str | None = None, *, eplb: str | None = None,
                     path: str | Path | None = None) -> tuple[ImbalancePoint, ...]:
    """Published expert-load imbalance points (``by`` "rank" or "expert_slot"; ``eplb`` "none", "offline", ...)."""
    _check_choice("expert_imbalance", "by", by)
    _check_choice("expert_imbalance", "eplb", eplb)
    return tuple(p for p in points("expert_imbalance", path) if by in (None, p.by) and eplb in (None, p.eplb))


def overlap(card: str | None = None, phase: str | None = None, *, mode: str | None = None,
            path: str | Path | None = None) -> tuple[OverlapPoint, ...]:
    """Published two-micro-batch overlap points (of one ``card``, ``phase`` and DeepEP ``mode``, or all)."""
    if card is not None:
        _check_card(card, path)
    _check_choice("overlap", "phase", phase)
    _check_choice("overlap", "mode", mode)
    return tuple(p for p in points("overlap", path) if card in (None, p.card) and phase in (None, p.phase)
                 and mode in (None, p.mode))


def missing(path: str | Path | None = None) -> tuple[Gap, ...]:
    """The (card, kind) pairs with no published figure: every hardware preset times :data:`CARD_KINDS`, plus the
    gaps the data file records for other kinds. Each carries the file's note where it has one and the cards
    that do have a figure of that kind (where an efficiency must be carried over from)."""
    from pdcalc.hardware.cards import card_names

    data = load(path)
    notes = {(g.kind, g.card): g.note for g in data.gaps}
    have: dict[str, set] = {k: set() for k in KINDS}
    for p in data.points:
        have[p.kind].add(p.card)
    out = []
    for card in card_names():
        for kind in CARD_KINDS:
            if card not in have[kind]:
                out.append(Gap(kind=kind, card=card, note=notes.get((kind, card)),
                               available_on=tuple(sorted(c for c in have[kind] if c))))
    listed = {(g.kind, g.card) for g in out}
    for g in data.gaps:
        if (g.kind, g.card) not in listed and g.card not in have[g.kind]:
            out.append(Gap(kind=g.kind, card=g.card, note=g.note,
                           available_on=tuple(sorted(c for c in have[g.kind] if c))))
    return tuple(out)


# ------------------------------------------------------------------------------------------ alpha-beta fit
@dataclass(frozen=True, kw_only=True)
class AlphaBetaFit:
    """``t(s) = latency_s + s / bandwidth_bytes_per_s`` fitted to published (size, time) points.

    ``relative_residuals[i] = (t_fit(s_i) - t_i) / t_i`` for the points used; ``excluded_sizes_bytes`` lists
    the sizes left out of the fit (an outlier the source printed, for instance).
    """

    latency_s: float
    bandwidth_bytes_per_s: float
    sizes_bytes: tuple
    times_s: tuple
    relative_residuals: tuple
    excluded_sizes_bytes: tuple = ()

    @property
    def max_abs_relative_residual(self) -> float:
        return max(abs(r) for r in self.relative_residuals)

    def time_s(self, size_bytes: float) -> float:
        """Fitted time of one call moving ``size_bytes``."""
        return self.latency_s + size_bytes / self.bandwidth_bytes_per_s


def alpha_beta(data, *, exclude_sizes_bytes=()) -> AlphaBetaFit:
    """Fit a latency per call plus bytes over a bandwidth to published (size, time) points.

    .. math::

       t(s) = \\alpha + \\frac{s}{\\beta},
       \\qquad
       \\min_{\\alpha, \\beta} \\sum_i \\left( \\frac{\\alpha + s_i / \\beta - t_i}{t_i} \\right)^2

    The relative residual weighs a 20 us small-message point like a 1 ms large-message one (an unweighted fit
    would let the largest messages decide the latency). It is linear in ``alpha`` and ``1/beta`` and solved by
    least squares.

    Parameters
    ----------
    data : iterable
        :class:`AllreducePoint` (those with a size and a time) or ``(size_bytes, time_s)`` pairs.
    exclude_sizes_bytes : iterable of float
        Sizes to leave out of the fit.

    Returns
    -------
    AlphaBetaFit

    Raises
    ------
    ValueError
        With fewer than two distinct sizes, or where the best fit has a negative latency or bandwidth (the points
        do not follow the model).
    """
    import numpy as np

    pairs = []
    for item in data:
        if isinstance(item, AllreducePoint):
            if item.size_bytes is None or item.time_s is None:
                continue
            pairs.append((item.size_bytes, item.time_s))
        else:
            s, t = item
            pairs.append((float(s), float(t)))
    excluded = tuple(sorted(set(float(s) for s in exclude_sizes_bytes)))
    used = [(s, t) for s, t in pairs if s not in excluded]
    if len({s for s, _ in used}) < 2:
        raise ValueError(f"an alpha-beta fit needs at least two distinct message sizes, got {len(used)} point(s)")
    if any(not (s >= 0 and t > 0 and math.isfinite(s) and math.isfinite(t)) for s, t in used):
        raise ValueError("sizes must be >= 0 bytes and times > 0 s")
    s = np.array([p[0] for p in used])
    t = np.array([p[1] for p in used])
    design = np.column_stack([1.0 / t, s / t])
    (alpha, inv_beta), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    if alpha < 0 or inv_beta <= 0:
        raise ValueError(f"the points do not follow t = alpha + s / beta (fit: alpha = {alpha:.3g} s, "
                         f"1/beta = {inv_beta:.3g} s/B)")
    resid = (alpha + s * inv_beta - t) / t
    return AlphaBetaFit(latency_s=float(alpha), bandwidth_bytes_per_s=float(1.0 / inv_beta),
                        sizes_bytes=tuple(float(x) for x in s), times_s=tuple(float(x) for x in t),
                        relative_residuals=tuple(float(r) for r in resid), excluded_sizes_bytes=excluded)


def allreduce_alpha_beta(card: str, scope: str = "intranode", *, table_id: str | None = None,
                         exclude_sizes_bytes=(), path: str | Path | None = None) -> AlphaBetaFit:
    """:func:`alpha_beta` over the published (size, time) all-reduce points of ``card`` and ``scope``.

    Raises
    ------
    ValueError
        If the card has no such points, or they come from more than one table and ``table_id`` is not given.
    """
    sized = [p for p in allreduce(card, scope, path=path) if p.time_s is not None
             and table_id in (None, p.table_id)]
    tables = sorted({p.table_id for p in sized})
    if not sized:
        raise ValueError(f"no published all-reduce times by message size for {card} ({scope})")
    if len(tables) > 1:
        raise ValueError(f"points from several tables ({', '.join(tables)}); pass table_id")
    return alpha_beta(sized, exclude_sizes_bytes=exclude_sizes_bytes)
