"""Every behaviour part's result checked where it is used, not only at registration.

A sharding, schedule, sync, convergence, failure, variability or framework part is a plugin's
code run inside the model. What it returns is checked when it returns (:func:`run_part`), before any arithmetic
reads it:

* **type**: the record its hook promises (:class:`~shardmeter.parts.StateBytes`, a sequence of
  :class:`~shardmeter.parts.CommEvent`, :class:`~shardmeter.parts.PipeTerms`, ...);
* **dtype**: every figure real (bool, int or float), never text or objects;
* **finite** and **sign**: no NaN or infinity, no negative bytes, seconds or counts, a
  convergence factor above zero;
* **shape**: an array broadcasts to the rows it was given without growing them (a wrongly
  shaped one would broadcast into a report whose per-GPU and total figures disagree).

A part that raises, returns the wrong thing or breaks a rule is a :class:`PartFault` (a
:class:`~shardmeter.errors.PluginError`: one line naming the part, its plugin and its
distribution): the result never reaches a report. While plugin code runs, its ``print`` goes
to stderr (``--json`` stays one document), and a call that has not returned within
:data:`SLOW_PART_S` is named on stderr while it still runs (a watchdog thread: the part is the
plugin's code in this process, so it is not killed).

Who provided a part is what the registry recorded (:func:`remember`); a part that reached a
worker process by pickle is named by its class.

The bundled parts (:func:`bundled`: registered by the ``shardmeter`` distribution's own plugins,
their class defined in the package) are the project's own code, which neither prints nor
sleeps, and whose results the tests hold to these same checks on every bundled scenario
(tests/test_part_guard.py): they are called directly, without the redirect, the watchdog or the
checks, which together cost about half of an in-process estimate (issue 24). Every other
part, a third party's or one registered in code, keeps every guard; :data:`GUARD_BUNDLED` set
true guards the bundled ones too.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from shardmeter.errors import PluginError, ShardMeterError
from shardmeter.exchange import ConvergenceTerms, FailureTerms, SyncHyperparameters, SyncTerms
from shardmeter.parts import CommEvent, PipeTerms, ScheduleNeeds, StateBytes

__all__ = [
    "PartFault",
    "run_part",
    "guarded_call",
    "remember",
    "who",
    "provider",
    "SLOW_PART_S",
    "GuardedPart",
    "bundled",
    "GUARD_BUNDLED",
]

#: Seconds after which a part that has not returned is named on stderr (it keeps running).
SLOW_PART_S = 3.0

#: Guard the bundled parts too (tests that hold them to the checks set this; False: a bundled
#: part's hooks are called directly, see the module docstring).
GUARD_BUNDLED = False

#: ``id(part) -> (a reference to the part, plugin, distribution, bundled)`` of every registered
#: part: a weak reference where the part takes one (an entry goes with its part, so a process
#: that applies overlays estimate after estimate does not keep every record it ever made), else
#: the part itself (its id is then never reused while the entry stands); ``bundled``: the
#: ``shardmeter`` distribution registered it.
_PROVIDERS: dict[int, tuple[Callable[[], object | None], str, str, bool]] = {}


class PartFault(PluginError):
    """A behaviour part raised or returned a result that breaks its contract: ``label`` names
    the part, its plugin and distribution and the hook; ``problem`` says what was wrong."""

    def __init__(self, label: str, problem: str):
        self.label = label
        self.problem = problem
        super().__init__(f"{label}: {problem}")


def remember(part: object, plugin: str, distribution: str) -> None:
    """Record who provided ``part`` (called by the registry for every part it holds)."""
    key = id(part)
    found = _PROVIDERS.get(key)
    if found is not None and found[0]() is part and found[1:3] == (plugin, distribution):
        return

    def forget(_: object) -> None:
        _PROVIDERS.pop(key, None)

    try:
        ref: Callable[[], object | None] = weakref.ref(part, forget)
    except TypeError:  # no __weakref__ slot
        ref = functools.partial(_same, part)
    _PROVIDERS[key] = (ref, plugin, distribution, _own_distribution(distribution))


def _own_distribution(distribution: str) -> bool:
    """Whether a registry's distribution label is the ``shardmeter`` distribution's own:
    ``shardmeter 0.1.0`` (an installed entry point) or ``shardmeter (source tree)`` (the
    bundled modules registered by name); never ``registered in code``."""
    name = distribution.split(" ", 1)[0]
    return name.lower().replace("_", "-") == "shardmeter"


#: ``type -> whether it is defined in the shardmeter package`` (its module's name).
_OWN_TYPES: dict[type, bool] = {}


def bundled(part: object) -> bool:
    """Whether ``part`` is a bundled part: the ``shardmeter`` distribution's own plugin
    registered it (:func:`remember`) and its class is defined in the package (a third party's
    subclass of a bundled part, a part registered in code or by another distribution, or one
    no registry in this process holds, is not), unless :data:`GUARD_BUNDLED`."""
    found = _PROVIDERS.get(id(part))
    if found is None or not found[3] or GUARD_BUNDLED or found[0]() is not part:
        return False
    cls = type(part)
    own = _OWN_TYPES.get(cls)
    if own is None:
        own = _OWN_TYPES[cls] = cls.__module__.startswith("shardmeter.")
    return own


def _same(part: object) -> object:
    return part


def provider(part: object) -> tuple[str, str] | None:
    """``(plugin, distribution)`` that registered ``part``; None where no registry holds it."""
    found = _PROVIDERS.get(id(part))
    return (found[1], found[2]) if found is not None and found[0]() is part else None


def who(kind: str, part: object) -> str:
    """``sharding part 'zero1' of plugin 'builtin' (distribution shardmeter)``."""
    name = getattr(part, "name", None) or type(part).__name__
    found = provider(part)
    if found is not None:
        return f"{kind} part '{name}' of plugin '{found[0]}' ({found[1]})"
    return f"{kind} part '{name}' ({type(part).__module__}.{type(part).__qualname__})"


# ---------------------------------------------------------------------------------------------
# the watchdog


_running: dict[int, tuple[float, str]] = {}
_counter = itertools.count()
_lock = threading.Lock()
_watchdog: threading.Thread | None = None


def _watch() -> None:
    warned: set[int] = set()
    while True:
        time.sleep(min(0.5, SLOW_PART_S / 4))
        now = time.monotonic()
        with _lock:
            late = [(t, label) for t, (start, label) in _running.items() if now - start > SLOW_PART_S]
            warned &= set(_running)
        for token, label in late:
            if token not in warned:
                warned.add(token)
                print(
                    f"shardmeter: warning: {label} has not returned after {SLOW_PART_S:g} s (still running)",
                    file=sys.stderr,
                    flush=True,
                )


@contextlib.contextmanager
def _watched(label: str) -> Iterator[None]:
    global _watchdog
    token = next(_counter)
    with _lock:
        _running[token] = (time.monotonic(), label)
        if _watchdog is None or not _watchdog.is_alive():
            _watchdog = threading.Thread(target=_watch, name="shardmeter-part-watchdog", daemon=True)
            _watchdog.start()
    try:
        yield
    finally:
        with _lock:
            _running.pop(token, None)


# ---------------------------------------------------------------------------------------------
# stdout while plugin code runs

_redirects = 0
_saved_stdout: Any = None


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """``sys.stdout`` is ``sys.stderr`` while any part runs, in any thread: the first call in
    saves the real stdout, the last one out restores it (``contextlib.redirect_stdout`` nested
    in threads that end out of order left the process's stdout on stderr for good: a planner
    scoring chunks in threads then printed its whole answer to stderr)."""
    global _redirects, _saved_stdout
    with _lock:
        if _redirects == 0:
            _saved_stdout = sys.stdout
            sys.stdout = sys.stderr
        _redirects += 1
    try:
        yield
    finally:
        with _lock:
            _redirects -= 1
            if _redirects == 0:
                sys.stdout = _saved_stdout
                _saved_stdout = None


# ---------------------------------------------------------------------------------------------
# the checks


class _Broken(Exception):
    """What is wrong with a result (the message of the :class:`PartFault`)."""


class _Rows:
    """What a result is held to: ``shape``, the broadcast shape of the array fields of the
    hook's input record (its first argument; None where there is none), and :attr:`finite`,
    whether those inputs are all finite (a part given an infinite or NaN figure, such as a zero
    bandwidth's inverse, may answer in kind: numpy's semantics decide, not the part). The
    inputs are read only when a check needs them (:func:`_rows`: a plain positive float of the
    scalar path passes without), and scanned for finiteness only when a result is not finite."""

    __slots__ = ("_args", "_finite", "_shape", "_values")

    def __init__(
        self, shape: tuple[int, ...] | None, values: Sequence[Any] = (), args: Sequence[Any] | None = None
    ):
        self._args = args
        self._shape = shape
        self._values = values
        self._finite: bool | None = None if values or args else True

    def _read(self) -> None:
        """The record's number and array fields and their broadcast shape, once."""
        args, self._args = self._args, None
        if not args:
            return
        given = attrs.astuple(args[0], recurse=False) if attrs.has(type(args[0])) else args
        self._values = [
            v for v in given if isinstance(v, (np.ndarray, np.number, int, float)) and not isinstance(v, bool)
        ]
        shapes = {np.shape(v) for v in self._values}
        try:
            self._shape = np.broadcast_shapes(*shapes) if shapes else None
        except ValueError:
            self._shape = None
        self._finite = None if self._values else True

    @property
    def shape(self) -> tuple[int, ...] | None:
        if self._args is not None:
            self._read()
        return self._shape

    @property
    def values(self) -> Sequence[Any]:
        if self._args is not None:
            self._read()
        return self._values

    @property
    def finite(self) -> bool:
        if self._args is not None:
            self._read()
        if self._finite is None:
            self._finite = all(
                bool(np.all(np.isfinite(v))) for v in self._values if np.asarray(v).dtype.kind == "f"
            )
        return self._finite


