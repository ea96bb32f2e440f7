//! [`Pipeline::generate`]: decoding through the stages, each with the
//! key/value caches of its own layers. Per step the new tokens' hidden
//! states go stage to stage; the last stage chooses the next token (as
//! [`generate`](crate::nn::generate) does) and sends it to every other
//! stage, so every process returns the same tokens.

use super::{Pipeline, PipelineStage};
use crate::device::block_on;
use crate::error::{Error, Result};
use crate::nn::generate::{check_prompt, next_token};
use crate::nn::{KvCache, Sampling};
use crate::tensor::{DTensor, NoGradGuard, Placement};

/// A pipeline stage that decodes with a key/value cache per layer it holds.
pub trait StageDecoder: PipelineStage {
    /// Vocabulary size.
    fn vocab_size(&self) -> usize;
    /// Longest sequence the model takes.
    fn context(&self) -> usize;
    /// Caches this stage needs (one per layer it holds).
    fn num_caches(&self) -> usize;
    /// Decode `ids` (at least one: the tokens after the cached ones, one
    /// cache per layer this stage holds): the first stage embeds them, the
    /// others take the previous stage's output (`input`, `[ids.len(),
    /// hidden]`, `Replicate`). The last returns the logits of the last
    /// token (`[1, vocab]`, `Shard(1)`), the others their output.
    fn decode_stage(
        &self,
        input: Option<&DTensor>,
        ids: &[i32],
        caches: &mut [KvCache],
    ) -> Result<DTensor>;
}

impl Pipeline {
    /// Continue `prompt` by `max_new` tokens through `stages` (every stage
    /// this process drives, of one pipeline in one process), with a key/value
    /// cache: the prompt in one step, then one token per step. Gives the
    /// tokens the whole model's cached generation gives.
    pub fn generate(
        &self,
        stages: &[&dyn StageDecoder],
        prompt: &[i32],
        max_new: usize,
        sampling: Sampling,
    ) -> Result<Vec<i32>> {
        block_on(
            "Pipeline::generate",
            self.generate_async(stages, prompt, max_new, sampling),
        )
    }

    /// [`Pipeline::generate`] as a future.
    pub async fn generate_async(
        &self,
        stages: &[&dyn StageDecoder],
        prompt: &[i32],
        max_new: usize,
        sampling: Sampling,
    ) -> Result<Vec<i32>> {
        const OP: &str = "Pipeline::generate";
        let _off = NoGradGuard::new();
        let Some(first) = stages.first() else {
            return Err(Error::invalid(OP, "give the stages this process drives"));
        };
        let vocab = first.vocab_size();
        let mut sampler = check_prompt((vocab, first.context()), prompt, max_new, sampling)?;
        let mut order: Vec<usize> = (0..stages.len()).collect();
        for &i in &order {
            let s = stages[i];
            if s.stage() != (self.stage_of(s.stage_mesh())?, self.stages()) {
                return Err(Error::invalid(
                    OP,
                    "a stage is not where it was built to be",
                ));
            }
        }
        order.sort_by_key(|&i| stages[i].stage().0);
        let mut caches: Vec<Vec<KvCache>> = stages
            .iter()
            .map(|s| vec![KvCache::default(); s.num_caches()])
            .collect();
        let last = self.stages() - 1;
        self.pipe.discard_queued();
        let (mut seq, mut step) = (prompt.to_vec(), prompt.to_vec());
        while seq.len() - prompt.len() < max_new {
            let mut chosen: Option<i32> = None;
            for &i in &order {
                let (s, mesh) = (stages[i].stage().0, stages[i].stage_mesh());
                let input = match s {
                    0 => None,
                    _ => {
                        let shape = stages[i].boundary(step.len()).0;
                        Some(self.pipe.recv(mesh, s - 1, &shape, Placement::Replicate)?)
                    }
                };
                let out = stages[i].decode_stage(input.as_ref(), &step, &mut caches[i])?;
                let rows = if s < last { step.len() } else { 1 };
                if out.shape().first() != Some(&rows) {
                    return Err(Error::invalid(
                        OP,
                        format!("stage {s} decoded {:?}, not {rows} rows", out.shape()),
                    ));
                }
                if s < last {
                    self.pipe.send(&out, s + 1)?;
                    continue;
                }
                // One choice per step: another replica's last stage here
                // (identical weights) takes it, so a sampler draws once.
                let next = match chosen {
                    Some(c) => c,
                    None => next_token(vocab, &mut sampler, &out, &seq).await?,
                };
                for other in 0..last {
                    self.pipe.send_ids(mesh, &[next], other)?;
                }
                chosen = Some(next);
            }
            for &i in order.iter().filter(|&&i| stages[i].stage().0 < last) {
                let got = self.pipe.recv_ids(stages[i].stage_mesh(), last, 1)?[0];
                if chosen.is_some_and(|c| c != got) {
                    return Err(Error::invalid(OP, "the stages chose different tokens"));
                }
                chosen = Some(got);
            }
            let next = chosen.ok_or_else(|| Error::invalid(OP, "no stage chose a token"))?;
            seq.push(next);
            step = vec![next];
        }
        self.pipe.wait()?;
        Ok(seq[prompt.len()..].to_vec())
    }
}
