"""The ``gradspec`` command line: ``fuzz``, ``replay``, ``ops``.

Exit codes: 0 no discrepancy, 1 discrepancies found (each written as a report; one whose report could not be
written is printed whole, with the write error), 2 usage error (bad arguments, an engine or case that cannot be
loaded, a report dir that cannot be written and no discrepancy),
3 inconclusive (no case ran, or no pair of oracles was compared; the reason is printed),
130 interrupted (Ctrl-C) before any discrepancy was found (SIGTERM / SIGHUP: 143 / 129, the same way).

Examples::

    gradspec fuzz                                   # 200 cases against the reference engine, reports/
    gradspec fuzz --seconds 600 --workers 4         # 4 processes (pytest-xdist), one summary
    gradspec fuzz --engine mypkg.autodiff:engine --ops add,mul,exp,sum --max-examples 500
    gradspec fuzz --workers 8 --tx 4*ssh=host1//python=python3 --tx 4*ssh=host2//python=python3 \\
                  --report-dir /shared/reports      # shards on two machines (shared storage), one summary
    gradspec replay reports/d-1234abcd56/case.json
    gradspec ops --json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile

__all__ = ["main"]

from ._cli_args import (
    EXIT_FOUND,
    EXIT_INCONCLUSIVE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    WORKERS_PER_CPU,
    _check_lists,
    _check_output_paths,
    _data_flags,
    _err,
    _isolate_flag,
    _load_case,
    _max_local_workers,
    _nonneg_float,
    _Parser,
    _positive_float,
    _positive_int,
    _safe_streams,
    _seed,
    _split,
    _UsageError,
)
from ._cli_explain import _explain, _ops
from ._cli_finish import (
    _fuzz_finish,
    _module_not_allowed,
    _print_summary,  # noqa: F401 - cli._print_summary: tests print a summary with it
    interrupted_run,
)
from ._private.child_wait import BLOCKED, LATE, STOP_GRACE, wait_child  # noqa: F401 - cli.STOP_GRACE: tests


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gradspec", description="Property-based verification of gradients (backward(seed) = J^T . seed).",
                epilog="exit codes: 0 no discrepancy, 1 discrepancies (each written as a report), 2 usage error, "
                       "3 inconclusive (nothing ran or nothing was compared; the reason is printed), 130 interrupted")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="{fuzz,replay,ops,explain}")
    f = sub.add_parser("fuzz", help="random graphs, shapes, values and seeds through every oracle; HTML reports",
                       description="A fuzzing campaign: random cases through every applicable oracle; every "
                                   "discrepancy is shrunk, deduplicated and written as an HTML report at once.")
    f.add_argument("--engine", default="reference", metavar="NAME|module:attr",
                   help="engine under test: reference (default), torch-cpu, torch-cuda, or your Engine "
                        "as 'package.module:attr' (an Engine instance or a factory)")
    f.add_argument("--ops", default=None, metavar="a,b,...",
                   help="comma-separated op names (see `gradspec ops`), or user ops as 'module:attr'; "
                        "default: every op "
                        "the engine supports")
    f.add_argument("--oracles", default=None, metavar="a,b,...",
                   help="oracles to compare (default: every available one; the engine under test is always added)")
    g = f.add_mutually_exclusive_group()
    g.add_argument("--max-examples", type=_positive_int, default=None, metavar="N",
                   help="number of generated cases, all workers together (default 200)")
    g.add_argument("--seconds", type=_positive_float, default=None, metavar="S", help="time budget in seconds")
    f.add_argument("--workers", type=_positive_int, default=1, metavar="K",
                   help="worker processes (pytest-xdist); each runs Hypothesis with its own seed "
                        "(default 1: this process)")
    f.add_argument("--tx", action="append", default=None, metavar="SPEC",
                   help="pytest-xdist execution spec (repeatable), e.g. '4*ssh=host//python=python3', to spread the "
                        "shards over machines; each needs gradspec (and your engine) installed and the report dir "
                        "at the same path on shared storage (the shards read the campaign and write reports there)")
    f.add_argument("--seed", type=_seed, default=None,
                   help="seed of the campaign (default: random, printed and recorded)")
    f.add_argument("--report-dir", default="reports", metavar="DIR", help="where reports go (default: reports/)")
    f.add_argument("--database", action="append", default=None, metavar="DIR|redis://HOST:PORT/DB",
                   help="Hypothesis example database (default DIR/.hypothesis): a directory, or a Redis server shared "
                        "between machines (needs gradspec[redis]); prefix 'ro:' for read-only; repeat to combine "
                        "(saved failures are read from all, written to the writable ones)")
    f.add_argument("--case-timeout", type=_positive_float, default=60.0, metavar="S",
                   help="seconds each oracle's own call may take on one case (imports and a warm-up run before "
                        "the first timed case); the engine under test taking longer is a 'timeout' discrepancy, a "
                        "witness taking longer is skipped for that case (default 60)")
    f.add_argument("--dtype", default="any", choices=["float64", "float32", "mixed", "any"],
                   help="precision of the generated graphs: float32 and float64 leaves together ('mixed', promoted "
                        "where an op mixes them, as torch does) or 'any' (default: float64 60%%, float32 20%%, mixed "
                        "20%%)")
    f.add_argument("--rtol", type=_nonneg_float, default=None, metavar="R",
                   help="the accuracy your user ops claim (an iterative solver, a damped rule): comparisons involving "
                        "their rules allow the larger of gradspec's tolerance and ATOL + R x scale (recorded in each "
                        "case.json, so replay uses it)")
    f.add_argument("--atol", type=_nonneg_float, default=None, metavar="A", help="absolute part of --rtol's claim")
    f.add_argument("--shrink-seconds", type=_positive_float, default=60.0, metavar="S",
                   help="time spent shrinking one discrepancy before it is reported as is (default 60)")
    f.add_argument("--junitxml", default=None, metavar="FILE",
                   help="also write JUnit XML (one test case per finding, oracle pair, op and backward() rule) for CI")
    f.add_argument("--summary-md", default=None, metavar="FILE",
                   help="also write a Markdown summary (counts, each finding's cause, links to the reports) for a "
                        "CI job summary page")
    f.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    _data_flags(f)
    _isolate_flag(f)
    r = sub.add_parser("replay", help="re-run a saved case.json with every oracle; exit 1 while it still disagrees")
    r.add_argument("case", help="path to a case.json written by gradspec (a report folder's case.json)")
    r.add_argument("--engine", default=None, metavar="NAME|module:attr",
                   help="engine to check (default: the one recorded in the case)")
    r.add_argument("--oracles", default=None, metavar="a,b,...",
                   help="oracles to compare (default: every available one)")
    r.add_argument("--case-timeout", type=_positive_float, default=60.0, metavar="S",
                   help="per-case timeout (default 60)")
    r.add_argument("--json", action="store_true", help="machine-readable verdict")
    _data_flags(r)
    _isolate_flag(r)
    sub.add_parser("explain", add_help=False,
                   help="print J, the seed, J^T·seed and each element's contributions for an expression or a "
                        "case file (gradspec explain \"mm(x, a)\" --x ones:2,3 --a ones:3,4 --seed ...)")
    o = sub.add_parser("ops", help="list the op table: name, signature, domain, oracles that apply")
    o.add_argument("--json", action="store_true", help="machine-readable output")
    return p


def _allowed(args) -> list[str]:
    """Modules the command line allows a case file to import: --allow-import, --engine, --ops, --oracles."""
    named = [args.engine or ""] + (_split(getattr(args, "ops", None)) or []) + (_split(getattr(args, "oracles", None)) or [])
    return list(args.allow_import) + [n for n in named if ":" in n]


def main(argv=None) -> int:
    from ._private.imports import cwd_importable

    raw = list(sys.argv[1:] if argv is None else argv)
    _safe_streams()  # an ASCII-only stdout (a C locale, PYTHONIOENCODING=ascii): escapes, never a crash (M4)
    cwd_importable()  # like `python -m`: modules in the current directory import (--engine mymod:engine)
    from ._private import interrupts

    interrupts.reset()
    try:
        if raw[:1] == ["explain"]:  # its inputs are options named by the expression (--x SPEC): parsed on their own
            return _explain(raw[1:])
        args = _parser().parse_args(argv)
        args.argv = raw
        if args.cmd == "ops":
            return _ops(args)
        from ._private import imports, isolate, limits

        # SIGTERM / SIGHUP (a cancelled CI job, docker stop, timeout(1)) stop the run as Ctrl-C does (chaos H2)
        with interrupts.graceful(), imports.allowing(_allowed(args)), limits.limiting(args.max_elements), \
                isolate.enabling(args.isolate):
            return _replay(args) if args.cmd == "replay" else _fuzz(args)
    except _UsageError as e:
        return _err(str(e))
    except KeyboardInterrupt:
        print(f"\ngradspec: interrupted{_by_signal()}", file=sys.stderr)
        return interrupts.exit_code()
    except BrokenPipeError:  # `gradspec ops | head`
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_OK
    except Exception as e:  # never a bare traceback; GRADSPEC_DEBUG=1 shows it
        if os.environ.get("GRADSPEC_DEBUG"):
            raise
        return _err(f"internal error: {type(e).__name__}: {e} (set GRADSPEC_DEBUG=1 for the traceback)")


def _by_signal() -> str:
    """" (SIGTERM)" after "interrupted" when a signal other than Ctrl-C's did it."""
    from ._private import interrupts

    got = interrupts.received()
    return "" if got is None or got == signal.SIGINT else f" ({interrupts.name(got)})"


