"""Straight-line Python for one graph structure: the reference oracle's loops over nodes written out once.

The reference oracle replays the engine's forward and backward for a structure from its plan
(``oracles/_reference_plan``): per call, a loop over the nodes that unpacks each node's spec, input positions
and edges from tuples, indexes lists of tensors and of pending gradients by position, and tests per edge.  For
one structure all of that is fixed, so this module writes the loop out as the source of one function per
structure (the forward) and one per backward schedule (the order depends on which tensors require grad),
with every position a local variable, and compiles it with ``compile``.

The generated code makes exactly the loop's calls, with the same arguments, in the same order: each op's own
``spec.forward`` and VJP rule (looked up on the spec object at each call, as the loop does: never a copy of an
op's math), the same tests deciding a copy, a broadcast reduction or a sum, the same helpers for those.  It
holds no value of a case: values enter as arguments on every call.  What the generated code calls is passed
in by the caller as a namespace (this module imports nothing of gradspec, so it sits in the base layer).

Generating costs ~0.1-0.3 ms a structure (``compile``), more than a few calls of a small case save, so the
callers generate only for a structure met ``COMPILE_AFTER`` times.

Example::

    >>> f = backward_function([], [0], [0], 1, {})
    >>> f([None], [], ["seed"], [])
    ['seed']
"""

from __future__ import annotations

__all__ = ["forward_function", "backward_function", "tangent_function", "COMPILE_AFTER"]

# From a structure's COMPILE_AFTER-th call on, the reference oracle's forward and backward schedules and the jacobian
# oracle's propagation run as straight-line code.  Measured (the reference) on
# the n <= 10 cases of /tmp/s13/corpus.json (load ~10): generating costs ~0.36 ms a structure (median; ``compile``)
# and saves ~4-5 us a call (47 -> 42 us), so it repays after ~80 calls.  With C/s ~ 70, waiting for the 64th call
# (the ski-rental rule) costs at most about twice the best choice made knowing the number of calls: fuzz checks
# ~6-16 value sets of a graph and never pays for it; verify_* at fixed shapes and gs.check in a loop do.
COMPILE_AFTER = 64


def forward_function(specs: list, params_how: list, inputs: list, cand: list, nleaves: int, namespace: dict):
    """The forward of a structure as one function ``f(leaves, nodes) -> (ts, rg, used)``.

    ``specs[k]``: node k's op spec; ``params_how[k]``: ``("const", params)`` (node k's params, kept for the
    structure), ``("raw",)`` (the case's own ``nodes[k].params``) or ``("dyn",)`` (``params(spec, arrays,
    nodes[k].params, canon, k)`` on every call); ``inputs[k]``: node k's input positions; ``cand[k]``: those
    it is differentiable in.  ``namespace`` holds ``Tensor``, ``array``, ``asarray``, ``ndarray``, ``mixed``,
    ``params``, ``canon`` and ``Abandon`` (``_reference_plan._forward``'s loop, written out)."""
    ns = dict(namespace)
    lines = ["def forward(leaves, nodes):"]
    add = lines.append
    for i in range(nleaves):
        add(f" d{i} = array(leaves[{i}].value, copy=True)")
        add(f" t{i} = Tensor(d{i})")
        add(f" t{i}._requires_grad = r{i} = bool(leaves[{i}].differentiable)")
    for k, (spec, how, ins) in enumerate(zip(specs, params_how, inputs)):
        ns[f"s{k}"] = spec
        m = nleaves + k
        args = ", ".join(f"d{j}" for j in ins)
        if len(ins) > 1:
            first = f"d{ins[0]}.dtype"
            differ = " or ".join(f"d{j}.dtype is not {first}" for j in ins[1:])
            add(f" if ({differ}) and mixed(s{k}, [{args}]):")
            add("  raise Abandon")  # (promotion or refusal: the engine's)
        if how[0] == "const":
            ns[f"c{k}"] = how[1]
            add(f" p{k} = c{k}")
        elif how[0] == "raw":
            add(f" p{k} = nodes[{k}].params")
        else:
            add(f" p{k} = params(s{k}, [{args}], nodes[{k}].params, canon, {k})")
        add(f" d{m} = s{k}.forward({args}{', ' if args else ''}**p{k})")
        add(f" if type(d{m}) is not ndarray:")
        add(f"  d{m} = asarray(d{m})")
        add(f" if d{m}.base is not None or not d{m}.flags.writeable:")
        add(f"  d{m} = d{m}.copy()")
        add(f" t{m} = Tensor(d{m})")
        add(f" r{m} = False")
        if cand[k]:
            anyrg = " or ".join(f"r{j}" for j in cand[k])
            add(f" if d{m}.dtype.kind in 'fc' and ({anyrg}):")
            add(f"  r{m} = t{m}._requires_grad = True")
    n = nleaves + len(inputs)
    add(f" return [{', '.join(f't{i}' for i in range(n))}], "
        f"[{', '.join(f'r{i}' for i in range(n))}], "
        f"[{', '.join(f'p{k}' for k in range(len(inputs)))}]")
    return _compile(lines, "forward", ns)


