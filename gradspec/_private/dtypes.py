"""numpy dtype <-> torch naming, used to reproduce torch's error texts word for word, and torch's dtype rules
(promotion of elementwise operands, refusal by ops that do not promote) as the engine applies them."""

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


# ---------------------------------------------------------------------------------------------
# torch's dtype rules (the engine's apply)
# ---------------------------------------------------------------------------------------------


def keep_float_dtype(spec, arrays: list, data: np.ndarray) -> np.ndarray:
    """A user op's numpy forward whose output changes the one float dtype of its inputs (numpy promotes
    float32 to float64 through a float64 constant or an integer array; a float32 computation inside returns
    float32) is cast back to that dtype, as every torch op and its torch twin keep it: else the next op meets
    inputs of two dtypes (``mm`` refuses them, elementwise ops compute in float64 what torch computes in
    float32).  Recorded on the spec (``_gs_forward_dtype``) for verify_op's note."""
    floats = {a.dtype for a in arrays if a.dtype.kind == "f"}
    if len(floats) != 1:
        return data
    (want,) = floats
    if data.dtype == want:
        return data
    spec._gs_forward_dtype = (str(want), str(data.dtype))
    return data.astype(want)


class DtypeMismatchError(RuntimeError):
    """An op that torch runs without type promotion (mm, matmul, ...) was given inputs of different dtypes."""


def same_dtype(spec, arrays: list) -> None:
    """Refuse what torch refuses: ops without type promotion (``OpSpec.same_dtype``: mm, matmul, linear,
    conv1d, einsum) given tensors of different dtypes, where numpy would promote and compute."""
    dts = [a.dtype for a in arrays]
    if any(d != dts[0] for d in dts):
        names = " != ".join(f"{c_name(d)} ({d})" for d in dts)  # torch's words: "long int != double"
        raise DtypeMismatchError(
            f"{spec.name}: expected all inputs to have the same dtype, but got: {names} ({spec.torch_name or spec.name} "
            f"does not promote dtypes, unlike elementwise ops): cast the inputs to one dtype")


def promote(spec, arrays: list) -> list:
    """Cast the operands of an elementwise op to torch's result dtype (only what differs from numpy).

    torch ranks operands: tensors with dimensions decide the dtype unless a 0-d tensor is of a
    higher category (bool < int < float < complex).  So ``float32 (3,) * float64 0-d`` stays
    float32 in torch while numpy (NEP 50) gives float64: without this a float32 graph would
    silently compute in float64.  The VJP rules then see the original operands and the engine
    casts each gradient back to its operand's dtype (reference 8.8).
    """
    dt = arrays[0].dtype
    if all(a.dtype == dt for a in arrays):
        return arrays  # one dtype: nothing to promote (the common case, kept cheap)
    idx = [i for i, a in enumerate(arrays) if spec.input_differentiable(i) and a.dtype.kind in "biufc"]
    if len(idx) < 2:
        return arrays
    dim = [arrays[i].dtype for i in idx if arrays[i].ndim > 0]
    zero = [arrays[i].dtype for i in idx if arrays[i].ndim == 0]
    if not dim or not zero:
        return arrays  # one rank class only: numpy's promotion is torch's
    target = combine_categories(np.result_type(*dim), np.result_type(*zero))
    out = list(arrays)
    for i in idx:
        if out[i].dtype != target:
            out[i] = out[i].astype(target)
    return out


def combine_categories(higher: np.dtype, lower: np.dtype) -> np.dtype:
    # c10's combine_categories (TypeProperties.cpp): `higher` = dtype of the dimensioned operands.
    if higher.kind == "c":
        return higher
    if lower.kind == "c":
        return np.result_type(higher, np.complex64) if higher.kind == "f" else lower
    if higher.kind == "f":
        return higher
    if higher.kind == "b" or lower.kind == "f":
        return np.result_type(higher, lower)
    return higher