# ---------------------------------------------------------------------------------------------
# gradspec replay
# ---------------------------------------------------------------------------------------------


def _replay(args) -> int:
    from . import caseio, fuzz
    from ._private import interrupts

    case = _load_case(args.case)
    try:
        engine = caseio.engine_for(case, args.engine, source=args.case)
    except caseio.CaseError as e:
        raise _UsageError(f"cannot replay with engine {case.engine!r}: {e}") from None
    cfg = fuzz.Config(engine=engine, oracles=_split(args.oracles),
                      report_dir=os.path.dirname(os.path.abspath(args.case)),
                      case_timeout=args.case_timeout, seed=0)
    try:
        oracles, _resolved_ops, _eng = fuzz.resolve(cfg)
    except ValueError as e:
        raise _UsageError(f"cannot replay with engine {engine!r}: {e}") from None
    missing = [o for o in case.ops if not _supports(_eng, o)]
    if missing:
        raise _UsageError(f"engine {engine!r} does not support op(s) {', '.join(sorted(set(missing)))} of this case")
    case.engine = engine
    if "scenario_steps" in case.meta:  # a §5 rule finding: its calls must be valid before anything runs
        from .rules.scenario import Scenario

        try:
            Scenario.from_rule_case(case)
        except ValueError as e:
            raise _UsageError(f"{args.case}: this case's backward() calls cannot be replayed: {e}") from None
    if hasattr(os, "fork") and not os.environ.get("GRADSPEC_REPLAY_IN_PROCESS"):
        # The check runs in a child process: a case that crashed an engine (a "crash" report)
        # must be able to crash it again without taking replay's answer with it.
        sys.stdout.flush()
        sys.stderr.flush()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            _replay_child(args, case, engine, oracles, parent)
        bound = _replay_bound(args.case_timeout, len(oracles))
        idle = _replay_idle(args.case_timeout)
        status, cut = wait_child(pid, bound, idle)
        if interrupts.received() is not None:  # (M7: not "internal error", and never "still crashes")
            print(f"gradspec: interrupted{_by_signal()}", file=sys.stderr)
            return interrupts.exit_code()
        if cut == BLOCKED:  # a wait the alarm cannot cut (tryout11 #1): not the engine's finding, not a verdict
            print(f"inconclusive: the check of this case was blocked -- its process used no CPU for {idle:g} s, in a "
                  f"wait in C code that the per-case timeout ({args.case_timeout:g} s) cannot cut (a deadlock: a lock "
                  f"never released, or a thread pool copied by the fork, as OpenMP's) -- and was killed; nothing "
                  f"was checked.  Check it in this process, without the fork: GRADSPEC_REPLAY_IN_PROCESS=1 "
                  f"gradspec replay {' '.join(sys.argv[2:]) or args.case} (exit {EXIT_INCONCLUSIVE})")
            return EXIT_INCONCLUSIVE
        if cut == LATE:  # the watchdog killed it (review H5b)
            print(f"the check of this case did not end within {bound:g} s (every part of it is bounded by "
                  f"--case-timeout {args.case_timeout:g}: a hang the alarm signal cannot cut, in C code? --isolate cuts "
                  f"those): engine {engine!r} still hangs on it (exit 1)")
            return EXIT_FOUND
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = f"signal {sig}"
            print(f"the process checking this case died ({name}): engine {engine!r} still crashes on it (exit 1)")
            return EXIT_FOUND
        return os.WEXITSTATUS(status)
    return _replay_check(args, case, engine, oracles)


