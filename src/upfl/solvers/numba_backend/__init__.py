"""Compiled CPU local solver for multinomial and binary logistic regression (numba).

The same contract and the same arithmetic as :func:`upfl.solvers.torch_backend.local_solve` (the local step of
Algorithm 1 line 4, which Algorithm 2 runs at odd iterations): every sampled device starts from
the global model and runs momentum SGD on

    F_i(w) + mu/2 ||w - w_global||^2 (+ <n_i, w>)

over its batch plan. At each step the gradient is that of the mean loss over the real samples of
the batch (index -1 pads the last batch of an epoch; cross-entropy for ``logreg``, the log loss for
``binary_logreg``; with ``model.softmax_before_loss`` the cross-entropy of the softmax of the logits,
:func:`softmax_first_residual`), plus ``mu (w - w_global)``, plus the device's linear term; then
``buf = momentum * buf + g`` and ``w -= lr * buf``.

Devices are independent, so they run in parallel (``numba.prange`` over worker threads, each with a
fixed list of devices): the result does not depend on the number of threads or on scheduling.
Arithmetic is float32 (as the torch path) and repeat runs on one machine are bit-identical: every sum has an
order fixed by the code, and the one fast-math liberty (:data:`FUSED`) fuses a multiply and the add after it
into one fused multiply-add. The parameter updates (:func:`momentum_step`, :func:`personal_step`,
:func:`mix_step`) are torch's separate roundings: they set ``fastmath=False``, as numba hands a caller's fast-math
flags to the functions it calls that set none (and a function's flags reach every operation in it, an intrinsic's
vector code too: :func:`momentum_vectors` runs inside :func:`momentum_step`). Every accumulator is float32
(logits, the softmax sum, the binary coefficient): zeros and ones are made in the arrays' type, because numba
types ``x * 0`` or ``x + 1`` with a float32 ``x`` as float64.

The training kernels run in a padded layout laid out for the vector units (16 float32 lanes): a device's rows
are copied once per solve to ``[x, 1, 0 ...]`` (the multinomial bias as a feature; the binary model's x~ has
its bias folded in, and is multiplied by its label's sign, :func:`signed_rows`) of a multiple of 16 floats, the
parameters to rows of the same width, zeros past the model's, which stay zero (each array from a 64-byte
boundary, :func:`aligned_zeros`). Summation order at each step (:func:`batch_gradient`,
:func:`binary_batch_gradient`):

- a logit <w_c, [x_b, 1]> (:func:`row_dot`; :func:`block_dots` makes the same additions for 16 samples at
  once): lane l sums the products of columns l, l + 16, ... in column order, one fused multiply-add each; the
  16 lane sums are added by halving (lane i + 8 onto lane i, then i + 4, i + 2, i + 1);
- a full batch reads its rows with weights 1 / B, one with padding the real count's (:func:`batch_reads`);
- the softmax (or the binary coefficient -1 / (1 + exp(<theta, s x~>))) for all samples of the batch at once, the
  samples the lanes: exp(z_c - max) by :func:`exp32`, summed in class order, divided by the sum;
- a gradient entry (:func:`accumulate_pair` for two classes at a time, :func:`accumulate_rows` for an odd last
  one): coefficient times feature over the batch's rows, one fused multiply-add per row into four partial sums
  (rows 0, 4, 8, ...; 1, 5, ...; 2, 6, ...; 3, 7, ...), added as (s0 + s1) + (s2 + s3); padding rows have
  coefficient 0 and add nothing.

The evaluation (:func:`evaluate_rows`) takes 64 rows at a time, the rows the vector lanes: a logit is a float32 sum
in feature order from the bias (the binary model's weights and bias times its feature scale, rounded to float32),
one fused multiply-add per feature (:func:`pair_logits` for two classes at a time, :func:`block_logits`); a row's
loss is float32 (:func:`exp32`, :func:`log32`, :func:`log1p32`; for the multinomial model (max - z_label) + log of
the sum of exponentials in class order; for the binary model max(s, 0) + log1p(exp(-|s|)), the last product of
:func:`log1p32` fused with the addition); row r's loss is added to float64 partial sum r mod 64, the 64 partial
sums to the total in their order. Divisions in the kernels follow IEEE (``error_model="numpy"``:
no zero-division check, which would keep a loop from being vectorised).

:func:`personal_solve` is pFedMe's bi-level local solve (Dinh et al. 2020, Algorithm 1) on the same
kernels and layout; the selected solver carries it (:class:`upfl.solvers.selection.CompiledSolver`).
"""

from __future__ import annotations

import os

import numba

from ...kernel_cache import guard_module, prepare

prepare(__file__)  # a writable cache folder (for every module of this folder) before the kernels are decorated

if "NUMBA_THREADING_LAYER" not in os.environ:
    numba.config.THREADING_LAYER = "workqueue"  # type: ignore[attr-defined]  # an option numba sets at run time
"""Numba's own thread pool, whose idle workers sleep, unless the user names a layer. The OpenMP layer's idle
workers spin after every solve; with two bundles on two cores they take the other job's core, and a bundle
ran 1.5-2x slower (measured: 18 runs of Table 1, train 4.7 s under OpenMP, 1.6 s under workqueue). Results
do not depend on the layer (each worker runs a fixed list of devices)."""

from . import arithmetic, evaluation, layout, plans, training, vectors  # noqa: E402
from . import solver as _solver  # noqa: E402
from .plans import batch_plans  # noqa: E402
from .solver import (  # noqa: E402
    DEVICE_ROWS,
    EVALUATION_ROWS,
    SOLVER_ENTRIES,
    KeptArrays,
    evaluate,
    evaluator,
    local_solve,
    personal_solve,
    warm_up,
)

for _module in (arithmetic, vectors, layout, plans, training, evaluation, _solver):
    guard_module(vars(_module))  # a damaged cache file is removed and its kernel compiled again

__all__ = [
    "DEVICE_ROWS",
    "EVALUATION_ROWS",
    "SOLVER_ENTRIES",
    "KeptArrays",
    "batch_plans",
    "evaluate",
    "evaluator",
    "local_solve",
    "personal_solve",
    "warm_up",
]
