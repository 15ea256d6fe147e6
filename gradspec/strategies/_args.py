"""Argument validation for the public strategies, up front (in the style of hypothesis.extra.numpy):
a bad argument raises ``InvalidArgument`` naming it and the fix when the strategy is created."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis.errors import InvalidArgument

from .. import domains as _domains

DTYPES = ("float64", "float32")
# What ``cases(dtype=...)`` / ``graphs(dtype=...)`` accept: one float dtype for every leaf, "mixed"
# (float32 and float64 leaves in one graph, promoted where an op mixes them, as torch does) or
# "any" (the default mix of the three).
DTYPE_MIXES = DTYPES + ("mixed", "any")


def _check_int(name: str, value: Any, floor: int = 0, ceiling: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidArgument(f"{name}={value!r} must be an integer, not {type(value).__name__}")
    if value < floor:
        raise InvalidArgument(f"{name}={value!r} must be at least {floor}; pass {name}>={floor}")
    if ceiling is not None and value > ceiling:
        raise InvalidArgument(f"{name}={value!r} must be at most {ceiling}; pass {name}<={ceiling}")


def _check_order(lo_name: str, lo: Any, hi_name: str, hi: Any) -> None:
    if hi is not None and lo > hi:
        raise InvalidArgument(f"{lo_name}={lo!r} is larger than {hi_name}={hi!r}; pass {lo_name} <= {hi_name}")


def _check_shape(shape: Any, name: str = "shape") -> tuple:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (int(shape),)
    if not isinstance(shape, (tuple, list)) or not all(
        isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in shape
    ):
        raise InvalidArgument(f"{name}={shape!r} must be a tuple of integers, e.g. {name}=(2, 3)")
    if any(s < 0 for s in shape):
        raise InvalidArgument(f"{name}={tuple(shape)!r} has a negative size; every size must be >= 0")
    return tuple(int(s) for s in shape)


def _check_dtype(dtype: Any, name: str = "dtype") -> str:
    try:
        dt = np.dtype(dtype).name
    except TypeError:
        dt = None
    if dt not in DTYPES:
        raise InvalidArgument(f"{name}={dtype!r} is not supported: pass {name}='float64' or {name}='float32'")
    return dt


def _check_magnitudes(min_magnitude: Any, max_magnitude: Any) -> None:
    for name, v in (("min_magnitude", min_magnitude), ("max_magnitude", max_magnitude)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) or not math.isfinite(v):
            raise InvalidArgument(f"{name}={v!r} must be a finite number")
        if v <= 0:
            raise InvalidArgument(f"{name}={v!r} must be > 0 (exact zeros are drawn anyway where the domain allows)")
    _check_order("min_magnitude", min_magnitude, "max_magnitude", max_magnitude)
    if max_magnitude > 1e8:
        raise InvalidArgument(
            f"max_magnitude={max_magnitude!r} is beyond where float64 finite differences stay meaningful; "
            "pass max_magnitude<=1e8"
        )


def _check_domain(domain: Any) -> list:
    doms = domain if isinstance(domain, (list, tuple)) else [domain]
    out = []
    for d in doms:
        if d is None:
            continue
        if not isinstance(d, _domains.Domain):
            raise InvalidArgument(
                f"domain={domain!r} must be a gradspec.domains.Domain (e.g. gs.domains.positive()) or a list of them"
            )
        out.append(d)
    return out


def _check_dtype_mix(dtype: Any, name: str = "dtype") -> str:
    if isinstance(dtype, str) and dtype in ("mixed", "any"):
        return dtype
    try:
        dt = np.dtype(dtype).name
    except TypeError:
        dt = None
    if dt not in DTYPES:
        raise InvalidArgument(
            f"{name}={dtype!r} is not supported: pass {name}='float64', 'float32', 'mixed' (both in one graph) or "
            "'any' (the default mix)"
        )
    return dt
