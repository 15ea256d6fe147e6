"""tryout6 #9: what verify_torch_function says when fn's arguments or outputs are not flat tensors.

A tuple of tensors as one argument was "example_inputs holds no floating-point tensor" (it holds two); a dict or a
dataclass output was "fn rejects its own example_inputs" (fn ran fine: gradspec cannot read its output).  Each
message must name what was given and the fix; the fixtures are in tests/_tryout6_torchio.py."""

from __future__ import annotations

import pytest

import gradspec as gs
from gradspec.ops.user import UserOpError
from tests import _tryout6_torchio as T


def _x(k=0.0):
    import torch

    return torch.linspace(-1.5, 1.3, 12, dtype=torch.float64).reshape(3, 4) + k


ERRORS = {
    # id: (fn, example_inputs, words the error must hold, words it must not)
    "tuple-of-tensors-argument": (T.tuple_in, lambda: ((_x(), _x(1)),),
                                  ["example_inputs[0]", "tuple", "2 floating-point tensors", "def ", "tuple_in((a, b))"],
                                  ["holds no floating-point tensor"]),
    "list-beside-a-tensor": (lambda x, ys: x * ys[0], lambda: (_x(), [_x(1)]),
                             ["example_inputs[1]", "list", "1 floating-point tensor"], []),
    "dict-output": (T.dict_out, lambda: (_x(),),
                    ["returned a dict", "tuple", "out['a'], out['b']"], ["rejects its own example_inputs"]),
    "dataclass-output": (T.dataclass_out, lambda: (_x(),),
                         ["returned a dataclass Out", "tuple", "out.y, out.z"], ["rejects its own example_inputs"]),
}


@pytest.mark.parametrize("fn, example, must, mustnot", ERRORS.values(), ids=ERRORS.keys())
def test_a_structured_argument_or_output_is_named_with_the_fix(fn, example, must, mustnot):
    with pytest.raises(UserOpError) as e:
        gs.verify_torch_function(fn, example_inputs=example(), max_examples=3, seed=1)
    msg = str(e.value)
    assert all(w in msg for w in must), msg
    assert not any(w in msg for w in mustnot), msg


def test_a_tuple_of_int_tensors_is_still_held_as_given():
    import torch

    idx = (torch.tensor([0, 2]), torch.tensor([1, 3]))  # (indices, not differentiated: held, as an int tensor is)
    r = gs.verify_torch_function(lambda x, ij: x[ij] * 2.0, example_inputs=(_x(), idx), max_examples=3, seed=1)
    assert r.status == "agree", [d.message for d in r.discrepancies]
