//! Tensors larger than one storage binding, stored as **row blocks**.
//!
//! A tensor whose bytes do not fit one binding (the smaller of
//! `max_storage_buffer_binding_size` and `max_buffer_size`) is kept as a list
//! of ordinary one-buffer tensors, each holding whole rows along dim 0: block
//! `b` holds rows `[b·R, min((b+1)·R, rows))` with `R = ⌊limit / (4·row)⌋`
//! rounded down to a multiple of 64 where it is that large (so the GEMM's
//! padded packs of a block fit one binding too), else of 4 or 2 (so every
//! f16 block starts on a word). Rows are counted at 4 bytes per element
//! whatever the dtype, so an f16 and an f32 tensor of one shape that are both
//! blocked block identically, and a cast, an add or an optimiser step runs
//! block by block (a cast keeps its input's blocks even where the output
//! would fit one binding). Only a single row over the limit is an error.
//!
//! Kernels bind one buffer per operand, so a kernel meeting a blocked tensor
//! fails with [`Error::TooLarge`] naming itself and the limit
//! (`dispatch.rs`), unless its wrapper runs it per block
//! ([`map_blocks`], [`for_each_block`]) or assembles blocks itself
//! ([`LocalTensor::from_blocks`]).

use super::context::Device;
use super::copy::copy_region;
use super::tensor::LocalTensor;
use crate::element::DType;
use crate::error::{Error, Result};

/// Rows of each block of a tensor of `shape` (`bytes` in all) on `device`,
/// or `None` when it fits one binding. A row over the limit is an error
/// naming it.
pub(crate) fn row_layout(
    device: &Device,
    op: &'static str,
    (shape, dtype): (&[usize], DType),
    bytes: u64,
) -> Result<Option<Vec<usize>>> {
    let (limit, limit_name) = device.block_limit();
    if bytes <= limit || shape.is_empty() {
        return Ok(None);
    }
    let row: usize = shape[1..].iter().product();
    // Four bytes an element (what a widening cast or pack of the block
    // needs), or a quantized row's blocks, which are never widened.
    let row_bytes = match dtype {
        DType::Quant(_) => dtype.storage_bytes(&shape[1..]) as u64,
        _ => (row as u64).saturating_mul(4),
    };
    if row_bytes > limit {
        return Err(Error::TooLarge {
            op,
            what: "one row of a tensor (tensors are split into blocks of whole rows)",
            needed: row_bytes,
            limit,
            limit_name,
        });
    }
    // Whole multiples of 64 rows where possible: the GEMM packs a transposed
    // operand with rows padded to 64 elements (256-byte texture rows), which
    // must fit one binding too; else of 4 (vec4 packs), else even (f16 words).
    let mut per = (limit / row_bytes) as usize;
    for align in [64, 4, 2] {
        if per >= align {
            per -= per % align;
            break;
        }
    }
    let rows = shape[0];
    Ok(Some(
        (0..rows.div_ceil(per))
            .map(|b| per.min(rows - b * per))
            .collect(),
    ))
}

/// Number of blocks shared by `tensors` (`None` if none is blocked); an
/// error unless every operand is split at the same element offsets.
pub(crate) fn common_blocks(op: &'static str, tensors: &[&LocalTensor]) -> Result<Option<usize>> {
    let Some(first) = tensors.iter().find(|t| t.is_blocked()) else {
        return Ok(None);
    };
    let lens = |t: &LocalTensor| t.blocks().iter().map(|b| b.len()).collect::<Vec<_>>();
    let want = lens(first);
    for t in tensors {
        if lens(t) != want {
            return Err(Error::invalid(
                op,
                format!(
                    "operands {:?} and {:?} are stored in different row blocks; give them the same shape",
                    first.shape(),
                    t.shape()
                ),
            ));
        }
    }
    Ok(Some(want.len()))
}

