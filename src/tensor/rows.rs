//! Row-broadcast operations on a 2-D [`DTensor`] `[T, N]`:
//! [`DTensor::add_row`] (a bias `[N]` added to every row),
//! [`DTensor::add_row_add`] (that and a residual, in one kernel) and
//! [`DTensor::sum_rows`] (column sums `[N]`, a bias gradient). Each acts
//! shard by shard with [`kernels::add_row`] / [`kernels::sum_rows`] and
//! communicates nothing.
//!
//! | operation | input | gives | why |
//! |---|---|---|---|
//! | `add_row` | y `Shard(1)`, bias `Shard(0)` split alike | `Shard(1)` | rank r's columns meet rank r's bias entries |
//! | `add_row` | y `Replicate`, bias `Replicate` | `Replicate` | |
//! | `add_row` | y `Shard(0)`, bias `Replicate` | `Shard(0)` | every row gets the whole bias |
//! | `sum_rows` | `Shard(1)` | `Shard(0)` | each rank sums its own columns |
//! | `sum_rows` | `Replicate` | `Replicate` | |
//! | `sum_rows` | `Shard(0)` | `Partial(Sum)` | each rank sums its own rows |
//! | `sum_rows` | `Partial(Sum)` | `Partial(Sum)` | a sum of partial sums |
//!
//! A `Partial` y in `add_row` is refused (the bias would be added once per
//! rank: reduce first), as are other pairings (redistribute first).

use super::aliased::per_shard1;
use super::autograd::{placed, record};
use super::checks::{check_bias, expect_float, expect_same_mesh};
use super::dtensor::DTensor;
use super::elementwise::expect_alike;
use super::placement::Placement;
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::kernels;

/// A 2-D f32 or f16 tensor `[T, N]`.
fn expect_matrix(op: &'static str, what: &str, t: &DTensor) -> Result<[usize; 2]> {
    let dims = match *t.shape() {
        [a, b] => [a, b],
        ref s => {
            return Err(Error::shape(
                op,
                format!("{what} as a 2-D tensor [T, N]"),
                s,
            ));
        }
    };
    expect_float(op, t)?;
    Ok(dims)
}

impl DTensor {
    /// `self[i, j] + bias[j]`: a bias `[N]` added to every row of `self`
    /// `[T, N]` (f32 or f16 each; computed in f32, the result in self's
    /// dtype), with no communication. y `Shard(1)` takes a bias `Shard(0)`
    /// split the same way and stays `Shard(1)`; y `Replicate` or `Shard(0)`
    /// takes a `Replicate` bias and keeps its placement. A `Partial` y is
    /// refused: the bias would be added on every rank, so reduce first.
    pub fn add_row(&self, bias: &DTensor) -> Result<DTensor> {
        const OP: &str = "DTensor::add_row";
        let y = self;
        expect_same_mesh(OP, y, bias)?;
        let [_, n] = expect_matrix(OP, "y", y)?;
        if bias.shape() != [n] {
            return Err(Error::shape(OP, [n], bias.shape()));
        }
        check_bias(OP, y.placement(), n, bias, (y, 1, "y's columns"))?;
        record("DTensor::add_row", &[y, bias], || {
            let (wide, b) = (y.cast(DType::F32)?, bias.cast(DType::F32)?);
            let shards = per_shard1(&[&wide, &b], |r| {
                kernels::add_row(&wide.shards()[r], &b.shards()[r])
            })?;
            let out = y
                .with_shards(shards, y.shape().to_vec(), y.placement())
                .cast(y.dtype())?;
            Ok((out, |dy: &DTensor| {
                Ok(vec![Some(dy.clone()), Some(dy.sum_rows()?)])
            }))
        })
    }

