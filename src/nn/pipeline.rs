//! [`Pipeline`]: a model's layers split into contiguous stages along a
//! mesh's pipeline axis, trained on micro-batches in the 1F1B order.
//!
//! Each stage is a model of its own ([`PipelineStage`], e.g.
//! [`Decoder::stage`](crate::nn::Decoder::stage)) on a group of the other axes;
//! activations go forward and their gradients back through a [`Pipe`], as
//! tape operations. [`Pipeline::forward_backward`] splits each replica's
//! batch into micro-batches, runs every stage this process drives in the
//! one-forward-one-backward order (a stage holds at most `stages − s`
//! micro-batches' activations), scales each micro-batch's loss by
//! 1/micro-batches (so the gradients are those of the batch's mean loss),
//! and finally sums the gradients of parameters two stages share (the tied
//! embedding of the first and the last). Data parallelism and ZeRO then
//! work per stage, as without a pipeline. [`Pipeline::generate`] decodes
//! through the stages with each stage's key/value caches
//! ([`StageDecoder`]); [`Pipeline::save_stage`] writes one checkpoint file
//! per stage.

mod checkpoint;
mod decode;
mod run;

use std::ops::Range;

pub use decode::StageDecoder;

use super::Params;
use crate::device::Mesh;
use crate::error::{Error, Result};
use crate::tensor::{DTensor, Pipe, Placement};

/// One stage of a model split along a pipeline ([`Pipeline`]).
pub trait PipelineStage: Params {
    /// The group this stage runs on.
    fn stage_mesh(&self) -> &Mesh;

    /// This stage's index and the number of stages.
    fn stage(&self) -> (usize, usize);

    /// What passes between stages for `tokens` tokens: its shape and placement.
    fn boundary(&self, tokens: usize) -> (Vec<usize>, Placement);

    /// Forward of this stage. The first stage embeds `ids` (`input` is
    /// `None`); the others take the previous stage's output. The last
    /// returns the mean loss of its tokens against `targets` (`[1]`), the
    /// others their output, shaped as [`PipelineStage::boundary`].
    fn forward_stage(
        &self,
        input: Option<&DTensor>,
        ids: &[i32],
        targets: &[i32],
        seq: usize,
    ) -> Result<DTensor>;

    /// Parameters this stage holds together with another stage (a tied
    /// embedding): name and the other stage. Their gradients are summed.
    fn shared_parameters(&self) -> Vec<(String, usize)> {
        Vec::new()
    }
}

/// One unit of a stage's schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// Forward of micro-batch `n`.
    Forward(usize),
    /// Backward of micro-batch `n`.
    Backward(usize),
}

/// Splits models into stages along an axis and runs them (module doc).
#[derive(Clone, Debug)]
pub struct Pipeline {
    pipe: Pipe,
    micro_batches: usize,
}

impl Pipeline {
    /// A pipeline along axis `axis` of `mesh`, each replica's batch cut
    /// into `micro_batches` micro-batches.
    pub fn new(mesh: &Mesh, axis: &str, micro_batches: usize) -> Result<Pipeline> {
        if micro_batches == 0 {
            return Err(Error::invalid(
                "Pipeline::new",
                "use at least one micro-batch",
            ));
        }
        Ok(Pipeline {
            pipe: Pipe::new(mesh, axis)?,
            micro_batches,
        })
    }

    /// The number of stages.
    pub fn stages(&self) -> usize {
        self.pipe.stages()
    }

    /// Micro-batches per step.
    pub fn micro_batches(&self) -> usize {
        self.micro_batches
    }

    /// What carries tensors between the stages.
    pub fn pipe(&self) -> &Pipe {
        &self.pipe
    }

    /// The stage a group (a stage's mesh) belongs to.
    pub fn stage_of(&self, group: &Mesh) -> Result<usize> {
        self.pipe.stage_of(group)
    }

    /// The layers (of `layers`) stage `stage` holds: contiguous, the first
    /// `layers mod stages` stages one more. An error when some stage would
    /// hold none.
    pub fn layers(&self, layers: usize, stage: usize) -> Result<Range<usize>> {
        const OP: &str = "Pipeline::layers";
        let s = self.stages();
        if stage >= s {
            return Err(Error::OutOfRange {
                op: OP,
                what: "stage",
                value: stage as i64,
                bound: s,
            });
        }
        if layers < s {
            return Err(Error::invalid(
                OP,
                format!(
                    "{layers} layers cannot be split into {s} stages of at least one layer each; \
                     use at most {layers} stages along {:?}",
                    self.pipe.axis()
                ),
            ));
        }
        Ok(crate::shard::split_range(layers, s, stage))
    }

    /// Stage `stage`'s work in the 1F1B order: `stages − stage − 1`
    /// warm-up forwards, then alternately one forward and one backward,
    /// then the remaining backwards.
    pub fn schedule(&self, stage: usize) -> Vec<Work> {
        let m = self.micro_batches;
        let warm = (self.stages().saturating_sub(stage + 1)).min(m);
        let mut out: Vec<Work> = (0..warm).map(Work::Forward).collect();
        for i in 0..m - warm {
            out.push(Work::Forward(warm + i));
            out.push(Work::Backward(i));
        }
        out.extend((m - warm..m).map(Work::Backward));
        out
    }
}
