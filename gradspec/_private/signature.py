"""numpy gufunc signatures ("(m,n),(n,p)->(m,p)"): parsing and output shapes."""

from __future__ import annotations

import functools
import re

import numpy as np

_ARG = re.compile(r"\(([^()]*)\)")


class SignatureError(ValueError):
    pass


@functools.lru_cache(maxsize=None)
def parse(signature: str) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """``"(m,n),(n,p)->(m,p)"`` -> ([("m","n"),("n","p")], [("m","p")]); raises SignatureError."""
    sig = signature.replace(" ", "")
    if "->" not in sig:
        raise SignatureError(f"signature {signature!r} has no '->' (expected e.g. '(n),(n)->()')")
    lhs, rhs = sig.split("->", 1)

    def args(side: str) -> list[tuple[str, ...]]:
        found = _ARG.findall(side)
        rebuilt = ",".join(f"({a})" for a in found)
        if rebuilt != side:
            raise SignatureError(f"signature {signature!r} is not of the form '(a,b),(c)->(d)'")
        out = []
        for a in found:
            dims = tuple(d for d in a.split(",") if d)
            for d in dims:
                if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*|\d+", d):
                    raise SignatureError(f"signature {signature!r}: bad dimension name {d!r}")
            out.append(dims)
        return out

    ins, outs = args(lhs), args(rhs)
    if len(outs) != 1:
        raise SignatureError(
            f"signature {signature!r}: gradspec ops have exactly one output, this one declares {len(outs)}; "
            f"register one op per output (each with its own forward, vjp and signature, e.g. "
            f"{'(' + ','.join(ins[0]) + ')' if ins else '()'}->({','.join(outs[0])}) for the first), or return "
            "one array (concatenate the outputs, flattened), or check the function with "
            "gs.verify_torch_function, which takes tuple outputs")
    known = {d for a in ins for d in a}
    for d in outs[0]:
        if d not in known and not d.isdigit():
            raise SignatureError(f"signature {signature!r}: output dimension {d!r} does not appear in any input")
    return ins, outs


def elementwise(n: int) -> str:
    return ",".join(["()"] * n) + "->()"


def signature_out_shape(signature: str, shapes) -> tuple | None:
    """Output shape, or None if ``shapes`` do not fit the signature (loop dims broadcast)."""
    ins, (out,) = parse(signature)
    if len(shapes) != len(ins):
        return None
    sizes: dict[str, int] = {}
    loops = []
    for shape, core in zip(shapes, ins):
        shape = tuple(shape)
        if len(shape) < len(core):
            return None
        k = len(shape) - len(core)
        loops.append(shape[:k])
        for name, size in zip(core, shape[k:]):
            if name.isdigit():
                if int(name) != size:
                    return None
            elif sizes.setdefault(name, size) != size:
                return None
    try:
        loop = np.broadcast_shapes(*loops)
    except ValueError:
        return None
    return tuple(loop) + tuple(int(d) if d.isdigit() else sizes[d] for d in out)


def core_ndims(signature: str) -> list[int]:
    ins, _ = parse(signature)
    return [len(a) for a in ins]
