"""Ctrl-C before the command line's own handlers exist: while ``import gradspec`` runs (numpy, Hypothesis, the op
table: about a second), before ``gradspec.cli.main`` is even defined.

:func:`quiet_ctrl_c` runs when this module is imported, first thing in ``gradspec/__init__``; in the ``gradspec`` command (the console script,
``python -m gradspec.cli``) and only there, an uncaught KeyboardInterrupt ends the process as ``main``'s own
handler does: "gradspec: interrupted" and exit 130, never a traceback of the import machinery.  A program that
imports gradspec is left alone: its Ctrl-C is its own.
"""

from __future__ import annotations

import os
import sys

__all__ = ["quiet_ctrl_c", "is_the_command"]


def is_the_command() -> bool:
    """Whether this process is the ``gradspec`` command: the console script (``argv[0]`` ends in ``gradspec``)
    or ``python -m gradspec.cli`` (``argv[0]`` is still ``-m`` while the package imports: ``sys.orig_argv``)."""
    if os.path.basename(sys.argv[0] if sys.argv else "") == "gradspec":
        return True
    argv = list(getattr(sys, "orig_argv", []))
    return any(a == "-m" and argv[k + 1:k + 2] in (["gradspec.cli"], ["gradspec"]) for k, a in enumerate(argv))


def quiet_ctrl_c() -> None:
    """In the gradspec command: an uncaught KeyboardInterrupt prints one line and exits 130 (see the module)."""
    if not is_the_command() or getattr(sys.excepthook, "_gradspec", False):
        return
    previous = sys.excepthook

    def hook(kind, value, tb):
        if issubclass(kind, KeyboardInterrupt):
            try:
                sys.stderr.write("\ngradspec: interrupted\n")
                sys.stderr.flush()
            finally:
                os._exit(130)  # (the code main() returns for Ctrl-C; no traceback, no re-raised SIGINT)
        previous(kind, value, tb)

    hook._gradspec = True
    sys.excepthook = hook


quiet_ctrl_c()  # on import: gradspec/__init__ imports this module before anything else
