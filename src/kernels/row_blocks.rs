//! Per-row kernels on a tensor stored in row blocks (logits past one
//! binding, `device/blocks.rs`): each block runs with the matching rows of
//! the per-row operands (`[rows]` tensors, narrowed), and the outputs are
//! joined along rows: `[rows]` outputs into one tensor, `[rows, cols]`
//! outputs as the blocks of a blocked one.

use super::slicing::{concat, narrow};
use crate::device::LocalTensor;
use crate::error::Result;

/// Run `f(block, per-row operands of its rows)` for each block of `z`.
pub(crate) fn by_row_blocks(
    z: &LocalTensor,
    per_row: &[Option<&LocalTensor>],
    mut f: impl FnMut(&LocalTensor, &[Option<&LocalTensor>]) -> Result<LocalTensor>,
) -> Result<LocalTensor> {
    let mut outs = Vec::with_capacity(z.blocks().len());
    for (block, start) in z.blocks().iter().zip(z.block_row_starts()) {
        let rows = block.shape()[0];
        let parts = per_row
            .iter()
            .map(|x| x.map(|x| narrow(x, 0, start, rows)).transpose())
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<Option<&LocalTensor>> = parts.iter().map(Option::as_ref).collect();
        outs.push(f(block, &refs)?);
    }
    if outs.first().is_some_and(|o| o.shape().len() == 1) {
        concat(&outs.iter().collect::<Vec<_>>(), 0)
    } else {
        LocalTensor::from_blocks(outs)
    }
}