def _rows(args: Sequence[Any]) -> _Rows:
    """The rows of a hook's input record (its first argument), or of its array and number
    arguments where the first is not a record (``quantile_factor(q, ranks, kind, opts)``), read
    when first asked for."""
    return _Rows(None, args=args) if args else _Rows(None)


def _figure(
    value: Any, field: str, given: _Rows | None, *, positive: bool = False, forever: bool = False
) -> None:
    """``value`` is a real, finite (where its inputs were), non-negative (``positive``: above
    zero) scalar or array that broadcasts to the rows it was ``given`` without growing them.
    ``forever``: a time that may be +inf ("never ends": the model makes that plan infeasible);
    NaN never."""
    scalar = type(value) is float or type(value) is int  # the scalar path: no numpy
    if (
        scalar
        and (value > 0 or (value == 0 and not positive))
        and (value != math.inf or forever or (given is not None and not given.finite))
    ):
        return
    rows = given.shape if given is not None else None
    if isinstance(value, (str, bytes)) or value is None:
        raise _Broken(f"{field} is {type(value).__name__}, not a number or an array of numbers")
    try:
        arr = np.asarray(value)
    except Exception as exc:  # noqa: BLE001 - anything that is not array-like is the part's fault
        raise _Broken(f"{field} is not array-like ({type(exc).__name__})") from None
    if arr.dtype.kind not in "biuf":
        raise _Broken(f"{field} has dtype {arr.dtype}, not real numbers")
    if rows is not None and arr.shape != rows and arr.ndim:
        try:
            grown = np.broadcast_shapes(arr.shape, rows) != tuple(rows)
        except ValueError:
            grown = True
        if grown:
            raise _Broken(f"{field} has shape {arr.shape}, which does not fit the rows' shape {tuple(rows)}")
    if arr.dtype.kind == "b" or arr.size == 0:
        return
    ok = bool(np.all(arr > 0)) if positive else bool(np.all(arr >= 0))  # False for NaN too
    if ok and (arr.dtype.kind != "f" or arr.max() < math.inf):
        return
    finite_in = given.finite if given is not None else True
    if forever and arr.dtype.kind == "f" and not np.any(np.isnan(arr)) and bool(np.all(arr >= 0)):
        return
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        if finite_in:
            raise _Broken(f"{field} is not finite ({_sample(arr, ~np.isfinite(arr))})")
        if np.any(np.isnan(arr)):
            return  # NaN from NaN inputs; nothing to compare
    bad = arr <= 0 if positive else arr < 0
    if np.any(bad):
        raise _Broken(f"{field} is {'not positive' if positive else 'negative'} ({_sample(arr, bad)})")


