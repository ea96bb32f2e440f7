//! Text generation, written once for every model family through
//! [`CausalDecoder`] (every family's [`Decoder`](crate::nn::Decoder)): greedy or
//! seeded sampling with transformers' repetition penalty, temperature,
//! top-k and top-p ([`Sampling`]), decoding incrementally with a
//! key/value cache per layer, so a decoding step communicates only the
//! row-parallel all-reduces (two per block) and the embedding's. Per token
//! only what that token needs runs: the last position alone is normed and
//! multiplied by the head, the one-row GEMMs read the weights as stored
//! (`kernels::gemv`), and the choice is reduced on each rank's vocab shard
//! on the device ([`vocab_candidates`](crate::tensor::vocab_candidates):
//! the penalty, the k best, and for top-p the softmax normaliser), so only
//! k (value, id) pairs and one (max, sum) pair per rank reach the host. The
//! host sampler stays as the reference ([`generate_uncached`]) and
//! both give the same tokens.

use super::kv_cache::KvCache;
use super::params::Params;
use super::sampling::{Sampler, Sampling};
use crate::device::block_on;
use crate::error::{Error, Result};
use crate::tensor::{DTensor, NoGradGuard};

/// The distribution [`Sampling::distribution`] finds for the next token.
#[derive(Clone, Debug, PartialEq)]
pub struct Distribution {
    /// The tokens kept (after the penalty, top-k and top-p) as (id,
    /// probability), best first; the probabilities sum to 1.
    pub kept: Vec<(usize, f64)>,
    /// Whether the device's candidates were not enough (more than
    /// `kernels::topk::TOP_K_MAX`, or short of top-p's mass) and the whole
    /// row was read back.
    pub read_row: bool,
}

impl Sampling {
    /// What the next token is drawn from after row `row` of vocab-sharded
    /// `logits` (`[rows, vocab]`, `Shard(1)`), given the sequence so far
    /// (`seen`, for the penalty): computed as generation computes it, from
    /// the device's candidates. Greedy keeps one token.
    pub fn distribution(&self, logits: &DTensor, row: usize, seen: &[i32]) -> Result<Distribution> {
        let sampler = Sampler::new(*self)?;
        let (rows, vocab) = match *logits.shape() {
            [r, v] => (r, v),
            ref s => {
                return Err(Error::shape(
                    "Sampling::distribution",
                    "logits [rows, vocab]",
                    s,
                ));
            }
        };
        if row >= rows {
            return Err(Error::OutOfRange {
                op: "Sampling::distribution",
                what: "row",
                value: row as i64,
                bound: rows,
            });
        }
        block_on("Sampling::distribution", async {
            if let Some(c) = sampler.device_candidates(logits, row, seen).await?
                && let Some(kept) = sampler.kept_probs(&c.top, c.normaliser, vocab)
            {
                return Ok(Distribution {
                    kept,
                    read_row: false,
                });
            }
            let all = logits.to_host_async().await?;
            let kept = self.row_distribution(&all[row * vocab..(row + 1) * vocab], seen)?;
            Ok(Distribution {
                kept,
                read_row: true,
            })
        })
    }

    /// [`Sampling::distribution`] of a whole row of logits on the host: the
    /// reference (as generation's host sampler computes it).
    pub fn row_distribution(&self, logits: &[f32], seen: &[i32]) -> Result<Vec<(usize, f64)>> {
        let sampler = Sampler::new(*self)?;
        if logits.is_empty() {
            return Err(Error::invalid("Sampling::row_distribution", "an empty row"));
        }
        let (top, normaliser) = sampler.host_candidates(logits, seen);
        Ok(sampler
            .kept_probs(&top, normaliser, logits.len())
            .unwrap_or_default())
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
    let mut seq = prompt.to_vec();
    let mut step = prompt.to_vec();
    while seq.len() - prompt.len() < max_new {
        let logits = model.decode_logits(&step, &mut caches)?;
        let next = next_token(model.vocab_size(), &mut sampler, &logits, &seq).await?;
        seq.push(next);
        on_token(next)?;
        if stop.contains(&next) {
            break;
        }
        step = vec![next];
    }
    Ok(seq[prompt.len()..].to_vec())
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
        let next = sampler.pick(&logits[(seq.len() - 1) * vocab..], &seq);
        seq.push(next);
        if stop.contains(&next) {
            break;
        }
    }
    Ok(seq[prompt.len()..].to_vec())
}

/// The next token from the last row of `logits` (`Shard(1)` over the
/// vocab) after `seen`, chosen from [`vocab_candidates_async`]'s
/// candidates, or from the whole row where they are not enough (more than
/// [`crate::kernels::topk::TOP_K_MAX`], or short of top-p's mass).
pub(super) async fn next_token(
    vocab: usize,
    sampler: &mut Sampler,
    logits: &DTensor,
    seen: &[i32],
) -> Result<i32> {
    let row = logits.shape()[0] - 1;
    if let Some(c) = sampler.device_candidates(logits, row, seen).await?
        && let Some(next) = sampler.choose(&c.top, c.normaliser, vocab)
    {
        return Ok(next);
    }
    let all = logits.to_host_async().await?;
    Ok(sampler.pick(&all[row * vocab..], seen))
}

/// The sampler, once the prompt is checked: at least one known token,
/// with room for `max_new` more.
fn start_generation<M: CausalDecoder + ?Sized>(
    model: &M,
    prompt: &[i32],
    max_new: usize,
    sampling: Sampling,
) -> Result<Sampler> {
    check_prompt(
        (model.vocab_size(), model.context()),
        prompt,
        max_new,
        sampling,
    )
}

/// [`start_generation`] for a model of `vocab` tokens and context `n_ctx`.
pub(super) fn check_prompt(
    (vocab, n_ctx): (usize, usize),
    prompt: &[i32],
    max_new: usize,
    sampling: Sampling,
) -> Result<Sampler> {
    const OP: &str = "generate";
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