def _replay_bound(case_timeout: float, oracles: int) -> float:
    """Wall seconds the replay child may take in all: its warm-up, the check, the diagnosis, the listing and a
    torch Function's own checks are each bounded by the per-case timeout; this is the net under them."""
    from ._private.case_budget import check_budget, diagnosis_budget

    return 3 * check_budget(case_timeout, oracles) + diagnosis_budget(case_timeout) + 4 * case_timeout


def _replay_idle(case_timeout: float) -> float:
    """Seconds without any CPU after which the replay child is taken to be blocked: past the per-case timeout
    (a wait in Python, a sleep, is cut by its alarm first), and never under 10 s (a child starved of CPU by a
    loaded machine still gets some in that time)."""
    return max(10.0, float(case_timeout) + 5.0)


def _replay_child(args, case, engine, oracles, parent: int) -> None:  # pragma: no cover - the forked child
    from ._private import interrupts
    from ._private.forked import forked_child

    forked_child(parent)  # (it dies with replay: its own process group is missed by `kill -9 -- -PGID`, F4)
    interrupts.reset()  # (the parent's signals are not this process's)
    try:  # a group of its own: the parent kills it with whatever it forked (--isolate's children), leaving no orphan
        os.setpgid(0, 0)
    except OSError:
        pass
    rc = EXIT_USAGE
    try:
        rc = _replay_check(args, case, engine, oracles)
    except KeyboardInterrupt:
        rc = EXIT_INTERRUPTED  # the parent says so, with the signal's exit code
    except BaseException as e:  # noqa: BLE001 - the child must always exit here
        print(f"gradspec: error: internal error: {type(e).__name__}: {e}", file=sys.stderr)
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(rc)


