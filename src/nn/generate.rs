//! Text generation, written once for every model family through
//! [`CausalDecoder`] ([`Gpt`], [`Llama`](crate::models::Llama)): greedy or
//! seeded temperature / top-k sampling, decoding incrementally with a
//! key/value cache per layer, so a decoding step communicates only the
//! row-parallel all-reduces (two per block) and the embedding's. Per token
//! only what that token needs runs: the last position alone is normed and
//! multiplied by the head, the one-row GEMMs read the weights as stored
//! (`kernels::gemv`), and the greedy / top-k choice is reduced on each
//! rank's vocab shard on the device ([`vocab_top_k`]), so only k (value,
//! id) pairs per rank reach the host. The host sampler stays as the
//! reference ([`Gpt::generate_uncached`]) and both give the same tokens.

use super::attention::KvCache;
use super::gpt::Gpt;
use super::params::Params;
use crate::device::block_on;
use crate::error::{Error, Result};
use crate::kernels;
use crate::tensor::{DTensor, NoGradGuard, vocab_top_k_async};

/// How the next token is chosen from the last position's logits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sampling {
    /// The most likely token (ties: the lowest id).
    Greedy,
    /// Sample from the `k` most likely tokens after dividing the logits by
    /// `temperature`; `seed` makes the run repeatable.
    TopK {
        /// Candidates kept.
        k: usize,
        /// Logits are divided by this (> 0).
        temperature: f32,
        /// Seed of the sampler's random stream.
        seed: u64,
    },
}

/// Picks tokens according to a [`Sampling`], with its own random stream.
struct Sampler {
    sampling: Sampling,
    state: u64,
}

impl Sampler {
    fn new(sampling: Sampling) -> Result<Sampler> {
        const OP: &str = "Gpt::generate";
        let state = match sampling {
            Sampling::Greedy => 0,
            Sampling::TopK {
                k,
                temperature,
                seed,
            } => {
                if k == 0 || !(temperature > 0.0 && temperature.is_finite()) {
                    return Err(Error::invalid(
                        OP,
                        format!(
                            "top-k sampling needs k ≥ 1 and a temperature > 0, got k {k}, temperature {temperature}"
                        ),
                    ));
                }
                seed
            }
        };
        Ok(Sampler { sampling, state })
    }

