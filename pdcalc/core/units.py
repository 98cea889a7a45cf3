"""Units: everything inside pdcalc is bytes, seconds, FLOP and parameters.

GB (10^9 bytes) and GiB (2^30 bytes) are different units and are never mixed: a card sold as
"64 GB" of HBM has 64 GiB = 68,719,476,736 bytes, which is 68.7 GB. Conversion happens only at
the edges, through the helpers below.
"""

from __future__ import annotations

KB = 10**3
MB = 10**6
GB = 10**9
TB = 10**12
KiB = 2**10
MiB = 2**20
GiB = 2**30
TiB = 2**40

#: Byte multipliers of the unit words used by the claims registry and the formatters.
BYTE_UNITS: dict[str, int] = {
    "B": 1, "KB": KB, "MB": MB, "GB": GB, "TB": TB,
    "KiB": KiB, "MiB": MiB, "GiB": GiB, "TiB": TiB,
}

#: Parameter-count multipliers ("B params" is billions of parameters, never bytes).
PARAM_UNITS: dict[str, float] = {"params": 1, "K params": 1e3, "M params": 1e6, "B params": 1e9}

#: Bytes per element. Sub-byte formats are fractions (fp4 = 0.5 B); block scales are separate tensors.
#: Source: the formats' definitions (IEEE / OCP MX v1.0 for e2m1 and e8m0).
DTYPE_BYTES: dict[str, float] = {
    "fp64": 8.0,
    "fp32": 4.0,
    "int32": 4.0,
    "int64": 8.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,        # e4m3 / e5m2
    "e8m0": 1.0,       # power-of-two scale (OCP MX)
    "int8": 1.0,
    "fp4": 0.5,        # e2m1 (OCP MX), two values per byte
    "int4": 0.5,
}


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of ``dtype`` (e.g. ``dtype_bytes("fp4") == 0.5``)."""
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        from pdcalc.core.errors import UnknownNameError

        raise UnknownNameError("dtype", dtype, DTYPE_BYTES) from None


def to_unit(value_bytes: float, unit: str) -> float:
    """Convert bytes to ``unit`` (one of :data:`BYTE_UNITS`)."""
    return value_bytes / BYTE_UNITS[unit]


def from_unit(value: float, unit: str) -> float:
    """Convert a value in ``unit`` (bytes or parameter units) to bytes or parameters."""
    if unit in BYTE_UNITS:
        return value * BYTE_UNITS[unit]
    return value * PARAM_UNITS[unit]


def gb(value_bytes: float) -> float:
    """Bytes -> GB (10^9 bytes)."""
    return value_bytes / GB


def gib(value_bytes: float) -> float:
    """Bytes -> GiB (2^30 bytes)."""
    return value_bytes / GiB


def fmt_bytes(value_bytes: float, unit: str = "GiB", digits: int = 2) -> str:
    """Format bytes in an explicit unit, e.g. ``fmt_bytes(68719476736, "GB") == "68.72 GB"``."""
    return f"{to_unit(value_bytes, unit):,.{digits}f} {unit}"


def fmt_params(n: float, digits: int = 2) -> str:
    """Format a parameter count with decimal prefixes (B = 10^9 parameters)."""
    for unit, mult in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= mult:
            return f"{n / mult:,.{digits}f}{unit}"
    return f"{n:,.0f}"
