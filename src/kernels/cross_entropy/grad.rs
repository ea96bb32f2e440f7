//! The gradient of the loss w.r.t. one shard's logits (`grad` and `grad4`
//! in `shaders/cross_entropy.wgsl`).

use super::launch::{logits_shape, row_operand, run};
use super::options::{CrossEntropyOptions, Params, VocabShard};
use crate::device::LocalTensor;
use crate::element::DType;
use crate::error::Result;

/// `[T, Vr]` gradient of the loss w.r.t. this shard's logits:
/// `row_scale[t] · (exp(z − m)/S − (1 − α)·onehot(t − start) − α/K)` on valid
/// columns, 0 on padding columns and on rows whose target is `ignore_index`
/// (whatever their `row_scale`). `max` and `sum_exp` are the global pieces;
/// `row_scale` (`[T]`) is the incoming per-row loss gradient, e.g. `1/N` for a
/// mean over N counted rows.
pub fn ce_grad(
    z: &LocalTensor,
    max: &LocalTensor,
    sum_exp: &LocalTensor,
    targets: &LocalTensor,
    row_scale: &LocalTensor,
    shard: VocabShard,
    opts: &CrossEntropyOptions,
) -> Result<LocalTensor> {
    const OP: &str = "ce_grad";
    let (t, v) = logits_shape(OP, z)?;
    row_operand(OP, z, max, t, DType::F32)?;
    row_operand(OP, z, sum_exp, t, DType::F32)?;
    row_operand(OP, z, targets, t, DType::I32)?;
    row_operand(OP, z, row_scale, t, DType::F32)?;
    let p = Params::new(OP, t, v, shard, opts)?;
    let ins = [
        Some(z),
        Some(max),
        Some(sum_exp),
        Some(row_scale),
        None,
        Some(targets),
    ];
    // Four elements per invocation, from rows of 4 columns or more (blocked
    // logits: whole vec4s a row, as a block's invocations are per row).
    let (entry, invocations) = if v >= 4 && (v.is_multiple_of(4) || !z.is_blocked()) {
        ("grad4", (t * v).div_ceil(4))
    } else {
        ("grad", t * v)
    };
    run(
        entry,
        OP,
        &p,
        ins,
        &[t, v],
        invocations as u64,
        z.device().grid_workgroup().into(),
    )
}