def _flag(value: Any, field: str, rows: _Rows | None) -> None:
    """A true/false figure (a bool array or numbers read as such): real, finite, shaped."""
    _figure(np.abs(np.asarray(value, dtype=float)) if _is_numeric(value) else value, field, rows)


def _is_numeric(value: Any) -> bool:
    try:
        return np.asarray(value).dtype.kind in "biuf"
    except Exception:  # noqa: BLE001
        return False


def _sample(arr: np.ndarray, where: np.ndarray) -> str:
    v = np.broadcast_to(arr, np.broadcast_shapes(arr.shape, np.shape(where)))[where].reshape(-1)
    return f"{float(v[0]):g}" + (f" and {v.size - 1:,} more" if v.size > 1 else "")


def _record(value: Any, cls: type, hook: str) -> None:
    if not isinstance(value, cls):
        raise _Broken(f"{hook}() returned {type(value).__name__}, not {cls.__name__}")


def _state(v: Any, rows: Any) -> None:
    _record(v, StateBytes, "state")
    for f in ("weights", "gradients", "optimizer", "extra"):
        _figure(getattr(v, f), f"state().{f}", rows)
    for f in ("param_shards", "optimizer_shards"):
        _figure(getattr(v, f), f"state().{f}", rows, positive=True)


def _traffic(v: Any, rows: Any) -> None:
    if not isinstance(v, (list, tuple)):
        raise _Broken(f"traffic() returned {type(v).__name__}, not a sequence of CommEvent")
    for i, ev in enumerate(v):
        if not isinstance(ev, CommEvent):
            raise _Broken(f"traffic()[{i}] is {type(ev).__name__}, not CommEvent")
        for f in ("bytes", "count", "group_stride", "exposed_fraction", "bucket_ranks"):
            _figure(getattr(ev, f), f"traffic()[{i}].{f}", rows)
        _figure(ev.group_size, f"traffic()[{i}].group_size", rows, positive=True)
        if ev.bucket_bytes is not None:
            _figure(ev.bucket_bytes, f"traffic()[{i}].bucket_bytes", rows)