def _replay_check(args, case, engine, oracles) -> int:
    from ._private.case_budget import case_timeout

    with case_timeout(args.case_timeout):  # the diagnosis and the case's listing bound themselves by it (H5b)
        return _replay_checked(args, case, engine, oracles)


def _replay_checked(args, case, engine, oracles) -> int:
    from . import fuzz
    from .guard import warm_up

    warm_up(case, oracles, cap=args.case_timeout, isolate=args.isolate)
    verdict = fuzz.guarded_check(case, oracles, args.case_timeout, under_test=engine, isolate=args.isolate)
    rule = _replay_rule(case, engine, args.case_timeout) if "scenario_steps" in case.meta else None
    status = "disagree" if rule is not None and rule["cause"] is not None else verdict.status
    fn_found, fn_notes = _replay_fn_checks(case)
    if fn_found:
        status = "disagree"
    if args.json:
        print(json.dumps({
            "ok": verdict.ok,
            "status": verdict.status,
            "reason": verdict.reason,
            "engine": engine,
            "pairs": [{"oracles": list(c.oracles), "agreed": c.agreed, "max_ratio": c.max_ratio}
                      for c in verdict.comparisons],
            "discrepancies": [d.to_json() for d in verdict.discrepancies],
            "skipped": verdict.skipped,
            **({} if rule is None else {"rule": {"name": rule["name"], "cause": rule["cause"] and rule["cause"].to_json()}}),
            **({"torch_function_checks": [_fn_finding_text(d) for d in fn_found]} if fn_found else {}),
        }, indent=1, default=str))
    else:
        _replay_text(args, case, engine, verdict, rule, fn_found, fn_notes)
        if status == "disagree":
            print("still disagrees (exit 1)")
        elif status == "inconclusive":
            print("inconclusive (exit 3): nothing was compared")
    return {"agree": EXIT_OK, "disagree": EXIT_FOUND}.get(status, EXIT_INCONCLUSIVE)


