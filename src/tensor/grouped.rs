//! A sharded product on ranks that share one device, recorded as grouped
//! small-M dispatches (`kernels::gemv::group`, four ranks a dispatch)
//! rather than one dispatch per rank: decoding on a CPU adapter paid a
//! fixed cost per dispatch that grew with the ranks. Each rank's shard is
//! the bits its own product gives; anything the grouped kernel cannot take
//! goes rank by rank.

use super::dtensor::DTensor;
use crate::device::LocalTensor;
use crate::element::DType;
use crate::error::Result;
use crate::kernels::Activation;
use crate::kernels::gemv::group::{Operands, fits, gemv_group};

/// The shards of `act(x·wᵀ (+ bias)) (⊙ up)` (f32 x, bias, up and output)
/// when every rank's shards live on one device and the grouped kernel
/// takes them; `None` otherwise.
pub(super) fn shards(
    x: &DTensor,
    w: &DTensor,
    (bias, up): (Option<&DTensor>, Option<&DTensor>),
    act: Option<Activation>,
) -> Result<Option<Vec<LocalTensor>>> {
    const OP: &str = "DTensor::matmul";
    let ranks = x.shards().len();
    let operands: Vec<Operands> = (0..ranks)
        .map(|r| Operands {
            a: &x.shards()[r],
            b: &w.shards()[r],
            bias: bias.map(|b| &b.shards()[r]),
            mul: up.map(|u| &u.shards()[r]),
        })
        .collect();
    if x.dtype() != DType::F32 || !fits(&operands) {
        return Ok(None);
    }
    let outs = operands
        .iter()
        .map(|o| {
            o.a.rank()
                .alloc(OP, &[o.a.shape()[0], o.b.shape()[0]], DType::F32)
        })
        .collect::<Result<Vec<_>>>()?;
    let out_refs: Vec<&LocalTensor> = outs.iter().collect();
    gemv_group(&operands, &out_refs, act)?;
    Ok(Some(outs))
}
