"""The torch oracle takes a table-op graph's gradients from torch's engine (``accumulate_grad=False``) instead
of ``.backward()`` + ``.grad``: every answer must be what ``.grad`` would hold, bit for bit (value, dtype, shape,
None for a leaf no gradient reaches), and no two answers may share memory (``add``'s backward hands one tensor
to both inputs; ``sum``'s is a stride-0 expansion), since later rules may write into a gradient."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

import gradspec as gs
from gradspec.oracles import torch_oracle
from gradspec.oracles.torch_oracle import build_torch_graph

RNG = np.random.default_rng(515)


def _grad_reference(case):
    """What ``.backward()`` leaves in each differentiable leaf's ``.grad`` (the path before the capture)."""
    env, roots = build_torch_graph(case)
    seeds = [None if s is None else torch.from_numpy(np.array(s, copy=True)) for s in case.seeds]
    torch.autograd.backward(roots, seeds)
    return {l.name: None if env[l.name].grad is None else env[l.name].grad.numpy() for l in case.grad_leaves()}


def _cases():
    x, y = RNG.standard_normal(4), RNG.standard_normal(4)
    b = gs.Case.build
    yield "add-aliases", b({"x": x, "y": y}, [("h", "add", ["x", "y"], {}), ("r", "sum", ["h"], {})], ["r"])
    yield "sum-expands", b({"x": x}, [("r", "sum", ["x"], {"dim": [0], "keepdim": True})], ["r"], [np.array([0.7])])
    yield "leaf-twice", b({"x": x}, [("h", "mul", ["x", "x"], {}), ("r", "sum", ["h"], {})], ["r"])
    yield "unreached", b({"x": x, "z": y}, [("r", "sum", ["x"], {})], ["r"])
    yield "zero-d", b({"x": np.array(0.3)}, [("r", "neg", ["x"], {})], ["r"])
    yield "float32", b({"x": x.astype(np.float32)}, [("h", "exp", ["x"], {})], ["h"], [np.float32(y)])
    yield "two-roots", b({"x": x}, [("h", "sin", ["x"], {}), ("r", "sum", ["h"], {})], ["h", "r"], [y, None])


CASES = list(_cases())


@pytest.mark.parametrize("case", [c for _, c in CASES], ids=[n for n, _ in CASES])
def test_captured_gradients_are_what_grad_holds_bit_for_bit_and_never_alias(case):
    got = gs.oracles.get("torch-cpu").vjp(case)
    want = _grad_reference(case)
    assert got.keys() == want.keys()
    for name, w in want.items():
        g = got[name]
        if w is None:
            assert g is None, name
            continue
        assert g.dtype == w.dtype and g.shape == w.shape and g.tobytes() == w.tobytes(), name
        assert g.flags.c_contiguous and g.flags.writeable and g.flags.owndata, name
    arrays = [g for g in got.values() if g is not None]
    for i, a in enumerate(arrays):
        for other in arrays[i + 1:]:
            assert not np.shares_memory(a, other)
        for s in case.seeds:
            assert s is None or not np.shares_memory(a, s)


def test_the_capture_is_the_path_taken_and_torch_debug_logging_falls_back_to_backward(monkeypatch):
    case = dict(CASES)["add-aliases"]
    calls = []
    real = torch_oracle._backward
    monkeypatch.setattr(torch_oracle, "_backward", lambda *a, **k: calls.append(1) or real(*a, **k))
    quiet = gs.oracles.get("torch-cpu").vjp(case)
    assert calls == []  # captured: no .backward(), nobody's .grad written
    log = logging.getLogger("torch.autograd.graph")
    old = log.level
    log.setLevel(logging.DEBUG)  # torch's _engine_run_backward then logs each node: its wrapper must run
    try:
        logged = gs.oracles.get("torch-cpu").vjp(case)
    finally:
        log.setLevel(old)
    assert calls == [1]
    assert all(quiet[k].tobytes() == logged[k].tobytes() for k in quiet)
