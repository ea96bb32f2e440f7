//! How generation chooses the next token ([`Sampling`]) and the host
//! [`Sampler`] that does it, from the device's candidates
//! ([`vocab_candidates`](crate::tensor::vocab_candidates)) or, as the
//! reference, from a whole row of logits. The sampling maths is
//! transformers' (`generation/logits_process.py`), in its order: the
//! repetition penalty, then the temperature, top-k, top-p, and a draw from
//! the softmax of what is kept.

use crate::error::{Error, Result};
use crate::tensor::{DTensor, RowPenalty, vocab_candidates_async};

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
    /// The most likely token after transformers' repetition penalty (ties:
    /// the lowest id).
    GreedyWithPenalty {
        /// Every id already in the sequence (the prompt included) has its
        /// logit divided by this where ≥ 0, else multiplied (> 0; 1 is
        /// plain greedy).
        repetition_penalty: f32,
    },
    /// transformers' sampling: repetition penalty, temperature, top-k,
    /// top-p, then a draw from the softmax of what is kept.
    Sample(SampleOptions),
}

/// The options of [`Sampling::Sample`], applied in transformers' order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SampleOptions {
    /// Logits are divided by this (> 0) after the penalty.
    pub temperature: f32,
    /// Keep only the `k` most likely tokens (≥ 1; `None`: no limit). Ties at
    /// the k-th value keep the lower ids (transformers keeps every tie).
    pub top_k: Option<usize>,
    /// Nucleus: keep the most likely tokens, best first, until their
    /// probability mass (at the temperature, after top-k) reaches this; the
    /// best token is always kept. In (0, 1]; `None` or 1: no limit.
    pub top_p: Option<f32>,
    /// Repetition penalty on every id already in the sequence, the prompt
    /// included: the logit is divided by it where ≥ 0, else multiplied
    /// (> 0; 1: none).
    pub repetition_penalty: f32,
    /// Seed of the sampler's random stream.
    pub seed: u64,
}

impl Default for SampleOptions {
    /// Temperature 1, no top-k or top-p, no penalty, seed 0: a draw from
    /// the model's whole distribution.
    fn default() -> Self {
        SampleOptions {
            temperature: 1.0,
            top_k: None,
            top_p: None,
            repetition_penalty: 1.0,
            seed: 0,
        }
    }
}

impl SampleOptions {
    /// `top_p` where it limits anything (below 1).
    fn nucleus(&self) -> Option<f64> {
        self.top_p.filter(|&p| p < 1.0).map(f64::from)
    }
}

/// A row's candidates, best first, and its normaliser where asked.
type HostCandidates = (Vec<(f32, usize)>, Option<(f32, f64)>);

/// The most candidates found on the device (`kernels::topk::TOP_K_MAX`).
const DEVICE_MAX: usize = crate::kernels::topk::TOP_K_MAX;

/// Picks tokens according to a [`Sampling`], with its own random stream
/// (SplitMix64).
pub(crate) struct Sampler {
    sampling: Sampling,
    state: u64,
}

fn positive(op: &'static str, what: &str, v: f32) -> Result<()> {
    if v > 0.0 && v.is_finite() {
        Ok(())
    } else {
        Err(Error::invalid(
            op,
            format!("the {what} must be finite and > 0, got {v}"),
        ))
    }
}

