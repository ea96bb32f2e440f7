//! [`Gpt`] as a [`CausalDecoder`]: cached decoding one row at a time, and
//! its `generate` methods (the loop itself is [`nn::generate`](crate::nn::generate)).

use super::{Gpt, GptConfig, TransformerBlock};
use crate::device::block_on;
use crate::error::Result;
use crate::nn::{
    CausalDecoder, Dropout, Embedding, KvCache, Sampling, VocabParallelEmbedding, generate,
    generate_uncached,
};
use crate::tensor::DTensor;

impl CausalDecoder for Gpt {
    fn vocab_size(&self) -> usize {
        self.config().vocab
    }

    fn context(&self) -> usize {
        self.config().n_ctx
    }

    fn num_caches(&self) -> usize {
        self.h.len()
    }

    fn decode_logits(&self, ids: &[i32], caches: &mut [KvCache]) -> Result<DTensor> {
        let past = caches.first().map_or(0, KvCache::len);
        let x = decode_embed(&self.wte, &self.wpe, &self.drop, self.config(), ids, past)?;
        let x = decode_blocks(&self.h, x, caches)?;
        // Only the last position's next token is wanted: norm and head one row.
        let rows = x.shape()[0];
        let x = self.ln_f.forward(&x.narrow(0, rows - 1, 1)?)?;
        self.head(&x)
    }

    fn sequence_logits(&self, ids: &[i32], seq: usize) -> Result<DTensor> {
        self.logits(ids, seq)
    }
}

impl Gpt {
    /// Continue `prompt` by `max_new` tokens with a key/value cache: the
    /// prompt in one step, then one token per step; each rank caches only
    /// its own heads. Gives the same tokens as [`Gpt::generate_uncached`].
    pub fn generate(
        &mut self,
        prompt: &[i32],
        max_new: usize,
        sampling: Sampling,
    ) -> Result<Vec<i32>> {
        self.generate_with(prompt, max_new, sampling, |_| Ok(()))
    }

    /// [`Gpt::generate`] as a future (a browser page awaits each token's
    /// candidates; nothing else leaves the GPU).
    pub async fn generate_async(
        &mut self,
        prompt: &[i32],
        max_new: usize,
        sampling: Sampling,
    ) -> Result<Vec<i32>> {
        self.generate_with_async(prompt, max_new, sampling, |_| Ok(()))
            .await
    }

    /// [`Gpt::generate`] calling `on_token` with each token as soon as it
    /// is chosen (to stream text); an error from it stops generation and is
    /// returned. Per token only the last position is normed and multiplied
    /// by the head, and the choice runs on each rank's vocab shard on the
    /// device (the penalty, [`crate::kernels::top_k`], the normaliser), so only k
    /// (value, id) pairs per rank reach the host (the whole last row where
    /// k > [`crate::kernels::topk::TOP_K_MAX`] or top-p needs more).
    pub fn generate_with(
        &mut self,
        prompt: &[i32],
        max_new: usize,
        sampling: Sampling,
        on_token: impl FnMut(i32) -> Result<()>,
    ) -> Result<Vec<i32>> {
        block_on(
            "Gpt::generate",
            self.generate_with_async(prompt, max_new, sampling, on_token),
        )
    }

    /// [`Gpt::generate_with`] as a future.
    pub async fn generate_with_async(
        &mut self,
        prompt: &[i32],
        max_new: usize,
        sampling: Sampling,
        on_token: impl FnMut(i32) -> Result<()>,
    ) -> Result<Vec<i32>> {
        generate(&*self, prompt, max_new, sampling, &[], on_token).await
    }

    /// Continue `prompt` by `max_new` tokens, re-running the whole sequence
    /// for every token (no cache): the reference the cached
    /// [`Gpt::generate`] must match.
    pub fn generate_uncached(
        &mut self,
        prompt: &[i32],
        max_new: usize,
        sampling: Sampling,
    ) -> Result<Vec<i32>> {
        block_on(
            "Gpt::generate_uncached",
            self.generate_uncached_async(prompt, max_new, sampling),
        )
    }

    /// [`Gpt::generate_uncached`] as a future.
    pub async fn generate_uncached_async(
        &mut self,
        prompt: &[i32],
        max_new: usize,
        sampling: Sampling,
    ) -> Result<Vec<i32>> {
        generate_uncached(&*self, prompt, max_new, sampling, &[]).await
    }
}

/// The embeddings of `ids`, the tokens after `past` cached ones.
pub(super) fn decode_embed(
    wte: &VocabParallelEmbedding,
    wpe: &Embedding,
    drop: &Dropout,
    config: &GptConfig,
    ids: &[i32],
    past: usize,
) -> Result<DTensor> {
    let positions: Vec<i32> = (past..past + ids.len()).map(|p| p as i32).collect();
    let x = wte.forward(ids)?.add(&wpe.forward(&positions)?)?;
    drop.forward(&x.cast(config.dtype)?)
}

/// `x` through `blocks`, each with its cache.
pub(super) fn decode_blocks(
    blocks: &[TransformerBlock],
    mut x: DTensor,
    caches: &mut [KvCache],
) -> Result<DTensor> {
    for (block, cache) in blocks.iter().zip(caches.iter_mut()) {
        x = block.decode(&x, cache)?;
    }
    Ok(x)
}
