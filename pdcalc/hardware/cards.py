"""Accelerator presets (``pdcalc/data/hardware.toml``) and user hardware files.

Units are in the field names: bytes, bytes per second, FLOP per second. A user's own card is a TOML
file with the same keys; a missing or nonsensical field is an error naming the file and the field.

Every number is finite, at least a bound below any real accelerator (a smaller figure is a typo or a unit
slip, and would make step times overflow) and at most a bound that leaves room for cards decades ahead:

=================================================== ============ ============ ===============================
field                                               at least     at most      presets (smallest, largest)
=================================================== ============ ============ ===============================
hbm_bytes, hbm_visible_bytes, hbm_marketed_bytes    1e9 B        2**50 B      32 GiB (910B4-32G), 192.3e9 (B200)
hbm_bandwidth_bytes_per_s (and its range)           1e10 B/s     2**50 B/s    0.8e12 (910B4-32G), 8e12 (B200)
intra_node_bytes_per_s, scale_out_bytes_per_s       1e8 B/s      2**50 B/s    12.5e9 .. 900e9 (B200 NVLink)
flops_per_s.<dtype> (and flops_per_s_range)         1e11 FLOP/s  2**60 FLOP/s 1e14 .. 4.5e15 (B200 FP8)
cards_per_node, scale_up_cards                      1            65,536       8 (a rack-scale domain: 72, 384)
ranks_per_card                                      1            16           2 (910C: two dies)
=================================================== ============ ============ ===============================

The lower bounds are far below any accelerator made (1 GB of memory, 10 GB/s of memory bandwidth, a
1 Gb/s Ethernet link, 0.1 TFLOP/s). ``flops_per_s`` keys are dtypes (:data:`DTYPES`). A field pdcalc does not
know (a misspelt ``hbm_visable_bytes``) is refused with the closest known name, never ignored.

``hbm_visible_bytes`` is at most ``hbm_bytes``; a ``*_range`` is ``[low, high]``, two such numbers with
``low <= high``, and the bandwidth range contains the bandwidth used.

Memory, three figures
---------------------
``hbm_bytes`` is what the device's management tool reports (``nvidia-smi``/``npu-smi`` total, in MiB of
2**20 B): 143,771 MiB on an H200, 65,536 MiB on a 64 GiB 910B. ``hbm_visible_bytes`` is what the framework
sees (``torch.cuda``/``torch_npu`` total capacity, the base of a serving engine's memory utilisation) where a
public log gives it. ``hbm_marketed_bytes`` is the datasheet's figure ("141 GB"), kept for comparison only.

Family, sources, assumptions
----------------------------
``family`` is required: ``"ascend"`` or ``"nvidia"`` (:data:`FAMILIES`); it picks the default KV-cache
engine (:func:`pdcalc.model.kv_layout.default_engine`). A missing or unknown family is a one-line error naming
the field and the allowed values.

``sources`` maps each figure (:meth:`Card.figures`: ``hbm_bytes``, ``flops_per_s.int8``, ...) to the
document it comes from, with a quote; ``flops_per_s`` covers every dtype. ``assumed`` lists the figures
no public source gives and ``assumption`` says what was assumed (required when ``assumed`` is not empty),
so that a chapter can show them (:meth:`Card.provenance`). Both are optional in a user's file.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

from pdcalc.core import checks
from pdcalc.core.errors import ConfigError, UnknownNameError, load_toml

#: Upper bounds of the card fields (see the module docstring).
MAX_BYTES = 2**50
MAX_BYTES_PER_S = 2**50
MAX_FLOPS_PER_S = 2**60
MAX_CARDS_PER_NODE = 65536
#: Lower bounds of the card fields: below any real accelerator (see the module docstring).
MIN_BYTES = 1e9
MIN_HBM_BYTES_PER_S = 1e10
MIN_LINK_BYTES_PER_S = 1e8
MIN_FLOPS_PER_S = 1e11
#: Dtypes a card's ``flops_per_s`` may name.
DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp6", "fp4", "int4")

#: Card makers; ``family`` must be one of them (it picks the default KV-cache engine).
FAMILIES = ("ascend", "nvidia")

#: Scalar figures a card may set (``flops_per_s.<dtype>`` come on top, one per dtype).
FIGURES = ("hbm_bytes", "hbm_visible_bytes", "hbm_marketed_bytes", "hbm_bandwidth_bytes_per_s",
           "hbm_bandwidth_bytes_per_s_range", "flops_per_s_range", "intra_node_bytes_per_s",
           "scale_out_bytes_per_s", "cards_per_node", "ranks_per_card", "scale_up_cards")
#: Most devices (EP ranks) one card may expose, and most cards one scale-up fabric may join.
MAX_RANKS_PER_CARD = 16
MAX_SCALE_UP_CARDS = 65_536


@dataclass(frozen=True, kw_only=True)
class Card:
    """One accelerator."""

    name: str                                   # preset slug or file name
    label: str                                  # human-readable name
    family: str                                 # "ascend" or "nvidia" (FAMILIES)
    hbm_bytes: float                            # device memory as nvidia-smi / npu-smi report it
    hbm_bandwidth_bytes_per_s: float            # HBM bandwidth used by the models
    flops_per_s: dict                           # dense peak per dtype, FLOP/s
    intra_node_bytes_per_s: float               # per device, one way, inside a node
    scale_out_bytes_per_s: float                # per device, one way, between nodes
    cards_per_node: int = 8                     # devices per server
    hbm_visible_bytes: float | None = None      # what the framework sees (torch total capacity), when documented
    hbm_marketed_bytes: float | None = None     # the datasheet's figure, for comparison only
    hbm_bandwidth_bytes_per_s_range: tuple | None = None  # [low, high] where sources disagree
    flops_per_s_range: tuple | None = None
    ranks_per_card: int | None = None          # devices (EP ranks) the runtime makes of one card (None: 1)
    scale_up_cards: int | None = None          # cards one scale-up fabric joins (None: cards_per_node)
    preset: bool = field(default=False, compare=False)  # a preset of pdcalc/data/hardware.toml, not a user's file
    file: str = field(default="", compare=False, repr=False)  # a user's card: its path as given (named in errors)
    source: str = ""                            # one-line summary for tables
    sources: dict = field(default_factory=dict, repr=False)  # figure -> document and quote
    assumed: tuple = ()                         # figures no public source gives
    assumption: str = ""                        # what was assumed for them, and why
    extra: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        _check_figures(self)
        _check_provenance(self)

    def figures(self) -> tuple[str, ...]:
        """Names of the figures this card sets, ``flops_per_s.<dtype>`` one per dtype (see :data:`FIGURES`)."""
        out = []
        for name in FIGURES:
            if name == "flops_per_s_range":
                out.extend(f"flops_per_s.{k}" for k in self.flops_per_s)
            if getattr(self, name) is not None:
                out.append(name)
        return tuple(out)

    def source_of(self, figure: str) -> str:
        """The document a figure comes from: its own ``sources`` entry, else ``flops_per_s``'s for a dtype,
        else the ``assumption`` when the figure is assumed; ``""`` when the card gives none."""
        if figure in self.sources:
            return self.sources[figure]
        if figure.startswith("flops_per_s.") and "flops_per_s" in self.sources:
            return self.sources["flops_per_s"]
        if figure in self.assumed:
            return f"assumed: {self.assumption}"
        return ""

    def provenance(self) -> list[dict]:
        """One row per figure: ``figure``, ``value``, ``unit``, ``assumed`` (bool) and ``source``, for a
        chapter's table of where each number comes from."""
        units = {"hbm": "bytes", "intra": "bytes/s", "scale": "bytes/s", "flops": "FLOP/s", "cards": "cards",
                 "ranks_per_card": "devices", "scale_up_cards": "cards"}
        rows = []
        for figure in self.figures():
            if figure.startswith("flops_per_s."):
                value = self.flops_per_s[figure.split(".", 1)[1]]
            else:
                value = getattr(self, figure)
            unit = ("bytes/s" if "bytes_per_s" in figure else units.get(figure) or units[figure.split("_")[0]])
            rows.append({"figure": figure, "value": value, "unit": unit, "assumed": figure in self.assumed,
                         "source": self.source_of(figure)})
        return rows

    @property
    def ranks(self) -> int:
        """EP ranks one card holds (a 910C package exposes its two dies as two devices)."""
        return self.ranks_per_card or 1

    @property
    def scale_up_domain(self) -> int:
        """Cards that reach each other over the scale-up fabric (NVLink, HCCS, UB)."""
        return self.scale_up_cards or self.cards_per_node

    @property
    def usable_base_bytes(self) -> float:
        """Memory a serving engine's utilisation fraction applies to: the visible memory where known."""
        return self.hbm_visible_bytes or self.hbm_bytes

    def flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype`` (error listing the known dtypes if absent)."""
        try:
            return self.flops_per_s[dtype]
        except KeyError:
            raise MissingDtypeError(self, dtype) from None

    @property
    def shown(self) -> str:
        """How errors name the card: the path of a user's file as given, else the preset's name."""
        return self.file or self.name


class MissingDtypeError(UnknownNameError):
    """A card without the peak FLOP/s of a dtype a computation needs; the message names the card as the user
    gave it and the dtypes it lists."""

    def __init__(self, card: Card, dtype: str):
        super().__init__(f"dtype for {card.shown}", dtype, card.flops_per_s)
        self.args = (f"card {card.shown!r} has no {dtype} FLOP/s (its flops_per_s lists "
                     f"{', '.join(sorted(card.flops_per_s))}): choose a quantization scheme (--quant, pdcalc "
                     f"list) whose compute dtype it lists, or another card",)


def _check_figures(card: Card) -> None:
    """Every figure of ``card`` within a sane range (a :class:`ConfigError` naming the field otherwise); ranges
    as tuples and ``cards_per_node`` as an integer."""
    src = card.name

    def check(name, fn, *args, **kw):
        try:
            return fn("", *args, **kw)
        except checks.InputError as exc:
            raise ConfigError(src, name, str(exc)) from None

    if not isinstance(card.family, str) or card.family not in FAMILIES:
        raise ConfigError(src, "family", f"must be one of {', '.join(FAMILIES)} (the card's maker; it picks "
                          f"the default KV-cache engine), got {checks.show(card.family)}")
    for name, low, high, unit in (("hbm_bytes", MIN_BYTES, MAX_BYTES, "bytes"),
                                  ("hbm_bandwidth_bytes_per_s", MIN_HBM_BYTES_PER_S, MAX_BYTES_PER_S, "bytes/s"),
                                  ("intra_node_bytes_per_s", MIN_LINK_BYTES_PER_S, MAX_BYTES_PER_S, "bytes/s"),
                                  ("scale_out_bytes_per_s", MIN_LINK_BYTES_PER_S, MAX_BYTES_PER_S, "bytes/s")):
        check(name, checks.number, getattr(card, name), low=low, high=high, unit=unit)
    if not isinstance(card.flops_per_s, dict) or not card.flops_per_s:
        raise ConfigError(src, "flops_per_s", "must be a non-empty table of dtype = FLOP/s, e.g. "
                          f"{{ bf16 = 989e12 }}, got {checks.show(card.flops_per_s)}")
    for k, v in card.flops_per_s.items():
        if k not in DTYPES:
            raise ConfigError(src, f"flops_per_s.{k}", "unknown dtype" + _closest(k, DTYPES) + "; known: "
                              + ", ".join(DTYPES))
        check(f"flops_per_s.{k}", checks.number, v, low=MIN_FLOPS_PER_S, high=MAX_FLOPS_PER_S, unit="FLOP/s")
    cards = check("cards_per_node", checks.integer, card.cards_per_node, low=1, high=MAX_CARDS_PER_NODE)
    object.__setattr__(card, "cards_per_node", cards)  # 8.0 -> 8
    for name, high in (("ranks_per_card", MAX_RANKS_PER_CARD), ("scale_up_cards", MAX_SCALE_UP_CARDS)):
        if getattr(card, name) is not None:
            object.__setattr__(card, name, check(name, checks.integer, getattr(card, name), low=1, high=high))
    check("label", checks.text, card.label)
    check("source", checks.text, card.source, allow_empty=True)
    if card.hbm_visible_bytes is not None:
        check("hbm_visible_bytes", checks.number, card.hbm_visible_bytes, low=MIN_BYTES, high=MAX_BYTES,
              unit="bytes")
        if card.hbm_visible_bytes > card.hbm_bytes:
            raise ConfigError(src, "hbm_visible_bytes", f"must be at most hbm_bytes ({card.hbm_bytes:,}), "
                              f"got {card.hbm_visible_bytes:,}")
    if card.hbm_marketed_bytes is not None:
        check("hbm_marketed_bytes", checks.number, card.hbm_marketed_bytes, low=MIN_BYTES, high=MAX_BYTES,
              unit="bytes")
    for name, low, high, unit in (("hbm_bandwidth_bytes_per_s_range", MIN_HBM_BYTES_PER_S, MAX_BYTES_PER_S, "bytes/s"),
                                  ("flops_per_s_range", MIN_FLOPS_PER_S, MAX_FLOPS_PER_S, "FLOP/s")):
        value = getattr(card, name)
        if value is not None:
            object.__setattr__(card, name, _checked_range(src, name, value, low, high, unit))
    rng = card.hbm_bandwidth_bytes_per_s_range
    if rng is not None and not rng[0] <= card.hbm_bandwidth_bytes_per_s <= rng[1]:
        raise ConfigError(src, "hbm_bandwidth_bytes_per_s_range", f"must contain hbm_bandwidth_bytes_per_s "
                          f"({card.hbm_bandwidth_bytes_per_s:g}), got [{rng[0]:g}, {rng[1]:g}]")


def _check_provenance(card: Card) -> None:
    """``sources``, ``assumed`` and ``assumption``: each names figures the card sets."""
    src = card.name
    if not isinstance(card.sources, dict):
        raise ConfigError(src, "sources", "must be a table of figure = \"document and quote\", e.g. "
                          f"{{ hbm_bytes = \"nvidia-smi in ...\" }}, got {checks.show(card.sources)}")
    figures = card.figures()
    known = figures + tuple(k for k in ("flops_per_s",) if card.flops_per_s)
    for key, text in card.sources.items():
        if key not in known:
            raise ConfigError(src, f"sources.{key}", f"names no figure this card sets; known: {', '.join(known)}")
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(src, f"sources.{key}", f"must be a non-empty text, got {checks.show(text)}")
    assumed = card.assumed
    if isinstance(assumed, str) or not isinstance(assumed, (list, tuple)):
        raise ConfigError(src, "assumed", f"must be a list of figure names, e.g. [\"flops_per_s.int8\"], "
                          f"got {checks.show(assumed)}")
    for key in assumed:
        if key not in figures:
            raise ConfigError(src, "assumed", f"{checks.show(key)} names no figure this card sets; known: "
                              f"{', '.join(figures)}")
    if len(set(assumed)) != len(assumed):
        raise ConfigError(src, "assumed", f"lists a figure twice: {checks.show(list(assumed))}")
    object.__setattr__(card, "assumed", tuple(assumed))
    if not isinstance(card.assumption, str):
        raise ConfigError(src, "assumption", f"must be a text, got {checks.show(card.assumption)}")
    if assumed and not card.assumption.strip():
        raise ConfigError(src, "assumption", "missing: say what was assumed for the figures in 'assumed' "
                          "and why")
    if card.assumption.strip() and not assumed:
        raise ConfigError(src, "assumed", "missing: list the figures the 'assumption' text is about")


def _checked_range(src: str, name: str, value, least: float, most: float, unit: str) -> tuple:
    """``[low, high]``: two finite numbers in ``[least, most]`` with ``low <= high``, as a tuple."""
    what = f"must be [low, high]: two finite numbers in {least:,.0f}..{most:,.0f} ({unit}) with low <= high"
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ConfigError(src, name, f"{what}, got {checks.show(value)}")
    for i, v in enumerate(value):
        try:
            checks.number("", v, low=least, high=most)
        except checks.InputError:
            raise ConfigError(src, name, f"{what}, got {checks.show(list(value))}") from None
    if value[0] > value[1]:
        raise ConfigError(src, name, f"{what}, got low {value[0]:g} > high {value[1]:g}")
    return tuple(value)


_FIELDS = set(Card.__dataclass_fields__) - {"name", "extra", "preset", "file"}


def _closest(name: str, known) -> str:
    """``" (did you mean 'x'?)"`` for the known name closest to ``name``, or ``""``."""
    import difflib

    close = difflib.get_close_matches(str(name), sorted(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def card_from_dict(data: dict, *, name: str, source_file: str, preset: bool = False) -> Card:
    """A :class:`Card` from the table of a preset (``preset``) or of a user's TOML file (``source_file`` names it
    in errors). A user's card is never taken for a preset, whatever its file is called: published figures
    measured on a preset apply to it only as carried shares (:func:`pdcalc.perf.kernels.nearest_card`)."""
    if not isinstance(data, dict):
        raise ConfigError(source_file, None, f"expected a table of card fields, got {checks.show(data)}")
    for key in data:
        if key not in _FIELDS:
            raise ConfigError(source_file, key, "unknown field" + _closest(key, _FIELDS) + "; known: "
                              + ", ".join(sorted(_FIELDS)))
    known = dict(data)
    if "family" not in known:
        raise ConfigError(source_file, "family", f"missing: must be one of {', '.join(FAMILIES)} (the card's "
                          "maker; it picks the default KV-cache engine), e.g. family = \"ascend\"")
    for required in ("hbm_bytes", "hbm_bandwidth_bytes_per_s", "flops_per_s", "intra_node_bytes_per_s",
                     "scale_out_bytes_per_s"):
        if required not in known:
            raise ConfigError(source_file, required, "missing")
    known.setdefault("label", name)
    try:
        return Card(name=name, preset=preset, file="" if preset else source_file, **known)
    except ConfigError as exc:
        raise ConfigError(source_file, exc.field, exc.message) from None


@cache
def _presets() -> dict[str, dict]:
    path = resources.files("pdcalc").joinpath("data", "hardware.toml")
    with path.open("rb") as fh:
        return tomllib.load(fh)



def card_names() -> tuple[str, ...]:
    """Preset slugs."""
    return tuple(_presets())


def get_card(name: str | Path | Card) -> Card:
    """A card preset by slug (``ascend-910b2``, ``h200`` ...) or a path to a TOML file with the same keys."""
    if isinstance(name, Card):
        return name
    key = str(name)
    presets = _presets()
    if key in presets:
        return card_from_dict(presets[key], name=key, source_file="pdcalc/data/hardware.toml", preset=True)
    if key.strip() and (Path(key).suffix == ".toml" or _exists(key)):
        path = Path(key)
        return card_from_dict(load_toml(path, key), name=path.stem, source_file=key)
    raise UnknownNameError("card", key, presets)  # also an empty name ('' would be the current folder)


def _exists(key: str) -> bool:
    try:
        return Path(key).exists()
    except (OSError, ValueError):  # a name too long for the file system, a NUL character
        return False