def _replay_text(args, case, engine, verdict, rule, fn_found, fn_notes) -> None:
    """replay's human output.  It quotes the case file (names, an op's error quoting a param, the rule finding's
    calls): every text through inert.printable, its own line breaks kept (the case file is data: redteam #6, #7)."""
    from ._private.inert import printable
    from .guard import case_listing

    def say(text="") -> None:
        print(printable(text, keep="\n"))

    say(f"case {printable(args.case)} (engine {printable(engine)}):")
    try:
        say(case_listing(case))  # (its forward cut by the per-case timeout: it may be what hangs)
    except Exception as e:
        say(f"  (cannot evaluate the case: {type(e).__name__}: {printable(e)})")
    say(verdict.summary())
    for cause in _replay_causes(verdict, engine, args.case_timeout):
        say(f"cause: {printable(cause)}")
    if rule is not None:
        say(f"\nthe calls of the backward() rule finding ({printable(rule['name'] or 'rule')}), run again:\n"
            f"{rule['code']}")
        if rule["cause"] is not None:
            say(f"the engine still breaks the rule: {rule['cause'].summary} [{rule['cause'].id}]")
        else:
            say("the engine now follows torch's backward() rules on these calls")
    for d in fn_found:
        say(f"\n{_fn_finding_text(d)}")
    for text in fn_notes:
        say(f"note: {text}")


def _replay_fn_checks(case) -> tuple[list, list]:
    """A torch Function's own checks beside gs.check (backward twice, layouts, double backward)."""
    if not case.meta.get("torch_functions"):
        return [], []
    from ._private.case_budget import check_budget, current
    from .guard import Hung, bounded
    from .verify.torch_function import replay_checks

    timeout = current()
    try:
        return bounded(lambda: replay_checks(case), "the torch Function's own checks (backward twice, layouts, double "
                       "backward)", check_budget(timeout, 4) if timeout else None)
    except Hung as e:
        return [], [f"{e}: not run"]


def _fn_finding_text(d) -> str:
    cause = f"\ncause: {d.cause.summary} [{d.cause.id}]" if getattr(d, "cause", None) is not None else ""
    return f"{d.check_name or d.kind} check: {d.message}{cause}"


def _replay_causes(verdict, engine, timeout) -> list:
    """The distinct causes (CONTRACT §8) of a replayed disagreement, diagnosed as the run that found it
    did: the engine-level cause for a user engine's value finding, else the node localisation."""
    if verdict.status != "disagree":
        return []
    from . import fuzz
    from .diagnose import explain

    out = []
    for d in verdict.discrepancies:
        if engine not in fuzz.BUILTIN_ENGINES and d.kind == "value":
            from .rules import explain_engine_finding

            explain_engine_finding(engine, d, timeout)
        c = d.cause if d.cause is not None else explain(d)
        if c is not None and str(c) not in map(str, out):
            out.append(c)
    return out


def _replay_rule(case, engine, timeout) -> dict:
    """A §5 rule finding's case: its calls (not only its values) run again on the engine."""
    from .rules import replay_rule_case

    try:
        cause, code = replay_rule_case(engine, case, strict=bool(case.meta.get("strict", True)), timeout=timeout)
    except ValueError as e:
        raise _UsageError(f"this case's backward() calls cannot be replayed: {e}") from None
    return {"name": str(case.meta.get("rule", "")), "cause": cause, "code": code}


def _supports(engine, op: str) -> bool:
    try:
        return bool(engine.supports(op))
    except Exception:
        return False


# ---------------------------------------------------------------------------------------------
# gradspec fuzz
# ---------------------------------------------------------------------------------------------


def _check_report_dir(path: str, default_db: bool = False) -> None:
    from ._private.safefs import UnsafePath, gradspec_dir
    from .fuzz import STATE

    if os.path.exists(path) and not os.path.isdir(path):
        raise _UsageError(f"--report-dir {path!r} exists and is not a directory")
    try:
        os.makedirs(path, exist_ok=True)
        # A report dir from somebody else may hold a .gradspec symlink: the clean-up must not reach through it.
        gradspec_dir(path, STATE, "runs")
        if default_db:  # (Hypothesis writes and deletes entries in it)
            gradspec_dir(path, ".hypothesis")
        fd, probe = tempfile.mkstemp(dir=path, prefix=".write-test-")  # a new file: never one planted there
        os.close(fd)
        os.unlink(probe)
    except UnsafePath as e:
        raise _UsageError(f"report dir {path!r}: {e}") from None
    except OSError as e:
        raise _UsageError(f"report dir {path!r} is not writable: {e.strerror or e}") from None