    /// A uniform draw in [0, 1) (SplitMix64).
    fn uniform(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Candidates a choice needs: 1 (greedy) or k.
    fn width(&self) -> usize {
        match self.sampling {
            Sampling::Greedy => 1,
            Sampling::TopK { k, .. } => k,
        }
    }

    /// The next token from the best candidates (value, id), best first
    /// (`f32::total_cmp` descending, ties by the lower id): the first
    /// `width()` of the vocab, or all of it if smaller.
    fn choose(&mut self, top: &[(f32, usize)]) -> i32 {
        match self.sampling {
            Sampling::Greedy => top[0].1 as i32,
            Sampling::TopK { temperature, .. } => {
                let max = top[0].0 as f64;
                let weights: Vec<f64> = top
                    .iter()
                    .map(|&(v, _)| ((v as f64 - max) / temperature as f64).exp())
                    .collect();
                let mut u = self.uniform() * weights.iter().sum::<f64>();
                for (&(_, i), w) in top.iter().zip(&weights) {
                    if u < *w {
                        return i as i32;
                    }
                    u -= w;
                }
                top[top.len() - 1].1 as i32
            }
        }
    }

    /// The next token from one position's logits, all on the host: the
    /// reference the on-device choice ([`Gpt::generate`]) must equal.
    fn pick(&mut self, logits: &[f32]) -> i32 {
        let mut order: Vec<usize> = (0..logits.len()).collect();
        // Most likely first; ties by id, so greedy is deterministic.
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        let top: Vec<(f32, usize)> = order
            .iter()
            .take(self.width())
            .map(|&i| (logits[i], i))
            .collect();
        self.choose(&top)
    }
}

/// What [`generate`] needs of a model: its sizes, cached decoding and
/// whole-sequence logits. Every model family implements it.
pub trait CausalDecoder: Params {
    /// Vocabulary size.
    fn vocab_size(&self) -> usize;
    /// Longest sequence the model takes.
    fn context(&self) -> usize;
    /// Key/value caches a decoding run needs (one per layer).
    fn num_caches(&self) -> usize;
    /// Run `ids` (the tokens after the cached ones) and return the logits
    /// of the last one, `[1, vocab]`, `Shard(1)`.
    fn decode_logits(&self, ids: &[i32], caches: &mut [KvCache]) -> Result<DTensor>;
    /// Logits of every position of `ids` (`[ids.len(), vocab]`, `Shard(1)`).
    fn sequence_logits(&self, ids: &[i32], seq: usize) -> Result<DTensor>;
}

/// Continue `prompt` by up to `max_new` tokens with a key/value cache (the
/// prompt in one step, then one token per step), calling `on_token` with
/// each as soon as it is chosen; stops after a token of `stop` (which is
/// returned). Returns the new tokens.
pub async fn generate<M: CausalDecoder + ?Sized>(
    model: &M,
    prompt: &[i32],
    max_new: usize,
    sampling: Sampling,
    stop: &[i32],
    mut on_token: impl FnMut(i32) -> Result<()>,
) -> Result<Vec<i32>> {
    // Nothing is recorded for a backward pass while generating.
    let _off = NoGradGuard::new();
    let mut sampler = start_generation(model, prompt, max_new, sampling)?;
    let mut caches = vec![KvCache::default(); model.num_caches()];
    let mut out = Vec::with_capacity(max_new);
    let mut step = prompt.to_vec();
    while out.len() < max_new {
        let logits = model.decode_logits(&step, &mut caches)?;
        let next = next_token(model.vocab_size(), &mut sampler, &logits).await?;
        out.push(next);
        on_token(next)?;
        if stop.contains(&next) {
            break;
        }
        step = vec![next];
    }
    Ok(out)
}

/// [`generate`] re-running the whole sequence for every token (no cache):
/// the reference the cached path must equal.
pub async fn generate_uncached<M: CausalDecoder + ?Sized>(
    model: &M,
    prompt: &[i32],
    max_new: usize,
    sampling: Sampling,
    stop: &[i32],
) -> Result<Vec<i32>> {
    let _off = NoGradGuard::new();
    let mut sampler = start_generation(model, prompt, max_new, sampling)?;
    let mut seq = prompt.to_vec();
    let vocab = model.vocab_size();
    for _ in 0..max_new {
        let logits = model
            .sequence_logits(&seq, seq.len())?
            .to_host_async()
            .await?;
        let next = sampler.pick(&logits[(seq.len() - 1) * vocab..]);
        seq.push(next);
        if stop.contains(&next) {
            break;
        }
    }
    Ok(seq[prompt.len()..].to_vec())
}

/// The next token from the last row of `logits` (`Shard(1)` over the
/// vocab), chosen from [`vocab_top_k`]'s candidates.
async fn next_token(vocab: usize, sampler: &mut Sampler, logits: &DTensor) -> Result<i32> {
    let width = sampler.width().min(vocab);
    let row = logits.shape()[0] - 1;
    if width > kernels::topk::TOP_K_MAX {
        let all = logits.to_host_async().await?;
        return Ok(sampler.pick(&all[row * vocab..]));
    }
    let top = vocab_top_k_async(logits, row, width).await?;
    Ok(sampler.choose(&top))
}

/// The sampler, once the prompt is checked: at least one known token,
/// with room for `max_new` more.
fn start_generation<M: CausalDecoder + ?Sized>(
    model: &M,
    prompt: &[i32],
    max_new: usize,
    sampling: Sampling,
) -> Result<Sampler> {
    const OP: &str = "generate";
    let (vocab, n_ctx) = (model.vocab_size(), model.context());
    if prompt.is_empty() {
        return Err(Error::invalid(OP, "the prompt needs at least one token"));
    }
    if prompt.len() + max_new > n_ctx {
        return Err(Error::invalid(
            OP,
            format!(
                "{} prompt + {max_new} new tokens exceed the context of {n_ctx}",
                prompt.len()
            ),
        ));
    }
    if let Some(&bad) = prompt.iter().find(|&&t| t < 0 || t as usize >= vocab) {
        return Err(Error::OutOfRange {
            op: OP,
            what: "token id",
            value: bad as i64,
            bound: vocab,
        });
    }
    Sampler::new(sampling)
}

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
        let positions: Vec<i32> = (past..past + ids.len()).map(|p| p as i32).collect();
        let x = self.wte.forward(ids)?.add(&self.wpe.forward(&positions)?)?;
        let x = x.cast(self.config().dtype)?;
        let mut x = self.drop.forward(&x)?;
        for (block, cache) in self.h.iter().zip(caches.iter_mut()) {
            x = block.decode(&x, cache)?;
        }
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
    /// by the head, and the greedy / top-k choice runs on each rank's vocab
    /// shard on the device ([`kernels::top_k`]), so only k (value, id) pairs
    /// per rank reach the host (the whole last row where k >
    /// [`kernels::topk::TOP_K_MAX`]).
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
