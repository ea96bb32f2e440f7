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
use crate::kernels::gemv::group::{Member, fits, gemv_group};

/// The shards of `act(x·wᵀ (+ bias))` (f32 x, bias and output) when every
/// rank's shards live on one device and the grouped kernel takes them;
/// `None` otherwise.
pub(super) fn shards(
    x: &DTensor,
    w: &DTensor,
    bias: Option<&DTensor>,
    act: Option<Activation>,
) -> Result<Option<Vec<LocalTensor>>> {
    const OP: &str = "DTensor::matmul";
    let ranks = x.shards().len();
    let operands: Vec<_> = (0..ranks)
        .map(|r| {
            let b = bias.map(|b| &b.shards()[r]);
            (&x.shards()[r], &w.shards()[r], b)
        })
        .collect();
    if x.dtype() != DType::F32 || !fits(&operands) {
        return Ok(None);
    }
    let outs = operands
        .iter()
        .map(|(a, b, _)| {
            a.rank()
                .alloc(OP, &[a.shape()[0], b.shape()[0]], DType::F32)
        })
        .collect::<Result<Vec<_>>>()?;
    let members: Vec<Member> = operands
        .iter()
        .zip(&outs)
        .map(|(&(a, b, bias), out)| Member { a, b, bias, out })
        .collect();
    gemv_group(&members, act)?;
    Ok(Some(outs))
}