/// Run `f` on `inputs` (same block layout), block by block when they are
/// blocked, and join the per-block outputs along dim 0.
pub(crate) fn map_blocks(
    op: &'static str,
    inputs: &[&LocalTensor],
    mut f: impl FnMut(&[&LocalTensor]) -> Result<LocalTensor>,
) -> Result<LocalTensor> {
    let Some(n) = common_blocks(op, inputs)? else {
        return f(inputs);
    };
    let outs = (0..n)
        .map(|b| {
            let parts: Vec<&LocalTensor> = inputs.iter().map(|t| &t.blocks()[b]).collect();
            f(&parts)
        })
        .collect::<Result<Vec<_>>>()?;
    LocalTensor::from_blocks(outs)
}

/// Run `f` on `inputs` (same block layout), block by block when they are
/// blocked (in-place updates).
pub(crate) fn for_each_block(
    op: &'static str,
    inputs: &[&LocalTensor],
    mut f: impl FnMut(&[&LocalTensor]) -> Result<()>,
) -> Result<()> {
    let Some(n) = common_blocks(op, inputs)? else {
        return f(inputs);
    };
    for b in 0..n {
        let parts: Vec<&LocalTensor> = inputs.iter().map(|t| &t.blocks()[b]).collect();
        f(&parts)?;
    }
    Ok(())
}

impl LocalTensor {
    /// Join one-buffer tensors (same rank, dtype and trailing dims) along
    /// dim 0 into one tensor stored as those blocks, without a copy; one
    /// block is returned as is. Each block must fit one binding.
    pub fn from_blocks(blocks: Vec<LocalTensor>) -> Result<LocalTensor> {
        const OP: &str = "from_blocks";
        let first = blocks
            .first()
            .ok_or_else(|| Error::invalid(OP, "needs at least one block"))?
            .clone();
        if first.shape().is_empty() {
            return Err(Error::shape(
                OP,
                "blocks of at least one dim",
                first.shape(),
            ));
        }
        let mut flat = Vec::with_capacity(blocks.len());
        for b in blocks {
            first.same_rank(OP, &b)?;
            b.expect_dtype(OP, first.dtype())?;
            if b.shape().len() != first.shape().len() || b.shape()[1..] != first.shape()[1..] {
                return Err(Error::shape(OP, first.shape(), b.shape()));
            }
            flat.extend(b.blocks().iter().cloned());
        }
        if flat.len() == 1 {
            return Ok(flat.remove(0));
        }
        let mut shape = first.shape().to_vec();
        shape[0] = flat.iter().map(|b| b.shape()[0]).sum();
        Ok(LocalTensor::blocked(flat, shape))
    }

    /// This tensor in the row blocks a tensor of its shape in `dtype` needs
    /// (a copy), or itself when it is blocked already or `dtype` needs none:
    /// how a cast to a wider dtype finds room for its output.
    pub(crate) fn blocked_as(&self, op: &'static str, dtype: DType) -> Result<LocalTensor> {
        let bytes = dtype.storage_bytes(self.shape()) as u64;
        if self.is_blocked() {
            return Ok(self.clone());
        }
        let Some(rows) = row_layout(self.device(), op, (self.shape(), dtype), bytes)? else {
            return Ok(self.clone());
        };
        let rank = self.rank();
        let blocks = rows
            .into_iter()
            .map(|n| {
                let mut shape = self.shape().to_vec();
                shape[0] = n;
                rank.alloc(op, &shape, self.dtype())
            })
            .collect::<Result<Vec<_>>>()?;
        let out = LocalTensor::from_blocks(blocks)?;
        copy_region(self, 0, &out, 0, self.len())?;
        Ok(out)
    }

    /// Index of the first row of each block (`[0]` for a one-buffer tensor).
    pub fn block_row_starts(&self) -> Vec<usize> {
        let mut start = 0;
        self.blocks()
            .iter()
            .map(|b| {
                let s = start;
                start += b.shape().first().copied().unwrap_or(1);
                s
            })
            .collect()
    }
}
