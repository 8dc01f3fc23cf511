"""Reading a launch script's own shell variables without running a shell.

:func:`logical_lines` joins a script's ``\\`` continuations and multi-line quoted strings into
logical lines, drops comments and skips here-documents. :func:`read_script` then follows the
script in order: ``NAME=value`` / ``export NAME=value`` set a variable (``NAME+=value``
appends), ``$NAME``, ``${NAME}``, ``${NAME:-default}`` (``-``, ``:=``, ``:+``) expand as bash
expands them, ``$((...))`` integer arithmetic is computed, ``if [ ... ]`` tests on known values
choose a branch (an undecided one: both are read), and ``case`` / loop bodies are not followed.
A variable the script never sets and ``--var`` does not give expands to a marker
(:func:`missing_in`), so the importer can name it; a command's output (``$(...)``, backticks)
is a marker too. Nothing is executed; work is linear in the script's size.
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Callable, Mapping

import attrs

from shardmeter.importers.shell_lines import END, MARK, logical_lines, split_commands

__all__ = ["logical_lines", "read_script", "Script", "ShellLimit", "missing_in", "MARK", "END"]

_MARKED = re.compile(f"{MARK}([^{END}]*){END}")
_ASSIGN = re.compile(
    r"\s*(?:(?:export|local|readonly|declare|typeset)(?:\s+-\w+)*\s+)?([A-Za-z_][A-Za-z0-9_]*)(\+?)=(.*)\Z",
    re.S,
)
#: Longest value a variable may grow to (a script's longest, a string of arguments, is a few kB).
MAX_VALUE = 64 << 10
#: Characters all expansions of one script may produce together, at most (the examples' are
#: under 100 kB).
MAX_EXPANDED = 8 << 20


class ShellLimit(ValueError):
    """A script whose variables expand past :data:`MAX_EXPANDED` characters."""


def missing_in(text: str) -> list[str]:
    """The variables (and ``(...)`` command outputs) whose markers ``text`` holds."""
    return _MARKED.findall(text)


def _unmark(text: str) -> str:
    return _MARKED.sub(
        lambda m: "$" + (m.group(1) if m.group(1).startswith("(") else "{" + m.group(1) + "}"), text
    )


@attrs.define
class Script:
    """What :func:`read_script` found: the logical lines to read flags from (expanded), the
    variables referenced but never set (first line of each), and notes."""

    lines: list[tuple[int, str]] = attrs.field(factory=list)
    missing: dict[str, int] = attrs.field(factory=dict)
    notes: list[str] = attrs.field(factory=list)
    env: dict[str, str] = attrs.field(factory=dict)
    expanded: int = 0

    def note(self, line: str) -> None:
        if line not in self.notes and len(self.notes) < 100:
            self.notes.append(line)


class _Expander:
    def __init__(self, script: Script, given: Mapping[str, str], line: int):
        self.s = script
        self.given = given
        self.line = line

    def lookup(self, name: str) -> str | None:
        if name in self.s.env:
            return self.s.env[name]
        if name in self.given:
            return self.given[name]
        return None

    def missing(self, name: str) -> str:
        self.s.missing.setdefault(name, self.line)
        return MARK + name + END

    def expand(self, text: str) -> str:
        """``text`` with its expansions done; quotes kept, inserted values escaped for shlex."""
        out: list[str] = []
        quote, i, n = "", 0, len(text)
        while i < n:
            c = text[i]
            if quote == "'":
                out.append(c)
                quote = "" if c == "'" else quote
            elif c == "\\" and i + 1 < n:
                out.append(text[i : i + 2])
                i += 1
            elif c == "$" and i + 1 < n:
                value, i = self._dollar(text, i)
                out.append(_escape(value, quoted=quote == '"'))
                continue
            elif c == "`":
                j = text.find("`", i + 1)
                i = n if j < 0 else j + 1
                out.append(MARK + "(...)" + END)
                continue
            elif c in "'\"":
                if quote == c:
                    quote = ""
                elif not quote:
                    quote = c
                out.append(c)
            else:
                out.append(c)
            i += 1
        text = "".join(out)
        self.s.expanded += len(text)
        if len(text) > MAX_VALUE or self.s.expanded > MAX_EXPANDED:
            raise ShellLimit(
                f"its variables expand to more than {MAX_VALUE >> 10} kB in one place, or "
                f"{MAX_EXPANDED >> 20} MiB in all"
            )
        return text

    def _dollar(self, text: str, i: int) -> tuple[str, int]:
        """The value of the expansion starting at ``text[i] == "$"`` and the index after it."""
        nxt = text[i + 1]
        if text.startswith("$((", i):
            j = _matching(text, i + 1, "(", ")")
            if j > 0 and text[j - 1] == ")":
                return self._arith(text[i + 3 : j - 1]), j + 1
            return MARK + "(...)" + END, len(text) if j < 0 else j + 1
        if nxt == "(":
            j = _matching(text, i + 1, "(", ")")
            return MARK + "(...)" + END, len(text) if j < 0 else j + 1
        if nxt == "{":
            j = _matching(text, i + 1, "{", "}")
            if j < 0:
                return "$", i + 1
            return self._param(text[i + 2 : j]), j + 1
        m = re.match(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]", text[i + 1 :])
        if m:
            name = m.group(0)
            v = self.lookup(name)
            return (v if v is not None else self.missing(name)), i + 1 + len(name)
        if nxt in "@*#?$!-":
            return MARK + f"(${nxt})" + END, i + 2
        return "$", i + 1

    def word(self, text: str) -> str:
        """``text`` expanded and its quotes removed (a default value, an assignment's value)."""
        expanded = self.expand(text)
        try:
            return " ".join(shlex.split(expanded))
        except ValueError:
            return expanded

    def _param(self, body: str) -> str:
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*|[0-9]+)(\[[^\]]*\])?(?:(:?[-=+?])(.*))?", body, re.S)
        if not m or body.startswith("#"):
            return MARK + "(${" + body[:20] + "})" + END
        name, index, op, word = m.group(1), m.group(2), m.group(3), m.group(4) or ""
        if index:  # an array: its words are read where the array is defined
            return ""
        v = self.lookup(name)
        unset = v is None or (op is not None and op.startswith(":") and v == "")
        if op in (":-", "-"):
            return self.word(word) if unset else v  # type: ignore[return-value]
        if op in (":=", "="):
            if unset:
                v = self.word(word)
                self.s.env[name] = v
            return v  # type: ignore[return-value]
        if op in (":+", "+"):
            return "" if unset else self.word(word)
        if v is None:
            return self.missing(name)
        return v

    def _arith(self, expr: str) -> str:
        text = self.expand(expr)
        names = missing_in(text)
        if names:
            return "".join(MARK + n + END for n in names)

        def var(m: re.Match) -> str:
            v = self.lookup(m.group(0))
            if v is None:
                self.missing(m.group(0))
                return "\x00"
            return f"({v})" if v.strip() else "0"

        text = re.sub(r"[A-Za-z_][A-Za-z0-9_]*", var, text)
        if "\x00" in text:
            return "".join(MARK + n + END for n in re.findall(r"[A-Za-z_]\w*", expr))
        value = _int_expr(text)
        return MARK + "($((" + expr[:30] + ")))" + END if value is None else str(value)


