"""Code of the tryout9 report (a probabilistic-programming library): log1mexp written for x > 0 (Maechler 2012)
but declared on TFP's x < 0 domain, so its forward is NaN at every value drawn; and functions NaN on part of
their domain.  Module level, so that their cases replay; used by tests/test_verify_nonfinite.py."""

import numpy as np
import torch

import gradspec as gs

LOG2 = float(np.log(2.0))


def _np_log1mexp(x):
    """log(1 - exp(-x)): NaN for x < 0 (1 - exp(-x) < 0 there)."""
    with np.errstate(all="ignore"):
        return np.where(x < LOG2, np.log(-np.expm1(-x)), np.log1p(-np.exp(-x)))


class Log1mexp(torch.autograd.Function):
    """log(1 - exp(-x)), x > 0: correct there, NaN for x < 0."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.where(x < LOG2, torch.log(-torch.expm1(-x)), torch.log1p(-torch.exp(-x)))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g / torch.expm1(x)


# the mix-up: the x > 0 formula declared on x < 0
log1mexp_negdomain = gs.Op("t9_log1mexp_negdomain", forward=_np_log1mexp, vjp=lambda g, x, out: (g / np.expm1(x),),
                           domain=gs.domains.interval(-5, -1))


def _np_log(x):
    with np.errstate(all="ignore"):
        return np.log(x)


# NaN on the negative half of its (default, real) domain: those draws are skipped, the positive ones checked
log_real = gs.Op("t9_log_real", forward=_np_log, vjp=lambda g, x, out: (g / x,))
log_real_bad = gs.Op("t9_log_real_bad", forward=_np_log, vjp=lambda g, x, out: (-g / x,))
