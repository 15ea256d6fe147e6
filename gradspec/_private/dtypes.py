"""numpy dtype <-> torch naming, used to reproduce torch's error texts word for word."""

from __future__ import annotations

import numpy as np

# (torch repr, C type name used in "with dtype '...'", ScalarType name used in "grad_dtype '...'")
_NAMES = {
    np.dtype(np.float64): ("torch.float64", "double", "Double"),
    np.dtype(np.float32): ("torch.float32", "float", "Float"),
    np.dtype(np.float16): ("torch.float16", "c10::Half", "Half"),
    np.dtype(np.complex128): ("torch.complex128", "c10::complex<double>", "ComplexDouble"),
    np.dtype(np.complex64): ("torch.complex64", "c10::complex<float>", "ComplexFloat"),
    np.dtype(np.int64): ("torch.int64", "long int", "Long"),
    np.dtype(np.int32): ("torch.int32", "int", "Int"),
    np.dtype(np.int16): ("torch.int16", "short int", "Short"),
    np.dtype(np.int8): ("torch.int8", "signed char", "Char"),
    np.dtype(np.uint8): ("torch.uint8", "unsigned char", "Byte"),
    np.dtype(np.bool_): ("torch.bool", "bool", "Bool"),
}


def torch_repr(dt) -> str:
    dt = np.dtype(dt)
    return _NAMES.get(dt, (f"torch.{dt.name}",))[0]


def c_name(dt) -> str:
    dt = np.dtype(dt)
    return _NAMES.get(dt, (None, dt.name))[1]


def scalar_type(dt) -> str:
    dt = np.dtype(dt)
    return _NAMES.get(dt, (None, None, dt.name.capitalize()))[2]


def size_repr(shape) -> str:
    """torch.Size repr: ``torch.Size([2, 3])``."""
    return "torch.Size([" + ", ".join(str(int(s)) for s in shape) + "])"


def list_repr(shape) -> str:
    """The bracketed form used in 'got [3] but expected shape compatible with [2, 3]'."""
    return "[" + ", ".join(str(int(s)) for s in shape) + "]"


# dtype.kind instead of np.issubdtype: these run on every engine op (issubdtype costs ~1 us).
def is_float(dt) -> bool:
    return np.dtype(dt).kind == "f"


def is_complex(dt) -> bool:
    return np.dtype(dt).kind == "c"


def is_differentiable_dtype(dt) -> bool:
    return np.dtype(dt).kind in "fc"


def to_torch_dtype(dt):
    import torch

    return getattr(torch, torch_repr(dt).split(".", 1)[1])