impl Sampler {
    /// A sampler, once the options are checked.
    pub(crate) fn new(sampling: Sampling) -> Result<Sampler> {
        const OP: &str = "generate";
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
            Sampling::GreedyWithPenalty { repetition_penalty } => {
                positive(OP, "repetition penalty", repetition_penalty)?;
                0
            }
            Sampling::Sample(o) => {
                positive(OP, "temperature", o.temperature)?;
                positive(OP, "repetition penalty", o.repetition_penalty)?;
                if o.top_k == Some(0) {
                    return Err(Error::invalid(OP, "top_k must be ≥ 1 (None for no limit)"));
                }
                if let Some(p) = o.top_p
                    && !(p > 0.0 && p <= 1.0)
                {
                    return Err(Error::invalid(
                        OP,
                        format!("top_p must lie in (0, 1], got {p}"),
                    ));
                }
                o.seed
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

    /// The repetition penalty to apply before choosing, if any.
    pub(crate) fn penalty(&self) -> Option<f32> {
        let p = match self.sampling {
            Sampling::GreedyWithPenalty { repetition_penalty } => repetition_penalty,
            Sampling::Sample(o) => o.repetition_penalty,
            _ => 1.0,
        };
        (p != 1.0).then_some(p)
    }

    /// Candidates a choice needs, best first, from a vocab of `vocab`: 1
    /// (greedy), k (top-k), [`DEVICE_MAX`] for top-p alone (more are read
    /// only if these do not reach it), else the whole vocab.
    pub(crate) fn width(&self, vocab: usize) -> usize {
        let w = match self.sampling {
            Sampling::Greedy | Sampling::GreedyWithPenalty { .. } => 1,
            Sampling::TopK { k, .. } => k,
            Sampling::Sample(o) => match (o.top_k, o.nucleus()) {
                (Some(k), _) => k,
                (None, Some(_)) => DEVICE_MAX,
                (None, None) => vocab,
            },
        };
        w.min(vocab)
    }

    /// The temperature at which the choice needs the whole row's softmax
    /// normaliser: top-p with no top-k (after top-k, the candidates are all
    /// the mass).
    pub(crate) fn normaliser_temperature(&self) -> Option<f32> {
        match self.sampling {
            Sampling::Sample(o) if o.top_k.is_none() && o.nucleus().is_some() => {
                Some(o.temperature)
            }
            _ => None,
        }
    }

    /// The next token from the best `width()` candidates (value after the
    /// penalty, id), best first (`f32::total_cmp` descending, ties by the
    /// lower id), of a vocab of `vocab`; `normaliser` is the whole row's
    /// `(max, Σ exp((v − max)/T))` where [`Sampler::normaliser_temperature`]
    /// asks for it. `None` (nothing drawn) if top-p needs more candidates:
    /// then [`Sampler::pick`] on the whole row.
    pub(crate) fn choose(
        &mut self,
        top: &[(f32, usize)],
        normaliser: Option<(f32, f64)>,
        vocab: usize,
    ) -> Option<i32> {
        let (temperature, nucleus) = match self.sampling {
            Sampling::Greedy | Sampling::GreedyWithPenalty { .. } => {
                return top.first().map(|c| c.1 as i32);
            }
            Sampling::TopK { temperature, .. } => (temperature, None),
            Sampling::Sample(o) => (o.temperature, o.nucleus()),
        };
        let kept = kept(top, temperature, nucleus, normaliser, vocab)?;
        let weights = weights(&top[..kept], temperature);
        let mut u = self.uniform() * weights.iter().sum::<f64>();
        for (&(_, i), w) in top.iter().zip(&weights) {
            if u < *w {
                return Some(i as i32);
            }
            u -= w;
        }
        Some(top[kept - 1].1 as i32)
    }

    /// The kept candidates of [`Sampler::choose`] with their probabilities.
    pub(crate) fn kept_probs(
        &self,
        top: &[(f32, usize)],
        normaliser: Option<(f32, f64)>,
        vocab: usize,
    ) -> Option<Vec<(usize, f64)>> {
        let (t, nucleus) = match self.sampling {
            Sampling::Greedy | Sampling::GreedyWithPenalty { .. } => {
                return top.first().map(|c| vec![(c.1, 1.0)]);
            }
            Sampling::TopK { temperature, .. } => (temperature, None),
            Sampling::Sample(o) => (o.temperature, o.nucleus()),
        };
        let n = kept(top, t, nucleus, normaliser, vocab)?;
        let w = weights(&top[..n], t);
        let sum: f64 = w.iter().sum();
        Some(top.iter().zip(w).map(|(c, w)| (c.1, w / sum)).collect())
    }

    /// The device's candidates for row `row` of `logits` after `seen`, or
    /// `None` where the choice needs more than the device finds.
    pub(crate) async fn device_candidates(
        &self,
        logits: &DTensor,
        row: usize,
        seen: &[i32],
    ) -> Result<Option<crate::tensor::VocabCandidates>> {
        let width = self.width(*logits.shape().last().unwrap_or(&0));
        if width > DEVICE_MAX {
            return Ok(None);
        }
        let penalty = self.penalty().map(|penalty| RowPenalty { seen, penalty });
        let t = self.normaliser_temperature();
        Ok(Some(
            vocab_candidates_async(logits, row, width, penalty, t).await?,
        ))
    }

    /// Candidates and normaliser of a whole row on the host, after `seen`
    /// is penalised: all of the row where top-p alone needs them.
    pub(crate) fn host_candidates(&self, logits: &[f32], seen: &[i32]) -> HostCandidates {
        let logits = match self.penalty() {
            Some(p) => penalized(logits, seen, p),
            None => logits.to_vec(),
        };
        let mut order: Vec<usize> = (0..logits.len()).collect();
        // Most likely first; ties by id, so greedy is deterministic.
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        let normaliser = self
            .normaliser_temperature()
            .map(|t| normaliser(&logits, t));
        let width = match normaliser {
            Some(_) => logits.len(),
            None => self.width(logits.len()),
        };
        let top = order.iter().take(width).map(|&i| (logits[i], i)).collect();
        (top, normaliser)
    }

    /// The next token from one position's logits, all on the host, after
    /// `seen` (the sequence so far) is penalised: the reference the
    /// on-device choice must equal.
    pub(crate) fn pick(&mut self, logits: &[f32], seen: &[i32]) -> i32 {
        let (top, normaliser) = self.host_candidates(logits, seen);
        // Every candidate is there, so the choice never runs out.
        self.choose(&top, normaliser, logits.len())
            .unwrap_or(top[0].1 as i32)
    }
}

/// `logits` after transformers' repetition penalty at every id of `seen`
/// (out-of-range ids skipped, duplicates counted once): `v / penalty` where
/// `v ≥ 0`, else `v · penalty`.
pub(crate) fn penalized(logits: &[f32], seen: &[i32], penalty: f32) -> Vec<f32> {
    let mut out = logits.to_vec();
    let mut hit = vec![false; logits.len()];
    for &id in seen {
        if let Some(h) = usize::try_from(id).ok().and_then(|i| hit.get_mut(i)) {
            *h = true;
        }
    }
    for (v, _) in out.iter_mut().zip(&hit).filter(|(_, h)| **h) {
        *v = if *v < 0.0 { *v * penalty } else { *v / penalty };
    }
    out
}

/// `(max, Σ exp((v − max)/t))` over a whole row, in f64.
fn normaliser(logits: &[f32], t: f32) -> (f32, f64) {
    let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let s = logits
        .iter()
        .map(|&v| ((v as f64 - m as f64) / t as f64).exp())
        .sum();
    (m, s)
}

/// `exp((v − best)/t)` of each candidate.
fn weights(top: &[(f32, usize)], t: f32) -> Vec<f64> {
    let best = top[0].0 as f64;
    top.iter()
        .map(|&(v, _)| ((v as f64 - best) / t as f64).exp())
        .collect()
}

/// How many of the best-first candidates `top` top-p keeps at `nucleus`
/// (all of them without): the shortest prefix whose softmax mass reaches
/// it (transformers keeps a token while the mass before it is below
/// `top_p`), at least one. The mass is relative to `normaliser` (the whole
/// row's) where given, else to the candidates' own sum. `None` if the
/// candidates run out first and the vocab has more.
fn kept(
    top: &[(f32, usize)],
    t: f32,
    nucleus: Option<f64>,
    normaliser: Option<(f32, f64)>,
    vocab: usize,
) -> Option<usize> {
    if top.is_empty() {
        return None;
    }
    let Some(p) = nucleus else {
        return Some(top.len());
    };
    let w = weights(top, t);
    let total = match normaliser {
        // Rescaled from the row's max to the best candidate's value.
        Some((m, s)) => s * ((m as f64 - top[0].0 as f64) / t as f64).exp(),
        None => w.iter().sum(),
    };
    let mut before = 0.0;
    for (n, wi) in w.iter().enumerate() {
        if before / total >= p {
            return Some(n);
        }
        before += wi;
    }
    let reached = before / total >= p;
    (reached || top.len() >= vocab || normaliser.is_none()).then_some(top.len())
}