def backward_function(order: list, roots: list, outs: list, npos: int, namespace: dict):
    """The backward of one schedule as ``f(ts, used, seeds, named) -> [gradient at each of outs]`` (None where none
    arrived).  ``order``: ``_reference_plan._order``'s entries (node index, position, spec, input positions,
    edges); ``roots``: the roots' positions (one seed each, in order); ``outs``: the positions read out.
    ``namespace`` holds ``rule``, ``reduce_to`` and ``add`` (``_reference_plan._backward``'s loop, written out:
    ``named[k]`` is node k's name holder for ``reduce_to``'s message)."""
    ns = dict(namespace)
    lines = ["def backward(ts, used, seeds, named):"]
    add = lines.append
    if npos:
        add(f" {', '.join(f't{i}' for i in range(npos))}, = ts")
        add(f" {' = '.join(f'g{i}' for i in range(npos))} = None")
    reached = set()
    for i, r in enumerate(roots):
        add(f" g{r} = seeds[{i}]")
        reached.add(r)
    for k, pos, spec, ins, edges in order:
        if pos not in reached:
            continue  # (no gradient ever flows here: the loop finds None at this position on every call)
        ns[f"s{k}"] = spec
        add(f" if g{pos} is not None:")
        add(f"  gs = rule(s{k}, g{pos}, [{', '.join(f't{j}' for j in ins)}], t{pos}, used[{k}])")
        add(f"  g{pos} = None")
        for i, j in edges:
            add(f"  gi = gs[{i}]")
            add("  if gi is not None:")
            add(f"   if gi.data.shape != t{j}.data.shape or gi.data.dtype is not t{j}.data.dtype:")
            add(f"    gi = reduce_to(gi, t{j}, named[{k}], {i})")
            add(f"   g{j} = gi if g{j} is None else add(g{j}, gi)")
            reached.add(j)
    add(f" return [{', '.join(f'g{j}' for j in outs)}]")
    return _compile(lines, "backward", ns)


def _compile(lines: list, name: str, ns: dict):
    src = "\n".join(lines) + "\n"
    exec(compile(src, f"<gradspec straight-line {name}>", "exec"), ns)  # noqa: S102 - our own generated source
    return ns[name]


def tangent_function(steps: list, nleaves: int, namespace: dict):
    """The jacobian oracle's propagation loop of one structure (``jacobian._propagate_planned`` after the
    leaves' blocks) written out as ``f(T, vals, nodes, k) -> T``: one call of the oracle's own ``step``
    (``jacobian._jvp_step``, the one step of both of its paths) per node, with the same arguments.

    ``steps``: ``(node index, spec, input positions, which inputs carry a tangent)``; ``namespace`` holds
    ``step``."""
    ns = dict(namespace)
    lines = ["def propagate(T, vals, nodes, k):"]
    add = lines.append
    for j, spec, ins, use in steps:
        ns[f"s{j}"] = spec
        ns[f"i{j}"] = ins
        m = nleaves + j
        tans = ", ".join(f"T[{a}]" if u else "None" for a, u in zip(ins, use))
        add(f" T[{m}] = step(nodes[{j}], s{j}, [{tans}], vals, i{j}, vals[{m}], k)")
    add(" return T")
    return _compile(lines, "propagate", ns)
