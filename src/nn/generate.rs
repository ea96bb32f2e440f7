//! Text generation with a [`Gpt`]: greedy or seeded temperature / top-k
//! sampling, decoding incrementally with a key/value cache in which each
//! rank keeps only its own heads, so a decoding step communicates only the
//! row-parallel all-reduces (two per block) and the embedding's.

use super::attention::KvCache;
use super::gpt::Gpt;
use crate::error::{Error, Result};

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

    /// The next token from one position's logits.
    fn pick(&mut self, logits: &[f32]) -> i32 {
        let mut order: Vec<usize> = (0..logits.len()).collect();
        // Most likely first; ties by id, so greedy is deterministic.
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        match self.sampling {
            Sampling::Greedy => order[0] as i32,
            Sampling::TopK { k, temperature, .. } => {
                let top = &order[..k.min(order.len())];
                let max = logits[top[0]] as f64;
                let weights: Vec<f64> = top
                    .iter()
                    .map(|&i| ((logits[i] as f64 - max) / temperature as f64).exp())
                    .collect();
                let mut u = self.uniform() * weights.iter().sum::<f64>();
                for (&i, w) in top.iter().zip(&weights) {
                    if u < *w {
                        return i as i32;
                    }
                    u -= w;
                }
                top[top.len() - 1] as i32
            }
        }
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
        let mut sampler = self.start_generation(prompt, max_new, sampling)?;
        let mut caches = vec![KvCache::default(); self.h.len()];
        let mut out = Vec::with_capacity(max_new);
        let mut step = prompt.to_vec();
        while out.len() < max_new {
            let last = self.decode_step(&step, &mut caches)?;
            let next = sampler.pick(&last);
            out.push(next);
            step = vec![next];
        }
        self.clear_saved();
        Ok(out)
    }

    /// [`Gpt::generate`] calling `on_token` with each token as soon as it
    /// is chosen (to stream text); an error from it stops generation and is
    /// returned.
    pub fn generate_with(
        &mut self,
        prompt: &[i32],
        max_new: usize,
        sampling: Sampling,
        mut on_token: impl FnMut(i32) -> Result<()>,
    ) -> Result<Vec<i32>> {
        let mut sampler = self.start_generation(prompt, max_new, sampling)?;
        let mut caches = vec![KvCache::default(); self.h.len()];
        let mut out = Vec::with_capacity(max_new);
        let mut step = prompt.to_vec();
        let result = loop {
            if out.len() == max_new {
                break Ok(());
            }
            let next = match self.decode_step(&step, &mut caches) {
                Ok(last) => sampler.pick(&last),
                Err(e) => break Err(e),
            };
            out.push(next);
            if let Err(e) = on_token(next) {
                break Err(e);
            }
            step = vec![next];
        };
        self.clear_saved();
        result.map(|()| out)
    }

    /// Run `ids` (the tokens after the cached ones) through the model and
    /// return the logits of the last one.
    fn decode_step(&mut self, ids: &[i32], caches: &mut [KvCache]) -> Result<Vec<f32>> {
        let past = caches.first().map_or(0, KvCache::len);
        let positions: Vec<i32> = (past..past + ids.len()).map(|p| p as i32).collect();
        let x = self.wte.forward(ids)?.add(&self.wpe.forward(&positions)?)?;
        let x = x.cast(self.config().dtype)?;
        let mut x = self.drop.forward(&x)?;
        for (block, cache) in self.h.iter_mut().zip(caches.iter_mut()) {
            x = block.decode(&x, cache)?;
        }
        let x = self.ln_f.forward(&x)?;
        let (_, logits) = self.head(&x)?;
        let vocab = self.config().vocab;
        let all = logits.to_host()?;
        Ok(all[(ids.len() - 1) * vocab..].to_vec())
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
        let mut sampler = self.start_generation(prompt, max_new, sampling)?;
        let mut seq = prompt.to_vec();
        let vocab = self.config().vocab;
        for _ in 0..max_new {
            let logits = self.logits(&seq, seq.len())?.to_host()?;
            let last = &logits[(seq.len() - 1) * vocab..];
            seq.push(sampler.pick(last));
        }
        self.clear_saved();
        Ok(seq[prompt.len()..].to_vec())
    }

    /// The sampler, once the prompt is checked: at least one known token,
    /// with room for `max_new` more.
    fn start_generation(
        &self,
        prompt: &[i32],
        max_new: usize,
        sampling: Sampling,
    ) -> Result<Sampler> {
        const OP: &str = "Gpt::generate";
        let (vocab, n_ctx) = (self.config().vocab, self.config().n_ctx);
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
}
