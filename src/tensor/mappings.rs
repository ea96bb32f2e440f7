//! The conjugate mappings where parallel layers get their backward right
//! (Megatron's `mappings.py`). Each is the identity when P = 1.
//!
//! | mapping | forward | backward |
//! |---|---|---|
//! | `CopyToParallel` (f) | identity (input replicated) | all-reduce(sum) |
//! | `ReduceFromParallel` (g) | all-reduce(sum) | identity |
//! | `ScatterToParallel(d)` | keep own slice of d | all-gather along d |
//! | `GatherFromParallel(d)` | all-gather along d | keep own slice |
//! | `ReduceScatterToParallel(d)` | reduce-scatter along d | all-gather along d |
//! | `AllGatherToParallel(d)` (sequence parallel) | all-gather along d | reduce-scatter along d |
//!
//! The backward of g is the identity, not an all-reduce: getting that wrong
//! multiplies gradients by P.

use super::autograd::record;
use super::dtensor::DTensor;
use super::placement::Placement;
use crate::element::ReduceOp;
use crate::error::{Error, Result};

/// One of the conjugate forward/backward pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mapping {
    /// f: forward identity on a replicated input; backward all-reduce(sum).
    CopyToParallel,
    /// g: forward all-reduce(sum) of a partial sum; backward identity.
    ReduceFromParallel,
    /// Forward keeps the local slice along the dim; backward all-gathers.
    ScatterToParallel(usize),
    /// Forward all-gathers along the dim; backward keeps the local slice.
    GatherFromParallel(usize),
    /// Forward reduce-scatters along the dim; backward all-gathers.
    ReduceScatterToParallel(usize),
    /// Forward all-gathers along the dim; backward reduce-scatters (sequence parallel).
    AllGatherToParallel(usize),
}

const SUM: Placement = Placement::Partial(ReduceOp::Sum);

fn expect(op: &'static str, x: &DTensor, want: Placement) -> Result<()> {
    // With one rank every placement holds the same bytes, so accept any.
    if x.placement() == want || x.mesh().size() == 1 {
        return Ok(());
    }
    Err(Error::invalid(
        op,
        format!("input must be placed {want:?}, got {:?}", x.placement()),
    ))
}

/// Relabel (no data movement) when P = 1, else redistribute.
fn to(x: &DTensor, placement: Placement) -> Result<DTensor> {
    if x.mesh().size() == 1 {
        // Serial mode: every mapping is the identity, and no collective is counted.
        return Ok(x.with_shards(x.shards().to_vec(), x.shape().to_vec(), placement));
    }
    x.move_to(placement, 1)
}

impl Mapping {
    /// Forward: the input's required placement and what it becomes. On the
    /// tape, its VJP is [`Mapping::backward`] (the conjugate collective).
    pub fn forward(&self, x: &DTensor) -> Result<DTensor> {
        let m = *self;
        record("Mapping::forward", &[x], || {
            let y = m.forward_untaped(x)?;
            Ok((y, move |dy: &DTensor| Ok(vec![Some(m.backward(dy)?)])))
        })
    }

    fn forward_untaped(&self, x: &DTensor) -> Result<DTensor> {
        const OP: &str = "Mapping::forward";
        match *self {
            Mapping::CopyToParallel => {
                expect(OP, x, Placement::Replicate)?;
                Ok(x.clone())
            }
            Mapping::ReduceFromParallel => {
                expect(OP, x, SUM)?;
                to(x, Placement::Replicate)
            }
            Mapping::ScatterToParallel(d) => {
                expect(OP, x, Placement::Replicate)?;
                to(x, Placement::Shard(d))
            }
            Mapping::GatherFromParallel(d) | Mapping::AllGatherToParallel(d) => {
                expect(OP, x, Placement::Shard(d))?;
                to(x, Placement::Replicate)
            }
            Mapping::ReduceScatterToParallel(d) => {
                expect(OP, x, SUM)?;
                to(x, Placement::Shard(d))
            }
        }
    }

    /// Backward: takes the gradient of the forward's output, returns the
    /// gradient of its input (not recorded: the tape calls it).
    pub fn backward(&self, dy: &DTensor) -> Result<DTensor> {
        const OP: &str = "Mapping::backward";
        match *self {
            Mapping::CopyToParallel => {
                expect(OP, dy, SUM)?;
                to(dy, Placement::Replicate)
            }
            Mapping::ReduceFromParallel => {
                expect(OP, dy, Placement::Replicate)?;
                Ok(dy.clone())
            }
            Mapping::ScatterToParallel(d) | Mapping::ReduceScatterToParallel(d) => {
                expect(OP, dy, Placement::Shard(d))?;
                to(dy, Placement::Replicate)
            }
            Mapping::GatherFromParallel(d) => {
                expect(OP, dy, Placement::Replicate)?;
                to(dy, Placement::Shard(d))
            }
            Mapping::AllGatherToParallel(d) => {
                expect(OP, dy, SUM)?;
                to(dy, Placement::Shard(d))
            }
        }
    }
}
