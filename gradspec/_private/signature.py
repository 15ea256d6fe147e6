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
    """``"(m,n),(n,p)->(m,p)"`` -> ([("m","n"),("n","p")], [("m","p")]); raises SignatureError.

    An op has one output: a signature declaring several is refused here (see :func:`parse_outputs`)."""
    ins, outs = parse_outputs(signature)
    if len(outs) != 1:
        raise SignatureError(
            f"signature {signature!r}: gradspec ops have exactly one output, this one declares {len(outs)}; "
            f"register one op per output (each with its own forward, vjp and signature, e.g. "
            f"{'(' + ','.join(ins[0]) + ')' if ins else '()'}->({','.join(outs[0])}) for the first), or return "
            "one array (concatenate the outputs, flattened), or check the function with "
            "gs.verify_torch_function, which takes tuple outputs and such a signature")
    return ins, outs


@functools.lru_cache(maxsize=None)
def parse_outputs(signature: str) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """:func:`parse` for code that may return several outputs (``verify_torch_function``'s fn returning
    ``(w, V)``: ``"(n,n)->(n),(n,n)"``, tryout11 #5); every output dimension must appear in an input."""
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
    if not outs:
        raise SignatureError(f"signature {signature!r} declares no output (expected e.g. '(n),(n)->()')")
    known = {d for a in ins for d in a}
    for d in (d for out in outs for d in out):
        if d not in known and not d.isdigit():
            raise SignatureError(f"signature {signature!r}: output dimension {d!r} does not appear in any input")
    return ins, outs


def elementwise(n: int) -> str:
    return ",".join(["()"] * n) + "->()"


def signature_out_shape(signature: str, shapes) -> tuple | None:
    """Output shape, or None if ``shapes`` do not fit the signature (loop dims broadcast)."""
    parse(signature)  # (an op's signature: one output, or its error)
    got = signature_out_shapes(signature, shapes)
    return None if got is None else got[0]


def signature_out_shapes(signature: str, shapes) -> list[tuple] | None:
    """The shape of every output :func:`parse_outputs` reads, or None if ``shapes`` do not fit."""
    ins, outs = parse_outputs(signature)
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
    return [tuple(loop) + tuple(int(d) if d.isdigit() else sizes[d] for d in out) for out in outs]


def core_ndims(signature: str) -> list[int]:
    ins, _ = parse(signature)
    return [len(a) for a in ins]
