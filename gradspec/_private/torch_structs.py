"""What ``verify_torch_function`` says about arguments and outputs that are not flat tensors (tryout6 #9).

gradspec differentiates fn's positional tensor arguments and reads a tensor or a tuple of tensors back.
A float tensor inside a tuple, list or dict argument would be held constant (its gradient never
checked), and a dict or dataclass output cannot be read: both are refused with a message that names
what was given and spells the module-level wrapper that makes it flat.

Example::

    >>> import torch
    >>> from gradspec._private.torch_structs import nested_inputs, output_refusal
    >>> x = torch.zeros(2)
    >>> print(nested_inputs("pair_mul", ((x, x),)))
    example_inputs[0] is a tuple holding 2 floating-point tensors: ...
    >>> print(output_refusal({"a": x, "b": x}))
    fn returned a dict (keys 'a', 'b'), not a tensor or a tuple of tensors: ...
"""

from __future__ import annotations

import dataclasses
import string

__all__ = ["NOT_A_TENSOR", "nested_inputs", "output_refusal"]

# the words every output refusal holds (fn_shapes tells it from fn refusing its inputs by them)
NOT_A_TENSOR = "not a tensor or a tuple of tensors"


def _floats(v) -> int:
    """How many floating-point tensors ``v`` holds, inside tuples, lists and dicts at any depth."""
    import torch

    if isinstance(v, torch.Tensor):
        return int(v.is_floating_point() or v.is_complex())
    if isinstance(v, (tuple, list)):
        return sum(_floats(e) for e in v)
    if isinstance(v, dict):
        return sum(_floats(e) for e in v.values())
    return 0


def _spell(v, names: list) -> str:
    """``v`` as source, each leaf a new name (a, b, c, ...) appended to ``names``."""
    if isinstance(v, (tuple, list)) and not hasattr(v, "_fields"):
        inner = ", ".join(_spell(e, names) for e in v)
        return f"[{inner}]" if isinstance(v, list) else f"({inner},)" if len(v) == 1 else f"({inner})"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k!r}: {_spell(e, names)}" for k, e in v.items()) + "}"
    k = len(names)
    names.append(string.ascii_lowercase[k % 26] + (str(k // 26) if k >= 26 else ""))
    return names[-1]


def nested_inputs(label: str, example) -> str | None:
    """Why ``example`` (example_inputs) cannot be used as given, or None: an argument that is a tuple, list or
    dict holding floating-point tensors, with the wrapper that passes them as separate arguments."""
    nested = [(k, v, _floats(v)) for k, v in enumerate(example) if isinstance(v, (tuple, list, dict)) and _floats(v)]
    if not nested:
        return None
    k, v, n = nested[0]
    names: list = []
    call = ", ".join(_spell(a, names) for a in example)
    fn = "".join(ch if ch.isalnum() else "_" for ch in label.split(".")[-1] or "fn") or "fn"
    return (f"example_inputs[{k}] is a {type(v).__name__} holding {n} floating-point tensor{'s' * (n != 1)}: gradspec "
            "differentiates fn's positional tensor arguments, never tensors inside a tuple, list or dict (they would "
            "be held constant, their gradients unchecked); pass each as its own argument through a wrapper defined "
            f"at module level (so that replays can import it): `def {fn}_flat({', '.join(names)}): "
            f"return {label}({call})`, with example_inputs=({', '.join(names)}) in that order")


def output_refusal(y) -> str:
    """The message for an output that is neither a tensor nor a tuple/list of them."""
    import torch

    if isinstance(y, dict):
        keys = [k for k, v in y.items() if isinstance(v, torch.Tensor)]
        what = f"a {type(y).__name__} (keys {', '.join(repr(k) for k in y)})"
        parts = [f"out[{k!r}]" for k in keys]
    elif dataclasses.is_dataclass(y) and not isinstance(y, type):
        fields = [f.name for f in dataclasses.fields(y)]
        what = f"a dataclass {type(y).__name__} (fields {', '.join(fields)})"
        parts = [f"out.{f}" for f in fields if isinstance(getattr(y, f, None), torch.Tensor)]
    else:
        what, parts = f"an object of type {type(y).__name__}", []
    fix = (f"`def fn_t(*args): out = fn(*args); return ({', '.join(parts)}{',' * (len(parts) == 1)})`"
           if parts else "return the tensors themselves")
    return (f"fn returned {what}, {NOT_A_TENSOR}: gradspec reads fn's gradients through tensor outputs; return a "
            f"tuple of them, e.g. through a wrapper defined at module level: {fix}")
