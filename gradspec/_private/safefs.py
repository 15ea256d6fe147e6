"""File-system access for folders somebody else may have made: report dirs, state dirs, worker folders.

A report folder, its ``.gradspec`` state and a worker's temp folder can come from a tarball, a git
clone or another local user.  They are data: a symbolic link or a named pipe in them must never make
gradspec read, write, walk or delete anything outside them, nor hang.  Every such access goes
through here:

* :func:`real_dir` — a folder that is a folder (``lstat``: never a symlink to one);
* :func:`gradspec_dir` — a folder gradspec keeps its own files in (``.gradspec``, ``.gradspec/runs/<id>``),
  created when missing, refused with :class:`UnsafePath` when a part of it is a symlink or not a folder;
* :func:`read_regular` — the text of a regular file, never following a final symlink (``O_NOFOLLOW``)
  and never blocking on a FIFO or a device (``O_NONBLOCK`` + ``S_ISREG``), with a size cap;
* :func:`open_private` — a file gradspec writes (in-flight marker, fault log) opened without following a
  symlink planted at its name;
* :func:`private_dir` — a per-user folder under a shared temp dir: ours, mode 0700, not a symlink.

Example::

    >>> import os, tempfile
    >>> from gradspec._private.safefs import UnsafePath, gradspec_dir, read_regular
    >>> top = tempfile.mkdtemp()
    >>> state = gradspec_dir(top, ".gradspec", "runs", "r1")
    >>> os.path.relpath(state, top)
    '.gradspec/runs/r1'
    >>> os.symlink(top, os.path.join(top, "elsewhere"))
    >>> try:
    ...     gradspec_dir(top, "elsewhere")
    ... except UnsafePath as e:
    ...     print("refused:", "symbolic link" in str(e))
    refused: True
    >>> os.mkfifo(os.path.join(top, "pipe.json"))
    >>> try:
    ...     read_regular(os.path.join(top, "pipe.json"))
    ... except UnsafePath as e:
    ...     print("refused:", "not a regular file" in str(e))
    refused: True
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat

__all__ = ["UnsafePath", "InUse", "real_dir", "gradspec_dir", "read_regular", "open_private", "private_dir",
           "report_dir_lock", "release_lock", "close_locks_in_child"]


class UnsafePath(OSError):
    """A path gradspec will not use as it is (a symlink, a FIFO, a folder of another user...).

    An ``OSError``: every caller that already copes with an unreadable or unwritable file copes with
    this too; ``str()`` names the path and what to do.
    """

    def __init__(self, path: str, what: str, fix: str) -> None:
        super().__init__(errno.EPERM, f"{path} {what}; {fix}")
        self.path = path

    def __str__(self) -> str:
        return self.strerror


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "is a symbolic link"
    if stat.S_ISFIFO(mode):
        return "is a named pipe (FIFO)"
    if stat.S_ISDIR(mode):
        return "is a folder"
    return "is not a regular file"


def real_dir(path: str) -> bool:
    """Whether ``path`` is a folder itself, not a symlink to one (False when missing)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def gradspec_dir(top: str, *parts: str) -> str:
    """``top/parts...``, each part a real folder (created when missing); ``top`` itself is the user's choice.

    Raises :class:`UnsafePath` naming the first part that is a symlink or not a folder: gradspec's own
    bookkeeping lives only in folders it can delete without reaching outside ``top``.
    """
    os.makedirs(top, exist_ok=True)
    path = top
    for part in parts:
        path = os.path.join(path, part)
        try:
            os.mkdir(path)
            continue
        except FileExistsError:
            pass
        mode = os.lstat(path).st_mode
        if not stat.S_ISDIR(mode):
            raise UnsafePath(path, _kind(mode) + ", where gradspec keeps its own files",
                             "gradspec never follows it (it could reach folders outside the report dir): remove it "
                             "(its target is not touched) or choose another report dir")
    return path


