"""A launch script's logical lines: ``\\`` continuations and multi-line quoted strings joined,
comments dropped, here-documents skipped, and a line split into its commands (``;``, ``&&``,
``||``) outside quotes. The first pass of :mod:`.shell`; nothing is executed."""

from __future__ import annotations

import re

__all__ = ["logical_lines", "split_commands", "MARK", "END"]

#: A value the script cannot give: ``MARK + name + END`` (a variable), ``MARK + "(...)" + END``
#: (a command's output). Private-use characters, removed from the script before reading.
MARK, END = "\ue000", "\ue001"
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")


def logical_lines(text: str) -> list[tuple[int, str]]:
    """``(first line number, text)`` of each logical line: continuations joined, quoted newlines
    kept inside their string, comments dropped, here-document bodies skipped."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    quote = ""
    heredoc = ""
    for no, line in enumerate(text.replace(MARK, "").replace(END, "").split("\n"), 1):
        if heredoc:
            if line.strip() == heredoc:
                heredoc = ""
            continue
        if not buf:
            start = no
        i, n = 0, len(line)
        while i < n:
            c = line[i]
            if quote == "'":
                buf.append(c)
                quote = "" if c == "'" else quote
            elif c == "\\" and i + 1 < n:
                buf.append(line[i : i + 2])
                i += 1
            elif quote == '"':
                buf.append(c)
                quote = "" if c == '"' else quote
            elif c in "'\"":
                buf.append(c)
                quote = c
            elif c == "#" and (not buf or buf[-1][-1:] in " \t;&|(" or i == 0):
                break
            else:
                buf.append(c)
            i += 1
        joined = "".join(buf)
        if quote:
            if quote == '"' and joined.endswith("\\") and not joined.endswith("\\\\"):
                buf[-1] = buf[-1][:-1]  # a continuation inside double quotes
            buf.append(" ")
            continue
        if joined.endswith("\\") and not joined.endswith("\\\\"):
            buf[-1] = buf[-1][:-1] + " " if buf[-1] != "\\" else " "
            continue
        if joined.strip():
            out.append((start, joined))
            m = _HEREDOC.search(joined)
            if m and "<<<" not in joined:
                heredoc = m.group(2)
        buf = []
    if buf and "".join(buf).strip():
        out.append((start, "".join(buf)))
    return out


def split_commands(line: str) -> list[str]:
    """``line`` cut at unquoted ``;``, ``&&`` and ``||``."""
    parts, cur, quote, i = [], [], "", 0
    while i < len(line):
        c = line[i]
        if quote:
            cur.append(c)
            if c == "\\" and quote == '"' and i + 1 < len(line):
                cur.append(line[i + 1])
                i += 1
            elif c == quote:
                quote = ""
        elif c == "\\" and i + 1 < len(line):
            cur.append(line[i : i + 2])
            i += 1
        elif c in "'\"":
            quote = c
            cur.append(c)
        elif c == ";" or line[i : i + 2] in ("&&", "||"):
            parts.append("".join(cur))
            cur = []
            i += 1 if c == ";" else 2
            continue
        else:
            cur.append(c)
        i += 1
    parts.append("".join(cur))
    return [p for p in (p.strip() for p in parts) if p]