def _pipe_terms(v: Any, rows: Any) -> None:
    _record(v, PipeTerms, "terms")
    _figure(v.bubble_s, "terms().bubble_s", rows, forever=True)
    for f in ("in_flight", "p2p_transfers"):
        _figure(getattr(v, f), f"terms().{f}", rows)
    _flag(v.infeasible, "terms().infeasible", rows)
    if v.p2p_bytes is not None:
        _figure(v.p2p_bytes, "terms().p2p_bytes", rows)


def _sync_terms(v: Any, rows: Any) -> None:
    _record(v, SyncTerms, "exchange")
    shape = rows.shape
    per_island = _Rows(None if not shape else (*shape[:-1], 1), rows.values)  # (..., 1) of (..., I)
    for f in ("exposed_s", "wan_s", "round_s"):
        _figure(getattr(v, f), f"exchange().{f}", per_island, forever=True)
    _figure(v.egress_bytes, "exchange().egress_bytes", _Rows(None if not shape else shape[:-1], rows.values))


def _hyper(v: Any, rows: Any) -> None:
    _record(v, SyncHyperparameters, "hyperparameters")
    for f in ("inner_steps", "compression_bits", "fragments"):
        _figure(getattr(v, f), f"hyperparameters().{f}", None, positive=True)
    _figure(v.overlap_steps, "hyperparameters().overlap_steps", None)
    _boolean(v.local_steps, rows)


def _conv_terms(v: Any, rows: Any) -> None:
    _record(v, ConvergenceTerms, "terms")
    _figure(v.tokens_factor, "terms().tokens_factor", rows, positive=True)
    _flag(v.in_range, "terms().in_range", rows)


def _failure_terms(v: Any, rows: Any) -> None:
    _record(v, FailureTerms, "terms")
    for f in ("failures_per_h", "planned_per_h", "restart_s"):
        _figure(getattr(v, f), f"terms().{f}", rows)


def _scalar(v: Any, rows: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.number)) or not math.isfinite(float(v)):
        raise _Broken(f"returned {v!r:.40}, not a finite number")
    _figure(v, "the result", None)


