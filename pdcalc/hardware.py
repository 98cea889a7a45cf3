"""Accelerator presets (``pdcalc/data/hardware.toml``) and user hardware files.

Units are in the field names: bytes, bytes per second, FLOP per second. A user's own card is a TOML
file with the same keys; a missing or nonsensical field is an error naming the file and the field.

Every number is finite and positive, and at most a bound that leaves room for cards decades ahead:

=================================================== ============ ================================
field                                               at most      largest preset
=================================================== ============ ================================
hbm_bytes, hbm_visible_bytes                        2**50 B      180e9 B (B200); 1 PiB
hbm_bandwidth_bytes_per_s (and its range)           2**50 B/s    8.0e12 B/s (B200); 1.1 PB/s
intra_node_bytes_per_s, scale_out_bytes_per_s       2**50 B/s    900e9 B/s (B200 NVLink)
flops_per_s.<dtype> (and flops_per_s_range)         2**60 FLOP/s 4.5e15 (B200 FP8); 1.2e18
cards_per_node                                      65,536       8 (a rack-scale domain: 72, 384)
=================================================== ============ ================================

``hbm_visible_bytes`` is at most ``hbm_bytes``; a ``*_range`` is ``[low, high]``, two such numbers with
``low <= high``, and the bandwidth range contains the bandwidth used.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

from pdcalc import checks
from pdcalc.errors import ConfigError, UnknownNameError, load_toml

#: Upper bounds of the card fields (see the module docstring).
MAX_BYTES = 2**50
MAX_BYTES_PER_S = 2**50
MAX_FLOPS_PER_S = 2**60
MAX_CARDS_PER_NODE = 65536


@dataclass(frozen=True, kw_only=True)
class Card:
    """One accelerator."""

    name: str                                   # preset slug or file name
    label: str                                  # human-readable name
    hbm_bytes: float                            # installed HBM
    hbm_bandwidth_bytes_per_s: float            # HBM bandwidth used by the models
    flops_per_s: dict                           # dense peak per dtype, FLOP/s
    intra_node_bytes_per_s: float               # per device, one way, inside a node
    scale_out_bytes_per_s: float                # per device, one way, between nodes
    cards_per_node: int = 8                     # devices per server
    hbm_visible_bytes: float | None = None      # what the runtime exposes, when documented
    hbm_bandwidth_bytes_per_s_range: tuple | None = None  # [low, high] where sources disagree
    flops_per_s_range: tuple | None = None
    source: str = ""
    extra: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        src = self.name

        def check(name, fn, *args, **kw):
            try:
                return fn("", *args, **kw)
            except checks.InputError as exc:
                raise ConfigError(src, name, str(exc)) from None

        for name, high, unit in (("hbm_bytes", MAX_BYTES, "bytes"),
                                 ("hbm_bandwidth_bytes_per_s", MAX_BYTES_PER_S, "bytes/s"),
                                 ("intra_node_bytes_per_s", MAX_BYTES_PER_S, "bytes/s"),
                                 ("scale_out_bytes_per_s", MAX_BYTES_PER_S, "bytes/s")):
            check(name, checks.number, getattr(self, name), low=0, high=high, low_open=True, unit=unit)
        if not isinstance(self.flops_per_s, dict) or not self.flops_per_s:
            raise ConfigError(src, "flops_per_s", "must be a non-empty table of dtype = FLOP/s, e.g. "
                              f"{{ bf16 = 989e12 }}, got {checks.show(self.flops_per_s)}")
        for k, v in self.flops_per_s.items():
            check(f"flops_per_s.{k}", checks.number, v, low=0, high=MAX_FLOPS_PER_S, low_open=True, unit="FLOP/s")
        cards = check("cards_per_node", checks.integer, self.cards_per_node, low=1, high=MAX_CARDS_PER_NODE)
        object.__setattr__(self, "cards_per_node", cards)  # 8.0 -> 8
        check("label", checks.text, self.label)
        check("source", checks.text, self.source, allow_empty=True)
        if self.hbm_visible_bytes is not None:
            check("hbm_visible_bytes", checks.number, self.hbm_visible_bytes, low=0, high=MAX_BYTES, low_open=True,
                  unit="bytes")
            if self.hbm_visible_bytes > self.hbm_bytes:
                raise ConfigError(src, "hbm_visible_bytes", f"must be at most hbm_bytes ({self.hbm_bytes:,}), "
                                  f"got {self.hbm_visible_bytes:,}")
        for name, high, unit in (("hbm_bandwidth_bytes_per_s_range", MAX_BYTES_PER_S, "bytes/s"),
                                 ("flops_per_s_range", MAX_FLOPS_PER_S, "FLOP/s")):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _checked_range(src, name, value, high, unit))
        rng = self.hbm_bandwidth_bytes_per_s_range
        if rng is not None and not rng[0] <= self.hbm_bandwidth_bytes_per_s <= rng[1]:
            raise ConfigError(src, "hbm_bandwidth_bytes_per_s_range", f"must contain hbm_bandwidth_bytes_per_s "
                              f"({self.hbm_bandwidth_bytes_per_s:g}), got [{rng[0]:g}, {rng[1]:g}]")

    @property
    def usable_base_bytes(self) -> float:
        """Memory a serving engine's utilisation fraction applies to: the visible memory where known."""
        return self.hbm_visible_bytes or self.hbm_bytes

    def flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype`` (error listing the known dtypes if absent)."""
        try:
            return self.flops_per_s[dtype]
        except KeyError:
            raise UnknownNameError(f"dtype for {self.name}", dtype, self.flops_per_s) from None


def _checked_range(src: str, name: str, value, high: float, unit: str) -> tuple:
    """``[low, high]``: two finite positive numbers (at most ``high``) with ``low <= high``, as a tuple."""
    what = f"must be [low, high]: two finite numbers in (0, {high:,}] ({unit}) with low <= high"
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ConfigError(src, name, f"{what}, got {checks.show(value)}")
    for i, v in enumerate(value):
        try:
            checks.number("", v, low=0, high=high, low_open=True)
        except checks.InputError:
            raise ConfigError(src, name, f"{what}, got {checks.show(list(value))}") from None
    if value[0] > value[1]:
        raise ConfigError(src, name, f"{what}, got low {value[0]:g} > high {value[1]:g}")
    return tuple(value)


_FIELDS = set(Card.__dataclass_fields__) - {"name", "extra"}


def card_from_dict(data: dict, *, name: str, source_file: str) -> Card:
    """A :class:`Card` from the table of a preset or of a user's TOML file (``source_file`` names it in errors)."""
    if not isinstance(data, dict):
        raise ConfigError(source_file, None, f"expected a table of card fields, got {checks.show(data)}")
    known = {k: v for k, v in data.items() if k in _FIELDS}
    for required in ("hbm_bytes", "hbm_bandwidth_bytes_per_s", "flops_per_s", "intra_node_bytes_per_s",
                     "scale_out_bytes_per_s"):
        if required not in known:
            raise ConfigError(source_file, required, "missing")
    known.setdefault("label", name)
    try:
        return Card(name=name, extra={k: v for k, v in data.items() if k not in _FIELDS}, **known)
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
        return card_from_dict(presets[key], name=key, source_file="pdcalc/data/hardware.toml")
    if key.strip() and (Path(key).suffix == ".toml" or _exists(key)):
        path = Path(key)
        return card_from_dict(load_toml(path, key), name=path.stem, source_file=key)
    raise UnknownNameError("card", key, presets)  # also an empty name ('' would be the current folder)


def _exists(key: str) -> bool:
    try:
        return Path(key).exists()
    except (OSError, ValueError):  # a name too long for the file system, a NUL character
        return False
