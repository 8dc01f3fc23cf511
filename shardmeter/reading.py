"""Reading every input file through one function: a scenario, a Hugging Face config, a catalog
overlay, an import source, a calibration log or CSV, standard input.

:func:`read_input` refuses what is not a regular file before opening it (a FIFO would block
``open`` forever, a device never ends), enforces a size limit, decodes UTF-8 (a byte-order mark
dropped; UTF-16 and NUL bytes refused) and returns an :class:`InputText` whose line numbers are
found by bisection over one precomputed table of line starts, so naming the line of each of N
entries costs ``O(N log lines)``, not a rescan per entry. Every problem is one
:class:`InputError` line naming the file.
"""

from __future__ import annotations

import bisect
import os
import stat
import sys
from typing import Any

import attrs

from shardmeter.errors import ScenarioError

__all__ = ["InputError", "InputText", "read_input", "read_input_bytes", "MAX_INPUT_BYTES", "STDIN_NAME"]

#: Largest input file read (a 1,000-island scenario is about 50 kB, a 64-rank nccl-tests log
#: about 1 MB).
MAX_INPUT_BYTES = 16 * 1024 * 1024

#: The name ``-`` (standard input) has in messages.
STDIN_NAME = "<stdin>"

#: What a file that is not a regular one is, for messages.
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class InputError(ScenarioError):
    """An input file that cannot be read as text: one line naming the file."""

    def __init__(self, file: str, message: str):
        super().__init__(message, file=file)


@attrs.frozen
class InputText:
    """The decoded text of one input and its name; :meth:`line_of` gives the 1-based line of a
    character offset in ``O(log lines)``."""

    text: str
    name: str
    _starts: tuple[int, ...] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        starts = [0]
        find = self.text.find
        i = find("\n")
        while i >= 0:
            starts.append(i + 1)
            i = find("\n", i + 1)
        object.__setattr__(self, "_starts", tuple(starts))

    def line_of(self, offset: int) -> int:
        """The 1-based line holding character ``offset`` (clipped to the text)."""
        return bisect.bisect_right(self._starts, max(0, offset))

    @property
    def lines(self) -> int:
        return len(self._starts)


def _kind(mode: int) -> str | None:
    for test, name in _KINDS:
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "an unknown kind of file"


def read_input_bytes(
    path: str | os.PathLike, *, what: str = "file", max_bytes: int = MAX_INPUT_BYTES
) -> bytes:
    """The bytes of the regular file at ``path`` (``-``: standard input, refused when it is a
    terminal), at most ``max_bytes``; ``what`` names the file's kind in messages ("scenario
    file", "calibration log")."""
    name = os.fspath(path)
    if name == "-":
        return _stdin_bytes(max_bytes, what)
    try:
        st = os.stat(name)
    except FileNotFoundError:
        raise InputError(name, "no such file") from None
    except OSError as exc:
        raise InputError(name, f"cannot read: {exc.strerror or exc}") from None
    kind = _kind(st.st_mode)
    if kind == "a directory":
        raise InputError(name, f"is a directory, not a {what}")
    if kind is not None:
        raise InputError(name, f"is not a regular file ({kind}); give a {what}")
    if st.st_size > max_bytes:
        raise InputError(name, f"is {st.st_size:,} bytes; a {what} is at most {max_bytes:,}")
    try:
        with open(name, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(name, f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > max_bytes:  # it grew while being read
        raise InputError(name, f"is more than {max_bytes:,} bytes; a {what} is at most that")
    return raw


def _stdin_bytes(max_bytes: int, what: str = "file") -> bytes:
    stream: Any = sys.stdin
    if stream is None or getattr(stream, "closed", False):
        raise InputError(STDIN_NAME, f"standard input is closed; pipe the {what} in")
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError, OSError):
        tty = False
    if tty:
        raise InputError(STDIN_NAME, f"is a terminal; pipe the {what} in (shardmeter ... - < FILE)")
    try:
        raw = getattr(stream, "buffer", stream).read(max_bytes + 1)
    except OSError as exc:
        raise InputError(STDIN_NAME, f"cannot read: {exc.strerror or exc}") from None
    if isinstance(raw, str):  # a text stream without a buffer (a test's StringIO)
        raw = raw.encode("utf-8")
    if len(raw) > max_bytes:
        raise InputError(STDIN_NAME, f"is more than {max_bytes:,} bytes; a {what} is at most that")
    return raw


def decode_text(raw: bytes, name: str) -> str:
    """UTF-8 text of ``raw`` (a byte-order mark dropped); UTF-16, other encodings and NUL bytes
    are one-line errors naming ``name``."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError(name, "UTF-16 text: save the file as UTF-8")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(name, f"not a UTF-8 text file (byte {exc.start:,} is not UTF-8)") from None
    if "\x00" in text:
        raise InputError(name, "not a text file (contains NUL bytes)")
    return text


def read_input(path: str | os.PathLike, *, what: str = "file", max_bytes: int = MAX_INPUT_BYTES) -> InputText:
    """The text of the input at ``path`` (``-``: standard input) as an :class:`InputText`:
    a regular file of at most ``max_bytes``, UTF-8, no NUL bytes; each problem one
    :class:`InputError` naming the file."""
    name = os.fspath(path)
    shown = STDIN_NAME if name == "-" else name
    return InputText(decode_text(read_input_bytes(name, what=what, max_bytes=max_bytes), shown), shown)
