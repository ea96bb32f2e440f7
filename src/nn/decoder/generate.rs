//! Generation from a [`Decoder`] of any family: the loop is
//! [`nn::generate`](crate::nn::generate), stopping after an eos id of the
//! model's [`GenerationConfig`] (`generation_config.json`, else
//! `config.json`'s `eos_token_id`).

use super::model::Decoder;
use crate::device::block_on;
use crate::error::Result;
use crate::nn::generate::{CausalDecoder, generate, generate_uncached};
use crate::nn::generation_config::GenerationConfig;
use crate::nn::kv_cache::KvCache;
use crate::nn::sampling::Sampling;
use crate::tensor::DTensor;

impl CausalDecoder for Decoder {
    fn vocab_size(&self) -> usize {
        self.spec.vocab
    }

    fn context(&self) -> usize {
        self.spec.context
    }

    fn num_caches(&self) -> usize {
        self.blocks.len()
    }

    fn decode_logits(&self, ids: &[i32], caches: &mut [KvCache]) -> Result<DTensor> {
        self.decode_step(ids, caches)
    }

    fn sequence_logits(&self, ids: &[i32], seq: usize) -> Result<DTensor> {
        self.logits(ids, seq)
    }
}

impl Decoder {
    /// The generation defaults (eos ids, sampling) read with the model.
    pub fn generation_config(&self) -> &GenerationConfig {
        &self.generation
    }

    /// The generation defaults, to change (e.g. the eos ids a model built
    /// from a config stops at; `save_pretrained` writes them).
    pub fn generation_config_mut(&mut self) -> &mut GenerationConfig {
        &mut self.generation
    }

    /// The ids that end generation.
    pub fn eos_token_ids(&self) -> &[i32] {
        &self.generation.eos_token_ids
    }

    /// Continue `prompt` by up to `max_new` tokens with a key/value cache
    /// (the prompt in one step, then one token per step; each rank caches
    /// only its own heads), stopping after an eos id; returns the new
    /// tokens. Per token only the last position is normed and multiplied
    /// by the head, and the choice runs on each rank's vocab shard, so only
    /// a few (value, id) pairs per rank reach the host.
    pub fn generate(&self, prompt: &[i32], max_new: usize, sampling: Sampling) -> Result<Vec<i32>> {
        self.generate_with(prompt, max_new, sampling, |_| Ok(()))
    }

    /// [`Decoder::generate`] calling `on_token` with each token as soon as
    /// it is chosen (to stream text); an error from it stops generation.
    pub fn generate_with(
        &self,
        prompt: &[i32],
        max_new: usize,
        sampling: Sampling,
        on_token: impl FnMut(i32) -> Result<()>,
    ) -> Result<Vec<i32>> {
        block_on(
            "Decoder::generate",
            self.generate_with_async(prompt, max_new, sampling, on_token),
        )
    }

    /// [`Decoder::generate`] as a future (a browser page awaits each
    /// token's candidates).
    pub async fn generate_async(
        &self,
        prompt: &[i32],
        max_new: usize,
        sampling: Sampling,
    ) -> Result<Vec<i32>> {
        self.generate_with_async(prompt, max_new, sampling, |_| Ok(()))
            .await
    }

    /// [`Decoder::generate_with`] as a future.
    pub async fn generate_with_async(
        &self,
        prompt: &[i32],
        max_new: usize,
        sampling: Sampling,
        on_token: impl FnMut(i32) -> Result<()>,
    ) -> Result<Vec<i32>> {
        let stop = self.generation.eos_token_ids.clone();
        generate(self, prompt, max_new, sampling, &stop, on_token).await
    }

    /// [`Decoder::generate`] recomputing the whole sequence per token (the
    /// reference the cached path equals).
    pub fn generate_uncached(
        &self,
        prompt: &[i32],
        max_new: usize,
        sampling: Sampling,
    ) -> Result<Vec<i32>> {
        block_on(
            "Decoder::generate_uncached",
            self.generate_uncached_async(prompt, max_new, sampling),
        )
    }

    /// [`Decoder::generate_uncached`] as a future.
    pub async fn generate_uncached_async(
        &self,
        prompt: &[i32],
        max_new: usize,
        sampling: Sampling,
    ) -> Result<Vec<i32>> {
        let stop = self.generation.eos_token_ids.clone();
        generate_uncached(self, prompt, max_new, sampling, &stop).await
    }
}
