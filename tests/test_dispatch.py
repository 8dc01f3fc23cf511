"""``by_code`` merges a part's records field by field (nested ones too) into each row's own
code's values, and ``pick`` chooses between two records row by row, reading a field once."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

from shardmeter.model.dispatch import by_code
from shardmeter.model.pick import pick


@attrs.frozen(kw_only=True)
class Inner:
    x: object
    y: object = 0.0


@attrs.frozen(kw_only=True)
class Outer:
    a: object
    inner: Inner
    extra: object = None


def _fn(calls: list[int]):
    def fn(code: int) -> Outer:
        calls.append(code)
        return Outer(a=np.full((1, 1), 10.0 * code), inner=Inner(x=float(code), y=np.array([[code + 0.5]])))

    return fn


@pytest.mark.parametrize(
    "codes",
    [
        np.array([[0], [2], [0], [5]]),  # along the rows: the gather
        np.array([[0, 2, 5], [5, 0, 2]]),  # two axes, three codes: np.where
        np.array([[0, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0]]),  # more than four: np.choose
    ],
)
def test_by_code_takes_each_rows_own_codes_fields(codes):
    calls: list[int] = []
    out = by_code(codes, _fn(calls))
    assert sorted(calls) == sorted(set(codes.ravel().tolist()))  # once per distinct code
    assert isinstance(out, Outer) and isinstance(out.inner, Inner) and out.extra is None
    np.testing.assert_array_equal(np.broadcast_to(out.a, codes.shape), 10.0 * codes)
    np.testing.assert_array_equal(np.broadcast_to(out.inner.x, codes.shape), codes.astype(float))
    np.testing.assert_array_equal(np.broadcast_to(out.inner.y, codes.shape), codes + 0.5)


def test_by_code_with_one_code_is_the_parts_own_result_and_dicts_still_merge():
    calls: list[int] = []
    fn = _fn(calls)
    one = by_code(np.full((4, 1), 3), fn)
    assert calls == [3] and one.inner.x == 3.0
    assert by_code(2.0, fn).inner.x == 2.0  # the scalar path
    d = by_code(np.array([[0], [1]]), lambda c: {"v": np.array([[c * 1.5]])})
    np.testing.assert_array_equal(d["v"], [[0.0], [1.5]])


def test_pick_chooses_row_by_row_and_reads_each_field_once():
    reads: list[str] = []

    @attrs.frozen
    class Counted:
        name: str

        @property
        def v(self):
            reads.append(self.name)
            return np.array([1.0, 2.0, 3.0]) if self.name == "a" else np.array([10.0, 20.0, 30.0])

    a = Outer(a=np.array([1.0, 2.0, 3.0]), inner=Inner(x=np.array([4.0, 5.0, 6.0])), extra=Counted("a"))
    b = Outer(a=np.array([7.0, 8.0, 9.0]), inner=Inner(x=np.array([0.0, 0.0, 0.0])), extra=Counted("b"))
    c = np.array([True, False, True])
    p = pick(c, a, b)
    np.testing.assert_array_equal(p.a, [1.0, 8.0, 3.0])
    np.testing.assert_array_equal(p.inner.x, [4.0, 0.0, 6.0])
    assert reads == []  # nothing of `extra` read yet
    np.testing.assert_array_equal(p.extra.v, [1.0, 20.0, 3.0])
    np.testing.assert_array_equal(p.extra.v, [1.0, 20.0, 3.0])
    assert reads == ["a", "b"]  # picked once, kept
    # a chain of picks (the busiest of three GPUs) picks through the earlier pick
    q = pick(np.array([False, False, True]), b, p)
    np.testing.assert_array_equal(q.a, [1.0, 8.0, 9.0])
    assert pick(True, 1.0, 2.0) == 1.0  # numbers are picked at once (the scalar path)