def _boolean(v: Any, rows: Any) -> None:
    if not isinstance(v, (bool, np.bool_)):
        raise _Broken(f"returned {type(v).__name__}, not a bool")


def _needs(v: Any, rows: Any) -> None:
    _record(v, ScheduleNeeds, "needs")


def _defaults(v: Any, rows: Any) -> None:
    if not isinstance(v, Mapping):
        raise _Broken(f"defaults() returned {type(v).__name__}, not a mapping of key: (value, why)")


#: ``(kind, hook) -> check`` of the result. Hooks not listed (option defaults, messages,
#: search values) are checked where they are read.
CHECKS: dict[tuple[str, str], Callable[[Any, Any], None]] = {
    ("sharding", "state"): _state,
    ("sharding", "traffic"): _traffic,
    ("sharding", "infeasible"): lambda v, rows: _flag(v, "infeasible()", rows),
    ("schedule", "terms"): _pipe_terms,
    ("schedule", "infeasible"): lambda v, rows: _flag(v, "infeasible()", rows),
    ("schedule", "in_flight_at"): lambda v, rows: _figure(v, "in_flight_at()", rows),
    ("schedule", "loss_in_flight"): lambda v, rows: _figure(v, "loss_in_flight()", rows),
    ("schedule", "needs"): _needs,
    ("schedule", "uses_virtual_stages"): _boolean,
    ("sync", "exchange"): _sync_terms,
    ("sync", "state_bytes_per_param"): _scalar,
    ("sync", "hyperparameters"): _hyper,
    ("convergence", "terms"): _conv_terms,
    ("failures", "terms"): _failure_terms,
    ("variability", "quantile_factor"): lambda v, rows: _figure(v, "quantile_factor()", rows, positive=True),
    ("framework", "defaults"): _defaults,
    ("framework", "loss_compiled"): _boolean,
    ("framework", "expandable_segments"): _boolean,
    ("framework", "op_saves_attention"): _boolean,
}


def run_part(kind: str, part: object, hook: str, *args: Any, **kwargs: Any) -> Any:
    """``part.<hook>(*args, **kwargs)`` through :func:`guarded_call`; a :func:`bundled` part's
    directly."""
    if bundled(part):
        return getattr(part, hook)(*args, **kwargs)
    return guarded_call(kind, part, hook, lambda: getattr(part, hook)(*args, **kwargs), args)


def guarded_call(
    kind: str, part: object, hook: str, call: Callable[[], Any], args: Sequence[Any] = ()
) -> Any:
    """``call()`` (the part's ``hook`` on ``args``) with its stdout sent to stderr, named on
    stderr when it runs past :data:`SLOW_PART_S`, and its result checked (:data:`CHECKS`): a
    part that raises or returns a broken result is a :class:`PartFault` naming it, its plugin
    and its distribution."""
    label = f"{who(kind, part)}: {hook}()"
    try:
        with _watched(label), _stdout_to_stderr():
            result = call()
            if hook == "traffic":  # a generator is read twice: checked, then priced
                result = _listed(result)
    except ShardMeterError:
        raise
    except Exception as exc:
        raise PartFault(label, f"raised {type(exc).__name__}: {_short(exc)}") from exc
    check = CHECKS.get((kind, hook))
    if check is not None:
        try:
            check(result, _rows(args))
        except _Broken as broken:
            raise PartFault(label, f"{broken}; the part's result is not used") from None
    return result


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 200 else text[:197] + "..."


def _listed(result: Any) -> Any:
    """An iterable of events as a list (anything else as it is, for the check to name)."""
    if isinstance(result, (str, bytes, Mapping, list, tuple)) or not hasattr(result, "__iter__"):
        return result
    return list(result)


class GuardedPart:
    """A part whose hook calls go through :func:`run_part` (what :meth:`PartTable.get` hands the
    model); every other attribute is the part's own."""

    __slots__ = ("_kind", "_part")

    def __init__(self, kind: str, part: object):
        self._kind = kind
        self._part = part

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._part, name)
        if (self._kind, name) in CHECKS and callable(value):
            return lambda *args, **kwargs: run_part(self._kind, self._part, name, *args, **kwargs)
        return value

    @property
    def part(self) -> object:
        return self._part
