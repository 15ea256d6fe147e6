"""tryout11's CG solve on the normal equations (CGNR) with its adjoint-solve backward: correct code (trimmed from
the user's sciml.py).  At a singular A (all ones: a shrink target) CGNR converges to the least-squares solution of
least norm, which is continuous in A but not differentiable there: no derivative exists at that point."""

import torch


def _cg(matvec, rhs, tol, maxiter):
    x = torch.zeros_like(rhs)
    r = rhs.clone()
    p = r.clone()
    rs = (r * r).sum(-1, keepdim=True)
    bnorm = rs.sqrt().clamp_min(1e-300)
    for _ in range(maxiter):
        if bool(((rs.sqrt() / bnorm) <= tol).all()):
            break
        Ap = matvec(p)
        alpha = rs / (p * Ap).sum(-1, keepdim=True).clamp_min(1e-300)
        x = x + alpha * p
        r = r - alpha * Ap
        rs_new = (r * r).sum(-1, keepdim=True)
        p = r + (rs_new / rs.clamp_min(1e-300)) * p
        rs = rs_new
    return x


def cg_solve(A, b, tol=1e-12):
    """x = A^-1 b by CG on A^T A x = A^T b."""
    At = A.transpose(-1, -2)
    return _cg(lambda v: (At @ (A @ v.unsqueeze(-1))).squeeze(-1), (At @ b.unsqueeze(-1)).squeeze(-1), tol,
               20 * A.shape[-1])


class CGSolve(torch.autograd.Function):
    @staticmethod
    def forward(ctx, A, b):
        x = cg_solve(A, b)
        ctx.save_for_backward(A, x)
        return x

    @staticmethod
    def backward(ctx, g):
        A, x = ctx.saved_tensors
        lam = cg_solve(A.transpose(-1, -2), g)  # adjoint: A^T lam = g
        return -lam.unsqueeze(-1) * x.unsqueeze(-2), lam