def _matching(text: str, i: int, open_: str, close: str) -> int:
    """Index of the ``close`` matching ``text[i] == open_`` (-1 if none)."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_:
            depth += 1
        elif text[j] == close:
            depth -= 1
            if depth == 0:
                return j
    return -1


def _escape(value: str, *, quoted: bool) -> str:
    """``value`` inserted where shlex will split: its quotes and backslashes literal."""
    special = '"\\' if quoted else "\"'\\#;&|()<>"
    return "".join("\\" + c if c in special else c for c in value)


def _int_expr(text: str) -> int | None:
    """Bash integer arithmetic on numbers (``+ - * / % ( )``), bounded; ``None`` otherwise."""
    if len(text) > 200 or not re.fullmatch(r"[\s0-9+\-*/%()]*", text):
        return None
    try:
        tree = ast.parse(text.strip() or "0", mode="eval")
    except (SyntaxError, ValueError, RecursionError):
        return None

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add):
                r = a + b
            elif isinstance(node.op, ast.Sub):
                r = a - b
            elif isinstance(node.op, ast.Mult):
                r = a * b
            elif isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and b != 0:
                q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
                r = q if not isinstance(node.op, ast.Mod) else a - q * b
            else:
                raise ValueError
            if abs(r) > 2**63:
                raise ValueError
            return r
        raise ValueError

    try:
        return ev(tree.body)
    except (ValueError, RecursionError):
        return None


def _test(words: list[str]) -> bool | None:
    """A ``[ ... ]`` test on known words; ``None`` when it cannot be decided."""
    if words and words[0] == "!":
        r = _test(words[1:])
        return None if r is None else not r
    if any(n.startswith("(") for w in words for n in missing_in(w)):
        return None
    words = [_MARKED.sub("", w) for w in words]  # a variable set nowhere is empty, as in bash
    if len(words) == 2 and words[0] in ("-n", "-z"):
        return (words[1] != "") == (words[0] == "-n")
    if len(words) == 1:
        return words[0] != ""
    if len(words) == 3:
        a, op, b = words
        if op in ("=", "=="):
            return a == b
        if op == "!=":
            return a != b
        ops = {"-eq": 0, "-ne": 1, "-lt": 2, "-le": 3, "-gt": 4, "-ge": 5}
        if op in ops and re.fullmatch(r"-?[0-9]{1,18}", a) and re.fullmatch(r"-?[0-9]{1,18}", b):
            x, y = int(a), int(b)
            return (x == y, x != y, x < y, x <= y, x > y, x >= y)[ops[op]]
    return None


def _condition(cmd: str, exp: _Expander) -> bool | None:
    """The value of an ``if`` / ``elif`` condition, where it is a simple test."""
    try:
        words = shlex.split(exp.expand(cmd))
    except ValueError:
        return None
    if words[:1] == ["["] and words[-1:] == ["]"]:
        return _test(words[1:-1])
    if words[:1] == ["[["] and words[-1:] == ["]]"]:
        return _test(words[1:-1])
    if words[:1] == ["test"]:
        return _test(words[1:])
    return None


@attrs.define
class _Branch:
    taken: bool | None  # this branch's state: True, False, or undecided
    done: bool  # an earlier branch of the same if was taken
    undecided: bool  # an earlier branch could not be decided

    def next(self, t: bool | None) -> None:
        """Move to the next branch, whose own test is ``t`` (``else``: True)."""
        if self.done:
            self.taken = False
            return
        self.taken = None if self.undecided and t is not False else t
        self.done = self.taken is True
        self.undecided = self.undecided or t is None


#: Files a script may source in turn (``. CONFIG.sh`` inside ``. run.sh``), at most.
MAX_INCLUDE_DEPTH = 4


def read_script(
    text: str,
    given: Mapping[str, str] | None = None,
    include: Callable[[str], str | None] | None = None,
    *,
    _script: Script | None = None,
    _depth: int = 0,
) -> Script:
    """Follow ``text`` as bash would assign and expand, without running it (module docstring).

    :param include: for ``. FILE`` / ``source FILE``: FILE's text (the path as written, with a
        leading `` `pwd`/ `` or ``$(dirname $0)/`` dropped), or ``None`` when it is not read."""
    s = _script or Script()
    given = dict(given or {})
    stack: list[_Branch] = []
    skip_depth = 0  # inside case ... esac, or a loop body
    for no, line in logical_lines(text):
        exp = _Expander(s, given, no)
        for cmd in split_commands(line):
            word = cmd.split(None, 1)[0] if cmd.split() else ""
            rest = cmd[len(word) :].strip()
            if word in ("case",):
                skip_depth += 1
                continue
            if word == "esac":
                skip_depth = max(0, skip_depth - 1)
                continue
            if word in ("for", "while", "until", "select"):
                skip_depth += 1
                s.note(f"line {no}: a {word} loop; its body is not followed")
                continue
            if word == "done":
                skip_depth = max(0, skip_depth - 1)
                continue
            if skip_depth:
                continue
            if word == "if":
                t = _condition(rest, exp) if _active(stack) else False
                unset = [n for n in missing_in(exp.expand(rest)) if not n.startswith("(")]
                if unset and t is not None:
                    s.note(
                        f"line {no}: if {_unmark(rest)[:60]}: {', '.join(unset)} not set in the file, taken as empty"
                    )
                if t is None:
                    s.note(f"line {no}: if {_unmark(rest)[:60]}: not decided; both branches read")
                stack.append(_Branch(taken=t, done=t is True, undecided=t is None))
                continue
            if word == "elif" and stack:
                stack[-1].next(_condition(rest, exp))
                continue
            if word == "else" and stack:
                stack[-1].next(True)
                cmd = rest
                if not cmd:
                    continue
                word = cmd.split(None, 1)[0]
            if word == "fi":
                stack and stack.pop()
                continue
            if word in ("then", "do"):
                cmd = cmd[len(word) :].strip()
                if not cmd:
                    continue
            if not _active(stack):
                continue
            sourced = _source(cmd, exp, include, _depth)
            if sourced is not None:
                read_script(sourced, given, include, _script=s, _depth=_depth + 1)
                continue
            _command(cmd, exp, s, no)
    return s


def _source(cmd: str, exp: _Expander, include: Callable[[str], str | None] | None, depth: int) -> str | None:
    """The text of the file ``cmd`` sources, where ``include`` reads it."""
    words = cmd.split()
    if include is None or len(words) != 2 or words[0] not in (".", "source") or depth >= MAX_INCLUDE_DEPTH:
        return None
    path = exp.expand(words[1]).strip("\"'")
    path = re.sub(f"^{MARK}\\(\\.\\.\\.\\){END}/", "", path)
    if missing_in(path):
        return None
    return include(path)


def _active(stack: list[_Branch]) -> bool:
    return all(b.taken is not False for b in stack)


def _command(cmd: str, exp: _Expander, s: Script, no: int) -> None:
    m = _ASSIGN.match(cmd)
    if m:
        name, append, value = m.group(1), m.group(2), m.group(3)
        if value.startswith("("):  # an array: its words are flags, read below
            s.lines.append((no, exp.expand(value.strip("() "))))
            return
        expanded = exp.expand(value)
        try:
            words = shlex.split(expanded)
        except ValueError:
            words = [expanded]
        v = words[0] if words else ""
        s.env[name] = s.env.get(name, "") + v if append else v
        if len(s.env[name]) > MAX_VALUE:
            raise ShellLimit(f"{name} grows past {MAX_VALUE >> 10} kB")
        if "--" in v:  # a string of arguments (MEGATRON_PARAMS="--num-layers ...")
            s.lines.append((no, v))
        return
    word = cmd.split(None, 1)[0]
    if word in (".", "source"):
        s.note(
            f"line {no}: not read: {_unmark(cmd)[:80]} (another file: import the file that holds the arguments)"
        )
        return
    s.lines.append((no, exp.expand(cmd)))
