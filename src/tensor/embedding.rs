//! [`DTensor::embedding`]: rows of a table `[vocab, dim]` picked by host ids,
//! each rank looking up its own shard with [`kernels::embedding_lookup`]; no
//! communication (the layers add the mapping that makes the result whole).
//!
//! | table | gives | why |
//! |---|---|---|
//! | `Shard(0)` (vocab rows split) | `Partial(Sum)` | rank r fills the rows of the ids it owns, zeros elsewhere |
//! | `Shard(1)` (dim split) | `Shard(1)` | every rank looks up every id in its columns |
//! | `Replicate` | `Replicate` | |
//!
//! Its VJP scatter-adds `dy` into the rows each rank holds
//! ([`kernels::embedding_backward`], summed in token order), again with no
//! communication: a `Partial(Sum)` output's gradient is `Replicate`, and
//! each rank keeps the rows it owns. The ids get no gradient.

use super::aliased::{made_once, one_buffer, per_shard1};
use super::autograd::{placed, record, tracking};
use super::dtensor::DTensor;
use super::placement::Placement;
use crate::device::{LocalTensor, Mesh};
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::kernels;
use crate::shard::split_range_in_units;

const OP: &str = "DTensor::embedding";

fn upload_ids(mesh: &Mesh, ids: &[i32]) -> Result<Vec<LocalTensor>> {
    if let Some(shards) = made_once(mesh, |r| r.upload_i32(&[ids.len()], ids))? {
        return Ok(shards);
    }
    mesh.ranks()
        .iter()
        .map(|r| r.upload_i32(&[ids.len()], ids))
        .collect()
}

/// Ids checked on the host against the vocab: the ids the gradient
/// scatters (the padding id masked to −1, a row no rank owns).
fn grad_ids(ids: &[i32], vocab: usize, padding_idx: Option<usize>) -> Result<Vec<i32>> {
    ids.iter()
        .map(|&id| {
            if id < 0 || id as usize >= vocab {
                return Err(Error::OutOfRange {
                    op: OP,
                    what: "token id",
                    value: id as i64,
                    bound: vocab,
                });
            }
            Ok(if padding_idx == Some(id as usize) {
                -1
            } else {
                id
            })
        })
        .collect()
}

/// (rows global rank `r` holds, global id of its first row), and the lookups' placement.
fn split(table: &DTensor) -> Result<(impl Fn(usize) -> (usize, i64), Placement)> {
    let (vocab, p, unit) = (table.shape()[0], table.mesh().size(), table.shard_unit());
    let (by_rows, placement) = match table.placement() {
        Placement::Shard(0) => (true, Placement::Partial(ReduceOp::Sum)),
        Placement::Shard(1) => (false, Placement::Shard(1)),
        Placement::Replicate => (false, Placement::Replicate),
        other => {
            return Err(Error::invalid(
                OP,
                format!(
                    "a table placed {other:?} has no rows to look up: place it Shard(0), \
                     Shard(1) or Replicate"
                ),
            ));
        }
    };
    let rows = move |r: usize| {
        if by_rows {
            let range = split_range_in_units(vocab, p, r, unit);
            (range.len(), range.start as i64)
        } else {
            (vocab, 0)
        }
    };
    Ok((rows, placement))
}

impl DTensor {
    /// Rows of this table (`[vocab, dim]`, f32) for host `ids` (each in
    /// `0..vocab`, else [`Error::OutOfRange`]): `[ids.len(), dim]`, with no
    /// communication. A `Shard(0)` table (vocab split) gives `Partial(Sum)`
    /// (each rank the rows it owns, zeros elsewhere: all-reduce it, e.g. with
    /// [`Mapping::ReduceFromParallel`](crate::tensor::Mapping)); `Shard(1)`
    /// gives `Shard(1)`; `Replicate` gives `Replicate`. The row `padding_idx`
    /// gets no gradient. Tables blocked past one binding are looked up block
    /// by block. The table is f32, or bf16 or quantized (read as stored, the
    /// output f32; a quantized table is frozen and gets no gradient).
    pub fn embedding(&self, ids: &[i32], padding_idx: Option<usize>) -> Result<DTensor> {
        let table = self;
        let &[vocab, dim] = table.shape() else {
            return Err(Error::shape(OP, "a 2-D table [vocab, dim]", table.shape()));
        };
        // A bf16 or quantized table (weights kept narrow) is read as stored.
        if !matches!(table.dtype(), DType::F32 | DType::BF16 | DType::Quant(_)) {
            return Err(Error::DTypeMismatch {
                op: OP,
                expected: DType::F32,
                got: table.dtype(),
            });
        }
        let grad_ids = grad_ids(ids, vocab, padding_idx)?;
        let (rows, placement) = split(table)?;
        let track = tracking(&[table]);
        record(OP, &[table], || {
            let mesh = table.mesh();
            let ids_dev = upload_ids(mesh, ids)?;
            // Position i in the shards; the row offset is the global rank's.
            let lookup = |r: usize| {
                let t = &table.shards()[r];
                kernels::embedding_lookup(t, &ids_dev[r], rows(t.rank_index()).1)
            };
            // A replicated table and ids on one device: looked up once.
            let parts = if placement == Placement::Replicate && one_buffer(&ids_dev) {
                per_shard1(&[table], lookup)?
            } else {
                (0..ids_dev.len()).map(lookup).collect::<Result<Vec<_>>>()?
            };
            let y = table.with_shards(parts, vec![ids.len(), dim], placement);
            // The padding row gets no gradient: its ids become −1 (owned by no rank).
            let ids_dev = if track && padding_idx.is_some() {
                upload_ids(mesh, &grad_ids)?
            } else {
                ids_dev
            };
            let table = table.detach();
            Ok((y, move |dy: &DTensor| {
                // A quantized table is frozen: no gradient.
                if table.dtype().quant().is_some() {
                    return Ok(vec![None]);
                }
                Ok(vec![Some(scatter_add(&table, &ids_dev, dy, placement)?)])
            }))
        })
    }
}

/// The table's gradient: `dy` (placed as the lookups' gradient: `Replicate`
/// for a `Partial(Sum)` output) scatter-added into each rank's rows.
fn scatter_add(
    table: &DTensor,
    ids: &[LocalTensor],
    dy: &DTensor,
    out: Placement,
) -> Result<DTensor> {
    let dy = match out {
        Placement::Partial(_) => placed(dy, Placement::Replicate)?,
        p => placed(dy, p)?,
    }
    .cast(DType::F32)?;
    let (rows, _) = split(table)?;
    let grads = table
        .shards()
        .iter()
        .zip(ids)
        .zip(dy.shards())
        .map(|((t, ids), dy)| {
            let (n, start) = rows(t.rank_index());
            kernels::embedding_backward(ids, dy, n, start, None)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(table.with_shards(grads, table.shape().to_vec(), table.placement()))
}
