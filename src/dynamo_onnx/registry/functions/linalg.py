"""Linear algebra torch_lib has not written, for matrices of a size fixed at export.

ONNX has ``Det`` and nothing else of LAPACK. These are the textbook algorithms unrolled over
the matrix size ``n`` (known when the function is traced: a dynamic ``n`` is refused), on any
batch of matrices, with dense ONNX operators only:

* LU with partial pivoting (LAPACK's ``getrf``: the largest magnitude in the column, the
  first of equal ones; the packed ``L\\U`` and 1-based pivots it returns), then forward and
  back substitution: ``linalg.solve``, ``linalg.inv`` (solving for the identity),
  ``linalg.slogdet`` (the product of U's diagonal and the permutation's sign);
* Cholesky-Banachiewicz column by column: ``linalg.cholesky`` and the older ``cholesky``;
* substitution alone: ``linalg.solve_triangular``.

Each step is a handful of nodes; a model grows as n^2 for n of 1 to 16 or so, the sizes
such models use (covariances, small solves in losses and filters).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript import INT32, INT64
from onnxscript import opset18 as op
from onnxscript.function_libs.torch_lib.tensor_typing import TFloat

__all__ = [
    "cholesky",
    "linalg_cholesky_ex",
    "linalg_inv",
    "linalg_inv_ex",
    "linalg_slogdet",
    "linalg_slogdet_full",
    "linalg_solve",
    "linalg_solve_ex",
    "linalg_solve_triangular",
    "linalg_tensorinv",
]


def _size(a: TFloat) -> int:
    """The static size n of the square matrices ``a`` [..., n, n]."""
    n = a.shape[-1] if a.shape is not None else None
    if not isinstance(n, int):
        raise ValueError("linear algebra is unrolled over the matrix size: it must be static")
    return n


def _ints(values: list[int]) -> INT64:
    return op.Constant(value=ir.tensor(np.array(values, dtype=np.int64)))


def _part(x: TFloat, start: int, stop: int, axis: int) -> TFloat:
    """``x`` from ``start`` to ``stop`` (static) on ``axis``."""
    return op.Slice(x, _ints([start]), _ints([stop]), _ints([axis]))


def _transpose(x: TFloat, rank: int) -> TFloat:
    """The matrices of ``x`` (of rank ``rank``: a traced value's shape may be unknown)
    transposed."""
    return op.Transpose(x, perm=[*range(rank - 2), rank - 1, rank - 2])


def _lu(a: TFloat, n: int) -> tuple[TFloat, INT64, TFloat, list[INT64]]:
    """(packed L\\U, the row order [..., n, 1] with P A = L U, the permutation's sign
    [..., 1, 1], each step's pivot row [..., 1, 1])."""
    rows = _ints(list(range(n)))
    column_of_rows = op.Reshape(rows, _ints([n, 1]))
    lu = a
    order = op.Expand(column_of_rows, op.Shape(_part(a, 0, 1, -1)))
    corner = op.Shape(_part(_part(a, 0, 1, -1), 0, 1, -2))
    sign = op.Add(op.CastLike(op.ConstantOfShape(corner), a), op.CastLike(1.0, a))
    pivots = []
    for k in range(n):
        column = _part(lu, k, k + 1, -1)
        candidates = op.Where(
            op.Less(column_of_rows, _ints([k])), op.CastLike(-1.0, column), op.Abs(column)
        )
        p = op.ArgMax(candidates, axis=-2, keepdims=1)
        pivots.append(p)
        k_value = op.Reshape(_ints([k]), _ints([1, 1]))
        swap = op.Where(
            op.Equal(column_of_rows, k_value),
            p,
            op.Where(op.Equal(column_of_rows, p), k_value, column_of_rows),
        )
        lu = op.GatherElements(lu, op.Expand(swap, op.Shape(lu)), axis=-2)
        order = op.GatherElements(order, swap, axis=-2)
        flip = op.Where(op.Equal(p, k_value), op.CastLike(1.0, a), op.CastLike(-1.0, a))
        sign = op.Mul(sign, flip)
        pivot_row = _part(lu, k, k + 1, -2)
        pivot = _part(pivot_row, k, k + 1, -1)
        below = op.Constant(value=ir.tensor(np.arange(n).reshape(n, 1) > k))
        factors = op.Div(_part(lu, k, k + 1, -1), pivot)
        factors = op.Where(below, factors, op.CastLike(0.0, a))
        after_k = op.Constant(value=ir.tensor(np.arange(n).reshape(1, n) > k))
        at_k = op.Constant(value=ir.tensor(np.arange(n).reshape(1, n) == k))
        lu = op.Sub(lu, op.Mul(factors, op.Where(after_k, pivot_row, op.CastLike(0.0, a))))
        lu = op.Where(op.And(below, at_k), factors, lu)
    return lu, order, sign, pivots


def _substitute(t: TFloat, b: TFloat, n: int, lower: bool, unit: bool) -> TFloat:
    """x with t x = b, t triangular [..., n, n] (its other half ignored), b [..., n, m]."""
    solved: list[TFloat] = []
    order = range(n) if lower else range(n - 1, -1, -1)
    for i in order:
        row = _part(t, i, i + 1, -2)
        value = _part(b, i, i + 1, -2)
        if solved:
            known = op.Concat(*solved, axis=-2) if lower else op.Concat(*solved[::-1], axis=-2)
            coefficients = _part(row, 0, i, -1) if lower else _part(row, i + 1, n, -1)
            value = op.Sub(value, op.MatMul(coefficients, known))
        if not unit:
            value = op.Div(value, _part(row, i, i + 1, -1))
        solved.append(value)
    return op.Concat(*solved, axis=-2) if lower else op.Concat(*solved[::-1], axis=-2)


def _broadcast_rhs(a: TFloat, b: TFloat) -> TFloat:
    """``b`` [..., n, m] broadcast over ``a``'s batch."""
    zeros = op.CastLike(op.ConstantOfShape(op.Shape(_part(a, 0, 1, -1))), b)
    return op.Add(zeros, b)


def _lu_solve(lu: TFloat, order: INT64, b: TFloat, n: int) -> TFloat:
    b = _broadcast_rhs(lu, b)
    permuted = op.GatherElements(b, op.Expand(order, op.Shape(b)), axis=-2)
    y = _substitute(lu, permuted, n, lower=True, unit=True)
    return _substitute(lu, y, n, lower=False, unit=False)


def _diagonal(lu: TFloat, n: int) -> TFloat:
    """The diagonal [..., n] of ``lu`` [..., n, n]."""
    eye = op.Constant(value=ir.tensor(np.eye(n, dtype=bool)))
    return op.ReduceSum(op.Where(eye, lu, op.CastLike(0.0, lu)), _ints([-1]), keepdims=0)


def _info(failed: TFloat) -> INT32:
    """LAPACK's info [...]: 1 + the first index where ``failed`` [..., n] (bool), else 0."""
    flags = op.Cast(failed, to=INT64.dtype)
    first = op.Add(op.ArgMax(flags, axis=-1, keepdims=0), op.Constant(value_int=1))
    any_failed = op.Cast(op.ReduceMax(flags, _ints([-1]), keepdims=0), to=9)
    return op.Cast(op.Where(any_failed, first, op.Sub(first, first)), to=INT32.dtype)


def _pivots(pivots: list[INT64]) -> INT32:
    """LAPACK's 1-based pivots [..., n]."""
    stacked = op.Concat(*pivots, axis=-1)  # [..., 1, n]
    return op.Cast(op.Add(op.Squeeze(stacked, _ints([-2])), _ints([1])), to=INT32.dtype)


def linalg_solve_ex(
    A: TFloat, B: TFloat, left: bool = True, check_errors: bool = False
) -> tuple[TFloat, TFloat, INT32, INT32]:
    """_linalg_solve_ex(Tensor A, Tensor B, *, bool left=True, bool check_errors=False)
    -> (Tensor result, Tensor LU, Tensor pivots, Tensor info)"""
    del check_errors  # (a graph cannot raise: info says it)
    n = _size(A)
    vector = len(B.shape) == 1 or (
        len(B.shape) == len(A.shape) - 1 and list(B.shape) == list(A.shape[:-1])
    )
    if n == 0:  # empty matrices: nothing to solve
        none = op.Cast(
            op.ReduceSum(op.Cast(A, to=INT64.dtype), _ints([-2, -1]), keepdims=0), to=INT32.dtype
        )
        pivots = op.Cast(
            op.ReduceSum(op.Cast(A, to=INT64.dtype), _ints([-1]), keepdims=0), to=INT32.dtype
        )
        return op.Identity(B), op.Identity(A), pivots, none
    rank = len(A.shape)
    matrix = A if left else _transpose(A, rank)
    lu, order, _, pivots = _lu(matrix, n)
    if vector:
        rhs = op.Unsqueeze(B, _ints([-1]))
    else:
        rhs = B if left else _transpose(B, len(B.shape))
    x = _lu_solve(lu, order, rhs, n)
    if vector:
        x = op.Squeeze(x, _ints([-1]))
    elif not left:
        x = _transpose(x, max(rank, len(B.shape)))
    failed = op.Equal(_diagonal(lu, n), op.CastLike(0.0, A))
    return x, lu, _pivots(pivots), _info(failed)


def linalg_solve(A: TFloat, B: TFloat, left: bool = True) -> TFloat:
    """linalg_solve(Tensor A, Tensor B, *, bool left=True) -> Tensor"""
    x, _, _, _ = linalg_solve_ex(A, B, left)
    return x


def linalg_inv_ex(A: TFloat, check_errors: bool = False) -> tuple[TFloat, INT32]:
    """linalg_inv_ex(Tensor A, *, bool check_errors=False) -> (Tensor inverse, Tensor info)"""
    del check_errors
    n = _size(A)
    if n == 0:
        none = op.ReduceSum(op.Cast(A, to=INT64.dtype), _ints([-2, -1]), keepdims=0)
        return op.Identity(A), op.Cast(none, to=INT32.dtype)
    return _inverse(A, n)


def _inverse(A: TFloat, n: int) -> tuple[TFloat, INT32]:
    """(the inverse of each n x n matrix of ``A``, LAPACK's info)."""
    lu, order, _, _ = _lu(A, n)
    eye = op.CastLike(op.Constant(value=ir.tensor(np.eye(n, dtype=np.float32))), A)
    inverse = _lu_solve(lu, order, eye, n)
    return inverse, _info(op.Equal(_diagonal(lu, n), op.CastLike(0.0, A)))


def linalg_tensorinv(self: TFloat, ind: int = 2) -> TFloat:
    """linalg_tensorinv(Tensor self, int ind=2) -> Tensor: the inverse of ``self`` read as
    a matrix of its first ``ind`` sizes by the others, shaped back the other way round."""
    shape = list(self.shape)
    rows = int(np.prod(shape[:ind]))
    inverse, _ = _inverse(op.Reshape(self, _ints([rows, rows])), rows)
    return op.Reshape(inverse, _ints([*shape[ind:], *shape[:ind]]))


def linalg_inv(A: TFloat) -> TFloat:
    """linalg_inv(Tensor A) -> Tensor (also ``inverse``)"""
    inverse, _ = linalg_inv_ex(A)
    return inverse


def linalg_slogdet_full(A: TFloat) -> tuple[TFloat, TFloat, TFloat, INT32]:
    """_linalg_slogdet(Tensor A) -> (Tensor sign, Tensor logabsdet, Tensor LU, Tensor pivots)"""
    n = _size(A)
    if n == 0:  # the determinant of an empty matrix is 1
        empty = op.ReduceSum(A, _ints([-2, -1]), keepdims=0)
        pivots = op.Cast(
            op.ReduceSum(op.Cast(A, to=INT64.dtype), _ints([-1]), keepdims=0), to=INT32.dtype
        )
        return op.Add(empty, op.CastLike(1.0, A)), empty, op.Identity(A), pivots
    # torch factors the transpose (LAPACK's column-major view of a row-major matrix): the
    # same determinant, and the LU and pivots torch returns
    lu, _, sign, pivots = _lu(_transpose(A, len(A.shape)), n)
    diagonal = _diagonal(lu, n)
    last = _ints([-1])
    sign = op.Mul(
        op.Squeeze(sign, _ints([-2, -1])), op.ReduceProd(op.Sign(diagonal), last, keepdims=0)
    )
    logabsdet = op.ReduceSum(op.Log(op.Abs(diagonal)), last, keepdims=0)
    return sign, logabsdet, lu, _pivots(pivots)


def linalg_slogdet(A: TFloat) -> tuple[TFloat, TFloat]:
    """linalg_slogdet(Tensor A) -> (Tensor sign, Tensor logabsdet) (also ``slogdet``)"""
    sign, logabsdet, _, _ = linalg_slogdet_full(A)
    return sign, logabsdet


def linalg_cholesky_ex(
    self: TFloat, upper: bool = False, check_errors: bool = False
) -> tuple[TFloat, INT32]:
    """linalg_cholesky_ex(Tensor self, *, bool upper=False, bool check_errors=False)
    -> (Tensor L, Tensor info)"""
    del check_errors
    n = _size(self)
    rank = len(self.shape)
    if n == 0:
        none = op.ReduceSum(op.Cast(self, to=INT64.dtype), _ints([-2, -1]), keepdims=0)
        return op.Identity(self), op.Cast(none, to=INT32.dtype)
    rows = op.Reshape(_ints(list(range(n))), _ints([n, 1]))
    columns: list[TFloat] = []
    pivots: list[TFloat] = []
    for j in range(n):
        column = _part(self, j, j + 1, -1)  # [..., n, 1]
        if columns:
            known = op.Concat(*columns, axis=-1)  # [..., n, j]
            row = _transpose(_part(known, j, j + 1, -2), rank)
            column = op.Sub(column, op.MatMul(known, row))
        pivot = _part(column, j, j + 1, -2)
        pivots.append(pivot)
        column = op.Div(column, op.Sqrt(pivot))
        columns.append(op.Where(op.Less(rows, _ints([j])), op.CastLike(0.0, self), column))
    lower = op.Concat(*columns, axis=-1)
    failed = op.Not(op.Greater(op.Concat(*pivots, axis=-1), op.CastLike(0.0, self)))
    info = _info(op.Squeeze(failed, _ints([-2])))
    return (_transpose(lower, rank) if upper else lower), info


def cholesky(self: TFloat, upper: bool = False) -> TFloat:
    """cholesky(Tensor self, bool upper=False) -> Tensor (also ``linalg_cholesky``)"""
    factor, _ = linalg_cholesky_ex(self, upper)
    return factor


def linalg_solve_triangular(
    self: TFloat, B: TFloat, upper: bool, left: bool = True, unitriangular: bool = False
) -> TFloat:
    """linalg_solve_triangular(Tensor self, Tensor B, *, bool upper, bool left=True,
    bool unitriangular=False) -> Tensor"""
    n = _size(self)
    if n == 0:
        return op.Identity(B)
    if left:
        return _substitute(self, _broadcast_rhs(self, B), n, not upper, unitriangular)
    # X A = B  <=>  A^T X^T = B^T, with A^T lower where A is upper
    rank = max(len(self.shape), len(B.shape))
    solved = _substitute(
        _transpose(self, len(self.shape)),
        _broadcast_rhs(self, _transpose(B, len(B.shape))),
        n,
        upper,
        unitriangular,
    )
    return _transpose(solved, rank)
