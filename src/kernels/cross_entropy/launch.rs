//! What every cross-entropy entry shares: the source and bindings, the
//! checks of the logits and per-row operands, and recording one entry
//! (block by block where the logits are past one binding).

use super::options::Params;
use crate::device::{Access, Dispatch, KernelSpec, LocalTensor};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels::loops::check_walk;
use crate::kernels::row_blocks::by_row_blocks;

/// `grid_source!("cross_entropy.wgsl")` spelled out: the macro's paths are
/// relative to `kernels/`, one level above this file.
const SOURCE: &str = concat!(
    include_str!("../../../shaders/grid.wgsl"),
    include_str!("../../../shaders/cross_entropy.wgsl")
);
/// z, max, sum-exp, aux, sum-logits, targets, out: one layout for every entry.
const BINDINGS: &[Access] = &[
    Access::Read,
    Access::Read,
    Access::Read,
    Access::Read,
    Access::Read,
    Access::Read,
    Access::ReadWrite,
];
/// Per-row kernels: one invocation per row (see the shader).
pub(super) const ROW_WORKGROUP: u64 = 64;

fn spec(entry: &'static str) -> KernelSpec {
    let spec = KernelSpec::new("cross_entropy", SOURCE, BINDINGS, entry);
    // grad4 may write the last vec4's pad.
    if entry == "grad4" {
        spec.in_vec4s()
    } else {
        spec
    }
}

/// `[T, Vr]` of an F32 logits shard.
pub(super) fn logits_shape(op: &'static str, z: &LocalTensor) -> Result<(usize, usize)> {
    z.expect_dtype(op, DType::F32)?;
    match *z.shape() {
        [t, v] => Ok((t, v)),
        _ => Err(Error::shape(op, "2-D logits [T, Vr]", z.shape())),
    }
}

/// Check a per-row operand: `[rows]` of `dtype`, on `anchor`'s rank.
pub(super) fn row_operand(
    op: &'static str,
    anchor: &LocalTensor,
    x: &LocalTensor,
    rows: usize,
    dtype: DType,
) -> Result<()> {
    x.expect_dtype(op, dtype)?;
    anchor.same_rank(op, x)?;
    if x.shape() != [rows] {
        return Err(Error::shape(op, [rows], x.shape()));
    }
    Ok(())
}

/// Record one entry; `inputs` fill bindings 1..=6 (None → any input, unused).
pub(super) fn run(
    entry: &'static str,
    op: &'static str,
    params: &Params,
    inputs: [Option<&LocalTensor>; 6],
    out_shape: &[usize],
    elements: u64,
    workgroup: u64,
) -> Result<LocalTensor> {
    // The row reductions walk a row's valid columns in one invocation.
    if let Some(z) = inputs[0].filter(|_| matches!(entry, "max_rows" | "sum_exp_rows" | "sum_rows"))
    {
        check_walk(
            op,
            z.device(),
            "a vocab shard of 65535 columns or more",
            params.valid_cols as usize,
            "shard the vocabulary over more ranks, or use lavapipe (Vulkan) from Mesa 24 or newer",
        )?;
    }
    // Logits past one binding are token-row blocks: one dispatch per block.
    if let Some(z) = inputs[0].filter(|z| z.is_blocked()) {
        let per_row_elements = elements / out_shape[0] as u64;
        return by_row_blocks(z, &inputs[1..], |block, rows| {
            let n = block.shape()[0];
            let mut ins = [Some(block), None, None, None, None, None];
            ins[1..].copy_from_slice(rows);
            let (mut shape, p) = (
                out_shape.to_vec(),
                Params {
                    rows: n as u32,
                    ..*params
                },
            );
            shape[0] = n;
            run(
                entry,
                op,
                &p,
                ins,
                &shape,
                per_row_elements * n as u64,
                workgroup,
            )
        });
    }
    let any = inputs
        .iter()
        .flatten()
        .next()
        .copied()
        .expect("every entry has an input");
    let out = any.rank().alloc(op, out_shape, DType::F32)?;
    let b = inputs.map(|x| x.unwrap_or(any));
    Dispatch {
        spec: &spec(entry),
        params: bytemuck::bytes_of(params),
        buffers: &[b[0], b[1], b[2], b[3], b[4], b[5], &out],
        workgroups: elements.div_ceil(workgroup),
    }
    .record(any.device())?;
    Ok(out)
}
