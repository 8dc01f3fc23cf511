"""Output files that never destroy anything.

:func:`atomic_write` writes a regular file atomically: into a hidden temporary sibling in the
same folder, renamed over the target (``os.replace``) only once the block succeeds, so an
interrupted run leaves the old file or nothing, never half a file. It never turns anything
that is not a regular file into one:

* a character or block device (``/dev/null``), a FIFO, a socket or a directory is refused;
* a symbolic link is **followed** when it points to a regular file: the file it points to is
  rewritten (atomically, in its own folder) and the link stays a link. A link to anything
  else, a dangling link or a loop of links is refused;
* an existing file keeps its permission bits (and, where the process may set them, its owner
  and group); a new file gets the mode a plain ``open(path, "w")`` would give it
  (``0o666`` less the umask, and the folder's default ACL where there is one): the temporary
  file is created with ``0o666`` and the kernel applies both.

Every error is an :class:`OutputError` (a :class:`~shardmeter.errors.ShardMeterError`, so the
CLI prints it as one line with exit code 2, and an :class:`OSError`, with ``errno`` and
``filename``) naming the path the caller gave, never the temporary file.

:func:`check_output` runs the same checks before a long computation (and refuses an output that
is one of its inputs), so a mistyped path fails at once rather than after the work is done.

Limits: a target that turns into a special file between the checks and the rename is still
replaced (POSIX has no portable rename-if-regular); a file with several hard links gets a new
inode under this name (its other names keep the old contents).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterable, Iterator
from typing import IO, Any

from shardmeter.errors import ShardMeterError

__all__ = ["atomic_write", "check_output", "resolve_output", "OutputError", "FILE"]

#: shtab's file-name completion for each shell (``shtab.FILE``, spelled here so that building a
#: command's parser imports neither shtab nor the command line): set as a file argument's
#: ``complete`` attribute by every room that adds a command (``shardmeter.cli.completion``).
FILE = {"bash": "_shtab_compgen_files", "zsh": "_files", "tcsh": "f"}

#: What a file that is not a regular one is, for messages.
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)


class OutputError(ShardMeterError, OSError):
    """An output file that cannot or must not be written: one line naming the user's path.

    Also an :class:`OSError` (``errno``, ``strerror``, ``filename`` = the user's path) for callers
    that catch those."""

    def __init__(self, message: str, *, path: str, err: int | None = None):
        OSError.__init__(self, err or 0, message, path)
        self.message = message

    def __str__(self) -> str:
        return self.message


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _name(path: str, label: str) -> str:
    return f"{label} {path}" if label else path


def _os_error(name: str, user: str, exc: OSError, what: str = "cannot write") -> OutputError:
    """``exc`` as an :class:`OutputError` naming ``user``'s path (``name``: it with its option)."""
    why = exc.strerror or str(exc)
    return OutputError(f"{name}: {what}: {why}", path=user, err=exc.errno)


def resolve_output(path: str | os.PathLike, *, label: str = "") -> str:
    """The regular file that writing ``path`` rewrites or creates (absolute; through a symlink,
    the file it points to); :class:`OutputError` for anything that must not be replaced.

    :param label: the option that named ``path`` (``"--csv"``), put before it in messages."""
    user = os.fspath(path)
    name = _name(user, label)
    head, tail = os.path.split(user)
    if tail in ("", ".", ".."):
        raise OutputError(f"{name}: names a folder, not a file", path=user, err=errno.EISDIR)
    try:
        lst: os.stat_result | None = os.lstat(user)
    except FileNotFoundError:
        lst = None
    except OSError as exc:  # a path component that is a file, a loop, too long, no search permission
        raise _os_error(name, user, exc) from None
    if lst is not None and stat.S_ISLNK(lst.st_mode):
        real = os.path.realpath(user)
        try:
            st = os.stat(user)
        except FileNotFoundError:
            raise OutputError(
                f"{name}: is a symlink to {real}, which does not exist; refusing to create a file through it",
                path=user,
                err=errno.ENOENT,
            ) from None
        except OSError as exc:
            raise _os_error(name, user, exc, "cannot follow the symlink") from None
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(
                f"{name}: is a symlink to {real}, {_kind(st.st_mode)}; refusing to write to it",
                path=user,
                err=errno.EINVAL,
            )
        return real
    if lst is not None and not stat.S_ISREG(lst.st_mode):
        raise OutputError(
            f"{name}: is {_kind(lst.st_mode)}; refusing to replace it with a regular file",
            path=user,
            err=errno.EISDIR if stat.S_ISDIR(lst.st_mode) else errno.EINVAL,
        )
    # the folder as the OS resolves it (``link/../x`` is not ``x`` when ``link`` is a symlink)
    return os.path.join(os.path.realpath(head or os.curdir), tail)


def _create_temp(target: str) -> tuple[int, str]:
    """A new hidden sibling of ``target``, created ``0o666`` (so the umask and a default ACL
    apply, as to any new file) and opened for writing."""
    folder, base = os.path.split(target)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = os.path.join(folder, f".{base[:200]}.{os.urandom(4).hex()}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary file name")


def _new_temp(target: str, name: str, user: str) -> tuple[int, str]:
    """:func:`_create_temp`, its errors naming the user's path (and a missing folder as such)."""
    try:
        return _create_temp(target)
    except FileNotFoundError:
        folder = os.path.dirname(target)
        why = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise OutputError(
            f"{name}: cannot write: the folder {folder} {why}", path=user, err=errno.ENOENT
        ) from None
    except NotADirectoryError:
        folder = os.path.dirname(target)
        raise OutputError(
            f"{name}: cannot write: {folder} is not a folder", path=user, err=errno.ENOTDIR
        ) from None
    except OSError as exc:
        raise _os_error(name, user, exc) from None


def _refuse_read_only(target: str, name: str, user: str) -> None:
    """An existing file this process may not write (``open(target, "w")`` would fail) is not
    silently replaced by a rename: a read-only output is one its owner protected."""
    eff = os.access in os.supports_effective_ids
    if os.path.exists(target) and not os.access(target, os.W_OK, effective_ids=eff):
        raise OutputError(
            f"{name}: cannot write: Permission denied (a read-only file)", path=user, err=errno.EACCES
        )


def _keep_metadata(fd: int, old: os.stat_result) -> None:
    """Give the new file ``old``'s permission bits, and its owner and group where allowed."""
    with contextlib.suppress(AttributeError, OSError):  # no fchown on Windows; not ours to give away
        if (old.st_uid, old.st_gid) != os.fstat(fd)[4:6]:
            os.fchown(fd, old.st_uid, old.st_gid)
    if hasattr(os, "fchmod"):
        os.fchmod(fd, stat.S_IMODE(old.st_mode))


def _same_file(target: str, other: Any) -> bool:
    """Are ``target`` and ``other`` one file (same device and inode: through symlinks, hard
    links and any spelling)? ``False`` when either is missing (a missing input is its own error)."""
    try:
        return os.path.samefile(target, other)
    except (OSError, TypeError, ValueError):
        return False


def _ours(exc: OSError, tmp: str) -> bool:
    """Is ``exc`` (raised in the ``with`` block) about the output file, not some other file?"""
    return exc.filename in (None, tmp) and not isinstance(exc, OutputError)


def check_output(path: str | os.PathLike, *, label: str = "", inputs: Iterable[Any] = ()) -> str:
    """Check, before any work, that ``path`` can be written as :func:`atomic_write` would (not a
    special file, its folder exists and takes a new file) and is none of ``inputs`` (compared
    as files: through symlinks, hard links and different spellings); returns the file written.

    :param label: the option that named ``path``, put before it in messages (``"--csv"``)."""
    user = os.fspath(path)
    name = _name(user, label)
    target = resolve_output(user, label=label)
    if any(_same_file(target, inp) for inp in inputs):
        raise OutputError(
            f"{name}: is one of the command's inputs; refusing to overwrite an input",
            path=user,
            err=errno.EEXIST,
        )
    _refuse_read_only(target, name, user)
    fd, tmp = _new_temp(target, name, user)
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(tmp)
    return target


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike, mode: str = "w", encoding: str = "utf-8", *, label: str = ""
) -> Iterator[IO[Any]]:
    """Open a temporary sibling of ``path`` for writing; when the block succeeds, give it the
    old file's mode (or the umask's, for a new file) and rename it over ``path`` (``os.replace``
    is atomic on POSIX and Windows); on any error remove it and keep the old file.

    A symlink to a regular file is followed (the file it points to is rewritten; the link
    stays); special files, directories and other symlinks are refused (see the module
    docstring). Errors are :class:`OutputError` naming ``path``.

    :param label: the option that named ``path`` (``"--csv"``), put before it in messages."""
    user = os.fspath(path)
    name = _name(user, label)
    target = resolve_output(user, label=label)
    try:
        old: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        old = None
    except OSError as exc:
        raise _os_error(name, user, exc) from None
    _refuse_read_only(target, name, user)
    fd, tmp = _new_temp(target, name, user)
    try:
        try:
            text = "b" not in mode
            try:
                fh = os.fdopen(fd, mode, encoding=encoding if text else None, newline="" if text else None)
            except BaseException:
                os.close(fd)
                raise
            with fh:
                if old is not None:
                    _keep_metadata(fh.fileno(), old)
                yield fh
                fh.flush()
                os.fsync(fh.fileno())
            _recheck(target, name, user)
            os.replace(tmp, target)
        except OSError as exc:
            if _ours(exc, tmp):
                raise _os_error(name, user, exc) from None
            raise
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _recheck(target: str, name: str, user: str) -> None:
    """Just before the rename: refuse if something other than a regular file took the
    target's place while the block ran."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise OutputError(
            f"{name}: became {_kind(st.st_mode)} while it was written; refusing to replace it",
            path=user,
            err=errno.EINVAL,
        )