def _fuzz(args) -> int:
    from ._private.safefs import release_lock

    cfg, oracles, ops, engine = _fuzz_config(args)
    fd = _lock_report_dir(cfg.report_dir)
    try:
        return _fuzz_campaign(args, cfg, oracles, ops, engine)
    finally:
        release_lock(fd)  # (the lock goes with it; in a process that runs more than one campaign, as tests do)


def _fuzz_campaign(args, cfg, oracles, ops, engine) -> int:
    from . import fuzz
    from .fuzz import liveness

    last = liveness.last_run(cfg.report_dir)  # before this run replaces its summary
    try:
        cfg.open_database(check=True)  # a wrong path or an unreachable server is a usage error now, not mid-run
    except ValueError as e:
        raise _UsageError(str(e)) from None
    err = sys.stderr
    if last is not None:
        print(f"gradspec fuzz: {last['message']}", file=err)
    from ._private.database import unwritable

    for where in unwritable(cfg.database):  # (said once, here: every save into it would fail silently)
        print(f"gradspec fuzz: --database {where} is not writable: failures saved there are replayed, but what this "
              "run finds is not saved there (give ro:DIR to say so, or a folder you can write)", file=err)
    budget = cfg.describe()["budget"]
    print(f"gradspec fuzz: engine {cfg.engine}, {len(ops)} ops, oracles {', '.join(o.name for o in oracles)}; "
          f"{budget}, {cfg.workers} worker{'s' if cfg.workers > 1 else ''}, seed {cfg.seed}; "
          f"reports in {cfg.report_dir}",
          file=err)
    stats = fuzz.Stats(shards=cfg.workers)
    previous = _fuzz_earlier_runs(cfg, oracles, stats, err)
    hooks = _FuzzHooks(cfg, stats, previous, ops, last, None if args.quiet else fuzz.progress_printer(err, total_ops=len(ops)))
    hooks.worker_ops = args.worker_ops
    try:
        run, rule_status = _fuzz_run(cfg, oracles, ops, engine, hooks, err)
    except KeyboardInterrupt:
        run, rule_status = interrupted_run(hooks, cfg)
    return _fuzz_finish(args, cfg, run, stats, previous, ops, last, rule_status)


def _lock_report_dir(path: str) -> int:
    """One campaign per report dir at a time: a second one would replace the first's summary and index and
    clean up its state mid-run.  Refused naming the first (exit 2); the descriptor that holds the lock."""
    from ._private.safefs import InUse, report_dir_lock

    try:
        return report_dir_lock(path)
    except InUse as e:
        raise _UsageError(f"report dir {path!r} is in use by another gradspec fuzz run ({e.holder}): wait for it to "
                          "finish, or give this run another --report-dir") from None
    except OSError as e:
        raise _UsageError(f"report dir {path!r}: cannot lock it for this run: {e}") from None


def _fuzz_config(args):
    """The campaign's Config, oracles, ops and engine from the command line; usage errors say what is wrong."""
    from . import fuzz

    if args.tx and args.workers == 1:  # one shard per xdist node: "3*ssh=host" is three
        args.workers = sum(int(t.split("*", 1)[0]) if "*" in t and t.split("*", 1)[0].isdigit() else 1
                           for t in args.tx)
    _check_lists(args)
    _check_output_paths(args)
    if args.workers > _max_local_workers() and not args.tx:  # (--workers 10000 forked 10000 processes)
        raise _UsageError(f"--workers {args.workers}: at most {_max_local_workers()} worker processes on this "
                          f"machine ({WORKERS_PER_CPU} per CPU it may use); to run more shards, spread them over "
                          "machines with --tx")
    if args.workers > 1:
        try:
            import xdist  # noqa: F401
        except ImportError:
            raise _UsageError("--workers > 1 needs pytest-xdist (pip install pytest-xdist)") from None
    try:
        cfg = fuzz.Config(engine=args.engine, ops=_split(args.ops), oracles=_split(args.oracles),
                          max_examples=args.max_examples, seconds=args.seconds, seed=args.seed,
                          report_dir=args.report_dir, database=args.database, case_timeout=args.case_timeout,
                          shrink_seconds=args.shrink_seconds, workers=args.workers, tx=args.tx,
                          dtype=args.dtype, rtol=args.rtol, atol=args.atol, argv=["gradspec"] + args.argv, isolate=args.isolate)
    except ValueError as e:  # e.g. an empty --database
        raise _UsageError(str(e)) from None
    try:
        oracles, ops, engine = fuzz.resolve(cfg)
    except ValueError as e:
        raise _UsageError(str(e)) from None
    args.worker_ops = _worker_ops(cfg.ops, ops)
    cfg.ops = cfg.ops and ops  # user ops given by import path are recorded by name
    _check_report_dir(cfg.report_dir, default_db=not cfg.database)
    if cfg.workers > 1 and not cfg.tx:  # (remote workers check theirs, and say so in the chunk's failure)
        from ._private.safefs import UnsafePath
        from .fuzz.workers import worker_local_root

        try:
            worker_local_root(cfg.run_id)  # the shared temp dir's gradspec-worker-<uid> must be ours alone
        except UnsafePath as e:
            raise _UsageError(f"--workers: {e}") from None
    return cfg, oracles, ops, engine