def read_regular(path: str, limit: int | None = None, *, follow: bool = False, encoding: str | None = "utf-8"):
    """The text of the regular file at ``path``.

    A final symlink is refused unless ``follow`` (a file the user named on the command line), and a FIFO,
    socket or device is refused without blocking.  ``limit``: more bytes than that is :class:`UnsafePath`
    too (a record or state file is small; a huge one is not gradspec's).  Decoding errors are replaced;
    ``encoding=None`` gives the bytes.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow:
            raise UnsafePath(path, "is a symbolic link", "gradspec reads only the files in its own folders, "
                             "never a link out of them: remove the link") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePath(path, _kind(st.st_mode) + ": not a regular file",
                             "gradspec reads case and record files only (a pipe or device could block it forever)")
        if limit is not None and st.st_size > limit:
            raise UnsafePath(path, f"has {st.st_size:,} bytes, more than the {limit:,} such a file can hold",
                             "it is not a file gradspec wrote: remove it")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read() if limit is None else f.read(limit + 1)
    finally:
        os.close(fd)
    if limit is not None and len(raw) > limit:  # (grew while read)
        raise UnsafePath(path, f"has more than {limit:,} bytes", "it is not a file gradspec wrote: remove it")
    return raw if encoding is None else raw.decode(encoding, errors="replace")


def open_private(path: str, flags: int = os.O_RDWR | os.O_CREAT, mode: int = 0o644) -> int:
    """A descriptor on the regular file ``path`` that gradspec writes, never through a symlink at its name.

    ``O_NOFOLLOW`` is added to ``flags``; a non-regular file (FIFO...) is refused as :class:`UnsafePath`.
    """
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), mode)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePath(path, _kind(st.st_mode), "gradspec writes only regular files: remove it")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


class InUse(OSError):
    """The report dir is locked by another running campaign; ``holder`` is what its lock file says."""

    def __init__(self, path: str, holder: str) -> None:
        super().__init__(errno.EBUSY, f"{path} is in use by another gradspec run ({holder})")
        self.holder = holder


LOCK = "lock"  # in the report dir's .gradspec folder
_HELD: set = set()  # the lock descriptors this process opened (a forked child closes them: forked.forked_child)


def close_locks_in_child() -> None:
    """In a forked child: close the inherited lock descriptors, so that the lock goes with the process that took
    it (closing a copy never releases the flock the parent holds: the flock goes with the last descriptor)."""
    for fd in list(_HELD):
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD.clear()


def release_lock(fd: int) -> None:
    """Unlock: close the descriptor :func:`report_dir_lock` returned (and forget it: its number may be reused)."""
    _HELD.discard(fd)
    os.close(fd)


def _holder(top: str, fd: int) -> str:
    """What the lock file says about its holder, and whether that pid still runs (review F3: a child it forked
    that survived it, e.g. a fork of the engine's own, keeps the flock after the process that wrote this died)."""
    import socket

    from .inert import printable

    said = os.read(fd, 200).decode("utf-8", "replace").strip()
    if not said:
        return "a process that wrote nothing yet"
    parts = said.split()
    if len(parts) == 4 and parts[0] == "pid" and parts[1].isdigit() and parts[3] == socket.gethostname():
        try:
            os.kill(int(parts[1]), 0)
        except ProcessLookupError:
            return (f"{printable(said)}, which is no longer running: a process it forked still holds the lock; end "
                    f"it (fuser -v {printable(os.path.join(top, '.gradspec', LOCK))} names it)")
        except OSError:
            pass
    return printable(said)


def report_dir_lock(top: str) -> int:
    """Lock report dir ``top`` for this process: an open descriptor on ``top/.gradspec/lock`` holding an
    exclusive ``flock`` (keep it open for the run: closing it, or the process ending, releases the lock).  :class:`InUse` when another process holds
    it, naming that process (its pid and host, which it wrote into the file).

    ``flock``, not a pid file: the lock goes with its process however that ends (SIGKILL, out of memory), so a
    crashed run never blocks the next one, and a pid reused by an unrelated process is never mistaken for it.
    The file itself stays (removing it would race with a run taking the lock meanwhile).
    """
    import socket

    path = os.path.join(gradspec_dir(top, ".gradspec"), LOCK)
    fd = open_private(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            holder = _holder(top, fd)
        finally:
            os.close(fd)
        raise InUse(top, holder) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
    _HELD.add(fd)
    return fd


def private_dir(path: str) -> str:
    """``path`` as a folder only this user can enter (created 0700 when missing), in a shared temp dir.

    Another user who made it first could plant files in it or swap its content for symlinks: a folder that
    is a symlink, is not ours, or that others can write into is :class:`UnsafePath`.
    """
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(path, _kind(st.st_mode), "gradspec keeps worker state only in a private folder: remove it "
                         "or set GRADSPEC_WORKER_DIR to a folder of yours")
    if st.st_uid != os.getuid():
        raise UnsafePath(path, f"belongs to user id {st.st_uid}, not to you ({os.getuid()})",
                         "another user made it first: set GRADSPEC_WORKER_DIR to a folder of yours")
    if st.st_mode & 0o022:
        os.chmod(path, 0o700)  # ours: close it (e.g. made by an older gradspec, or umask 0)
    return path