    /// `(self[i, j] + bias[j]) + residual[i, j]`: [`DTensor::add_row`] and
    /// then [`DTensor::add`] of `residual` in one kernel per shard, with the
    /// same bits (a row-parallel layer's bias after its reduce, and the
    /// block's residual: one pass over the row instead of two). All three
    /// f32; `residual` shaped and placed like `self`; the bias placed as
    /// `add_row` takes it. Communicates nothing.
    pub fn add_row_add(&self, bias: &DTensor, residual: &DTensor) -> Result<DTensor> {
        const OP: &str = "DTensor::add_row_add";
        let y = self;
        expect_same_mesh(OP, y, bias)?;
        let [_, n] = expect_matrix(OP, "y", y)?;
        expect_alike(OP, y, residual)?;
        for t in [y, bias] {
            if t.dtype() != DType::F32 {
                return Err(Error::DTypeMismatch {
                    op: OP,
                    expected: DType::F32,
                    got: t.dtype(),
                });
            }
        }
        if bias.shape() != [n] {
            return Err(Error::shape(OP, [n], bias.shape()));
        }
        check_bias(OP, y.placement(), n, bias, (y, 1, "y's columns"))?;
        record(OP, &[y, bias, residual], || {
            let shards = per_shard1(&[y, bias, residual], |r| {
                kernels::add_row_add(&y.shards()[r], &bias.shards()[r], &residual.shards()[r])
            })?;
            let out = y.with_shards(shards, y.shape().to_vec(), y.placement());
            Ok((out, |dy: &DTensor| {
                Ok(vec![
                    Some(dy.clone()),
                    Some(dy.sum_rows()?),
                    Some(dy.clone()),
                ])
            }))
        })
    }

    /// Column sums `[N]` of `self` `[T, N]` (a bias gradient `Σ_rows dy`),
    /// always f32 (an f16 input is widened first; gradients stay f32, as
    /// in the layers), in a fixed order, with no communication. `Shard(1)`
    /// gives `Shard(0)` (in the same units), `Replicate` gives `Replicate`,
    /// `Shard(0)` gives `Partial(Sum)` (each rank's rows' sums; reduce to
    /// get the total) and `Partial(Sum)` stays `Partial(Sum)`;
    /// `Partial(Max)` is refused.
    pub fn sum_rows(&self) -> Result<DTensor> {
        const OP: &str = "DTensor::sum_rows";
        let [_, n] = expect_matrix(OP, "x", self)?;
        let (placement, unit) = match self.placement() {
            Placement::Shard(1) => (Placement::Shard(0), self.shard_unit()),
            Placement::Replicate => (Placement::Replicate, 1),
            Placement::Shard(0) => (Placement::Partial(ReduceOp::Sum), 1),
            Placement::Partial(ReduceOp::Sum) => (Placement::Partial(ReduceOp::Sum), 1),
            p => {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "the column sums of a {p:?} tensor are not the maximum of per-rank \
                         sums; redistribute to Replicate first"
                    ),
                ));
            }
        };
        record("DTensor::sum_rows", &[self], || {
            let wide = self.cast(DType::F32)?;
            let shards = wide
                .shards()
                .iter()
                .map(kernels::sum_rows)
                .collect::<Result<Vec<_>>>()?;
            let y = self.with_shards_in_units(shards, vec![n], placement, unit);
            let x = self.detach();
            Ok((y, move |dy: &DTensor| {
                Ok(vec![Some(broadcast_rows(&x, dy)?)])
            }))
        })
    }
}

/// The gradient of `x.sum_rows()`: `dy` `[N]` copied into every row of a
/// tensor shaped and placed like `x` (a `Partial` x gets the whole `dy` on
/// every rank: the gradient of a partial sum is the sum's).
fn broadcast_rows(x: &DTensor, dy: &DTensor) -> Result<DTensor> {
    let dy = match x.placement() {
        Placement::Shard(1) => placed(dy, Placement::Shard(0))?,
        _ => placed(dy, Placement::Replicate)?,
    };
    let placement = match x.placement() {
        Placement::Partial(_) => Placement::Replicate,
        p => p,
    };
    let shards = x
        .shards()
        .iter()
        .zip(dy.shards())
        .map(|(xs, d)| kernels::add_row(&xs.rank().zeros(xs.shape(), DType::F32)?, d))
        .collect::<Result<Vec<_>>>()?;
    Ok(x.with_shards(shards, x.shape().to_vec(), placement))
}