def _worker_ops(given, names) -> list | None:
    """The op list xdist workers resolve: a user op given as ``module:attr`` stays an import path, since a
    worker's op table has only what it imported itself (chaos H4: a name alone was "no op named ...")."""
    from ._private.imports import import_object

    if not given:
        return None
    paths = {import_object(o).name: o for o in given if ":" in o}  # (imported already: resolve checked them)
    return [paths.get(n, n) for n in names]


def _fuzz_earlier_runs(cfg, oracles, stats, err) -> list:
    """Report the case a dead process of an earlier run left behind, and replay earlier runs' reports."""
    from . import fuzz, report
    from ._private.safefs import gradspec_dir

    try:
        gradspec_dir(cfg.report_dir, fuzz.STATE, "runs", cfg.run_id)
        # A process of an earlier run that died mid-case left its case behind: report it now.
        crashes = fuzz.report_crashes(cfg, stats, state_root=os.path.join(cfg.report_dir, fuzz.STATE),
                                      write=report.campaign_writer(cfg))
        fuzz.cleanup_stale_runs(cfg.report_dir, keep=cfg.run_id)
        previous = fuzz.replay_previous(cfg, oracles, stats)
    except (fuzz.ReportDirError, OSError) as e:
        raise _UsageError(f"report dir {cfg.report_dir!r}: {e}") from None
    for cr in crashes:
        for p in previous:
            if p["id"] == cr["id"]:
                p["status"] = "a process died on this case (no summary was written)"
        print(f"gradspec fuzz: a process of an earlier run (pid {cr['pid']}) died while checking a case: "
              f"{os.path.join(cfg.report_dir, cr['id'], 'index.html')}", file=err)
    if previous:
        still = sum(p["status"] == "still present" for p in previous)
        blocked = sum(_module_not_allowed(p) for p in previous)
        print(f"gradspec fuzz: {len(previous)} report(s) from earlier runs in {cfg.report_dir}: {still} still present"
              + (f", {blocked} not re-checked (see the end of the run)" if blocked else ""), file=err)
    return previous


class _FuzzHooks:
    """What a running campaign calls: a finding is written and announced at once, and the run's index is
    rewritten with it (a run that dies later still shows what it found); progress goes to the printer."""

    def __init__(self, cfg, stats, previous, ops, last, printer) -> None:
        self.cfg, self.stats, self.previous, self.ops, self.last, self.printer = cfg, stats, previous, ops, last, printer
        self.campaign = None
        self.run = None  # the campaign's stats once it returned
        self.err = sys.stderr  # (the stream of the run's start, as its other messages)

    def rewrite_index(self, current) -> None:
        from . import fuzz, report
        from .fuzz import liveness

        cfg = self.cfg
        try:
            merged = fuzz.Stats.from_json(current.to_json())
            merged.merge(fuzz.Stats.from_json({"found": self.stats.found}))
            s = liveness.mark_running(fuzz.summary_json(cfg, merged, self.previous, self.ops))
            s["last_run"] = self.last
            fuzz.write_summary(cfg, s)
            report.write_run_report(cfg.report_dir, s)
        except OSError:
            pass  # the final write reports the problem

    def on_found(self, d, verdict, info) -> None:
        from . import report
        from .report_cause import shorten, strip_tolerance

        err, cfg = self.err, self.cfg
        report.campaign_writer(cfg)(d, verdict, info)
        rid = report.discrepancy_id(d.signature)
        if self.printer is not None and getattr(self.printer, "tty", False):
            err.write("\n")
        print(f"gradspec fuzz: discrepancy {rid}: {d.kind} ({' vs '.join(d.oracles)}), ops "
              f"{', '.join(sorted({n.op for n in d.case.nodes}))}: {shorten(strip_tolerance(d.message), 160)}", file=err)
        if d.cause is not None:
            print(f"  cause: {shorten(str(d.cause), 300)}", file=err)
        print(f"  report: {os.path.join(cfg.report_dir, rid, 'index.html')}", file=err)
        if self.campaign is not None:
            self.rewrite_index(self.campaign.stats)

    def progress(self, obj) -> None:
        self.campaign = obj
        if self.printer is not None:
            self.printer(obj)


