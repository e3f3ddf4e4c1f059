"""One unit system inside (bytes, FLOP, seconds); decimal SI prefixes only at the edges.

Counting convention: FLOPs, not MACs — a GEMM of (m x k) @ (k x n) costs 2*m*k*n FLOP.
"""
from __future__ import annotations

from enum import Enum

KILO = 1e3
MEGA = 1e6
GIGA = 1e9
TERA = 1e12
PETA = 1e15


class DType(str, Enum):
    """Number formats for weights, activations and the KV cache.

    ``bytes_per_element`` includes block-scale overhead for microscaled formats:
    MXFP4 = 4-bit elements + one 8-bit scale per 32 (4.25 bit), NVFP4 = 4-bit + one fp8 scale per 16 (4.5 bit)
    (OCP Microscaling spec v1.0; NVIDIA Blackwell NVFP4 description), and for group-quantised int4:
    ``int4_g32`` = 4-bit integers + one bf16 scale per group of 32 (4.5 bit; compressed-tensors pack-quantized,
    group_size 32, symmetric: no zero point; Kimi-K2-Thinking / K2.5 / K2.6's routed experts). ``int4`` counts the
    4 bits alone.
    """

    fp32 = "fp32"
    tf32 = "tf32"
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    int8 = "int8"
    int4 = "int4"
    int4_g32 = "int4_g32"
    fp4 = "fp4"
    mxfp4 = "mxfp4"
    nvfp4 = "nvfp4"

    @property
    def bytes_per_element(self) -> float:
        return _BYTES[self]

    @property
    def peak_key(self) -> "DType":
        """The hardware peak-FLOP/s key that GEMMs in this format run at (block-scaled fp4 -> fp4)."""
        return {DType.mxfp4: DType.fp4, DType.nvfp4: DType.fp4, DType.int4_g32: DType.int4}.get(self, self)

    @property
    def kernel_format(self) -> "DType":
        """The format kernels are chosen by (a fused-MoE family's ``weight_formats``): int4 whatever its groups."""
        return DType.int4 if self is DType.int4_g32 else self


_BYTES = {
    DType.fp32: 4.0, DType.tf32: 4.0, DType.bf16: 2.0, DType.fp16: 2.0, DType.fp8: 1.0, DType.int8: 1.0,
    DType.int4: 0.5, DType.int4_g32: 4.5 / 8, DType.fp4: 0.5, DType.mxfp4: 4.25 / 8, DType.nvfp4: 4.5 / 8,
}


def parse_dtype(text: str) -> DType:
    """Accept common spellings: 'bf16', 'bfloat16', 'float16', 'fp8_e4m3', 'float8'."""
    key = text.strip().lower().replace("-", "").replace("_", "")
    aliases = {
        "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32",
        "fp8e4m3": "fp8", "fp8e5m2": "fp8", "float8": "fp8", "e4m3": "fp8",
    }
    key = aliases.get(key, key)
    try:
        return DType(key)
    except ValueError:
        known = ", ".join(d.value for d in DType)
        from dsdsim.errors import DsdsimError

        raise DsdsimError(f"unknown dtype {text!r}; use one of: {known}") from None


def format_si(value: float, unit: str = "", digits: int = 3) -> str:
    """Format with a decimal SI prefix: format_si(3.35e12, 'B/s') -> '3.35 TB/s'."""
    if value != value:  # NaN
        return "nan"
    prefixes = [(1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")]
    mag = abs(value)
    for scale, prefix in prefixes:
        if mag >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}".rstrip()
    if mag == 0:
        return f"0 {unit}".rstrip()
    for scale, prefix in [(1e-3, "m"), (1e-6, "u"), (1e-9, "n")]:
        if mag >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}".rstrip()
    return f"{value:.{digits}g} {unit}".rstrip()


def format_percent(fraction, digits: int = 1, *, signed: bool = False, missing: str = "-") -> str:
    """A fraction as a percentage: 0.0123 -> '1.2%' ('+1.2%' signed); ``missing`` for None or NaN."""
    if fraction is None or fraction != fraction or fraction in (float("inf"), float("-inf")):
        return missing
    return f"{100 * fraction:{'+' if signed else ''}.{digits}f}%"


def median_abs(values) -> float:
    """The median of |values| (NaN for none): the error figure every fit and report states."""
    from statistics import median

    v = [abs(float(x)) for x in values]
    return float(median(v)) if v else float("nan")


def format_seconds(seconds: float) -> str:
    return format_si(seconds, "s")


def format_count(n: float) -> str:
    """Parameter counts and token counts: 8.03e9 -> '8.03 B'."""
    for scale, suffix in [(1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")]:
        if abs(n) >= scale:
            return f"{n / scale:.3g} {suffix}"
    return f"{n:.3g}"
