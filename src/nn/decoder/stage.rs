//! A [`Decoder`] as a pipeline stage: the same type over its range of
//! layers ([`Decoder::stage`]). The first stage embeds, every stage runs its
//! blocks, the last norms, projects and takes the loss. A tied table lives
//! on the first and the last stage; [`Pipeline::forward_backward`] sums the
//! two copies' gradients, so they stay equal under any optimiser that
//! updates them alike.
//!
//! [`Pipeline::forward_backward`]: crate::nn::Pipeline::forward_backward

use super::forward::Over;
use super::model::Decoder;
use crate::device::Mesh;
use crate::error::{Error, Result};
use crate::nn::kv_cache::KvCache;
use crate::nn::pipeline::{PipelineStage, StageDecoder};
use crate::tensor::{DTensor, Placement};

impl PipelineStage for Decoder {
    fn stage_mesh(&self) -> &Mesh {
        &self.mesh
    }

    fn stage(&self) -> (usize, usize) {
        self.stage
    }

    fn boundary(&self, tokens: usize) -> (Vec<usize>, Placement) {
        let placement = match self.options.sequence_parallel {
            true => Placement::Shard(0),
            false => Placement::Replicate,
        };
        (vec![tokens, self.spec.hidden], placement)
    }

    fn forward_stage(
        &self,
        input: Option<&DTensor>,
        ids: &[i32],
        targets: &[i32],
        seq: usize,
    ) -> Result<DTensor> {
        if ids.len() != targets.len() {
            return Err(Error::shape(
                "Decoder::forward_stage",
                [ids.len()],
                [targets.len()],
            ));
        }
        let y = self.body(input, ids, Over::Sequences(seq))?;
        match self.norm {
            Some(_) => self.loss.forward(&y, targets),
            None => Ok(y),
        }
    }

    fn shared_parameters(&self) -> Vec<(String, usize)> {
        let (s, n) = self.stage;
        let name = format!("{}.weight", self.spec.names.embed);
        match (s == 0, s + 1 == n, self.spec.tied) {
            (true, false, true) => vec![(name, n - 1)],
            (false, true, true) => vec![(name, 0)],
            _ => Vec::new(),
        }
    }
}

impl StageDecoder for Decoder {
    fn vocab_size(&self) -> usize {
        self.spec.vocab
    }

    fn context(&self) -> usize {
        self.spec.context
    }

    fn num_caches(&self) -> usize {
        self.blocks.len()
    }

    fn decode_stage(
        &self,
        input: Option<&DTensor>,
        ids: &[i32],
        caches: &mut [KvCache],
    ) -> Result<DTensor> {
        self.body(input, ids, Over::Cached(caches))
    }
}