def _fuzz_run(cfg, oracles, ops, engine, hooks: _FuzzHooks, err):
    """Run the campaign (here, or on xdist workers) and, with --engine, the §5 rules; (run stats, rule status)."""
    from . import fuzz
    from ._private.memory import freeze_heap

    hooks.rewrite_index(fuzz.Stats(shards=cfg.workers))  # "running" from the start: a run that dies says so
    unusable = _unusable_oracles(oracles)
    if unusable is not None:
        # Availability does not change from case to case: running the budget would only count cases
        # that compare nothing. The run is inconclusive at once, with the reason (CONTRACT §6, exit 3).
        run = fuzz.Stats(shards=cfg.workers)
        run.stop_reason, run.errors = "no-oracles", [unusable]
        return run, {"*": {"status": "skipped", "reason": unusable}}
    if cfg.workers > 1 or cfg.tx:
        # Workers share nothing with this process but the xdist channel: findings (and the cases
        # dead workers were on) come back here and are written by on_found, in this process only.
        names, cfg.ops = cfg.ops, getattr(hooks, "worker_ops", None) or cfg.ops
        try:
            run = fuzz.run_distributed(cfg, progress=hooks.printer, on_found=hooks.on_found, oracles=oracles)
        finally:
            cfg.ops = names  # (the summary names the ops)
    else:
        freeze_heap()  # this process is gradspec's own: see _private.memory.freeze_heap
        run = fuzz._Campaign(cfg, 0, progress=hooks.progress, on_found=hooks.on_found, oracles=oracles,
                             found=hooks.stats.found).run()
    hooks.run = run
    if hooks.printer is not None and getattr(hooks.printer, "tty", False):
        hooks.printer(run, final=True)
    return run, _fuzz_rules(cfg, engine, run, ops, err)  # with --engine, every §5 rule too (CONTRACT §6)


def _unusable_oracles(oracles) -> str | None:
    """Why no case of this campaign could compare anything (fewer than two of the chosen oracles can
    run on this machine), or None."""
    down = {}
    for o in oracles:
        try:
            ok, why = o.available()
        except Exception as e:  # noqa: BLE001 - an oracle that cannot even say is not available
            ok, why = False, f"{type(e).__name__}: {e}"
        if not ok:
            down[o.name] = why
    if len(oracles) - len(down) >= 2:
        return None
    up = [o.name for o in oracles if o.name not in down]
    return (f"only {', '.join(up) or 'no oracle'} of the chosen oracles can run here, so no case could compare "
            f"two gradients: " + "; ".join(f"{n}: {w}" for n, w in down.items()) +
            " (choose other --oracles, or run where they are available)")


def _fuzz_rules(cfg, engine, run, ops, err) -> dict:
    """The §5 rule searches (gradspec.fuzz.rules), each finding announced like the campaign's."""
    from . import report
    from ._private.skips import word_cut
    from .fuzz.rules import run_rules

    if run.interrupted or run.stop_reason == "report-dir":
        return {"*": {"status": "skipped", "reason": f"the campaign stopped early ({run.stop_reason})"}}

    def announce(rid, d):
        print(f"gradspec fuzz: discrepancy {rid}: backward() rule '{d.rule}': {word_cut(d.cause.summary, 160)} "
              f"[{d.cause.id}]", file=err)
        print(f"  report: {os.path.join(cfg.report_dir, rid, 'index.html')}", file=err)

    try:
        return run_rules(cfg, engine, run, write=report.campaign_writer(cfg), announce=announce, ops=ops)
    except KeyboardInterrupt:
        run.interrupted = True
        return {"*": {"status": "skipped", "reason": "interrupted"}}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
