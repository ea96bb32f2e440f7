//! Rotary position embedding settings ([`RopeConfig`]) and the `cos`, `sin`
//! tables the [`DTensor::rotary`](crate::DTensor::rotary) op takes,
//! computed on the host as transformers' `modeling_rope_utils` and
//! `LlamaRotaryEmbedding` compute them: the inverse frequencies of the
//! variant ([`RopeScaling`]) in f32, the angles `position · inv_freq` in
//! f32, and `cos`, `sin` of those angles times the variant's attention
//! scaling, in f32. Matching the f32 steps (rather than computing in f64)
//! is what makes the tables equal transformers' to the last bit or so.
//!
//! `dynamic` recomputes the base from the longest position of each call,
//! as transformers' first call does; transformers also keeps a grown base
//! across later calls of one module (and keys cached in an earlier step
//! keep the rotation they were cached with, here as there).

use std::ops::Range;

/// How the inverse frequencies are scaled (transformers' `rope_type`).
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    /// `inv_freq_i = 1 / θ^(2i/D)`.
    Default,
    /// Positions divided by `factor` (`inv_freq / factor`).
    Linear {
        /// The stretch of the context.
        factor: f64,
    },
    /// NTK-aware: past `max_position_embeddings`, the base grows to
    /// `θ·(factor·L/max − (factor − 1))^(D/(D−2))` for the call's length `L`.
    Dynamic {
        /// The stretch of the context.
        factor: f64,
    },
    /// Llama 3.1's: low frequencies divided by `factor`, high ones kept,
    /// those between smoothly blended.
    Llama3 {
        /// The stretch of the context.
        factor: f64,
        /// Wavelengths past `original / low_freq_factor` are scaled.
        low_freq_factor: f64,
        /// Wavelengths below `original / high_freq_factor` are kept.
        high_freq_factor: f64,
        /// The context the model was pretrained with.
        original_max_position_embeddings: usize,
    },
    /// YaRN: interpolation and extrapolation blended by a linear ramp over
    /// the dimensions, and `cos`, `sin` scaled by an attention factor.
    Yarn {
        /// The stretch of the context (`None`: `max_position_embeddings /
        /// original_max_position_embeddings`).
        factor: Option<f64>,
        /// The context the model was pretrained with.
        original_max_position_embeddings: usize,
        /// The scaling of `cos`, `sin` (`None`: from `factor`, `mscale`, `mscale_all_dim`).
        attention_factor: Option<f64>,
        /// Rotations where extrapolation ends (default 32).
        beta_fast: Option<f64>,
        /// Rotations where interpolation starts (default 1).
        beta_slow: Option<f64>,
        /// Scales `ln(factor)` in the attention factor's numerator.
        mscale: Option<f64>,
        /// Scales `ln(factor)` in its denominator.
        mscale_all_dim: Option<f64>,
        /// Round the ramp's ends to whole dimensions (default true).
        truncate: bool,
    },
    /// LongRoPE (Phi-3): the inverse frequencies divided per dimension by
    /// `short_factor`, or by `long_factor` for a call whose longest position
    /// passes `original_max_position_embeddings`, and `cos`, `sin` scaled by
    /// an attention factor.
    LongRope {
        /// Per-dimension divisors within the original context.
        short_factor: Vec<f64>,
        /// Per-dimension divisors past it.
        long_factor: Vec<f64>,
        /// The stretch of the context (`None`: `max_position_embeddings /
        /// original_max_position_embeddings`).
        factor: Option<f64>,
        /// The scaling of `cos`, `sin` (`None`: `√(1 + ln factor / ln original)`,
        /// or 1 when `factor ≤ 1`).
        attention_factor: Option<f64>,
        /// The context the model was pretrained with.
        original_max_position_embeddings: usize,
    },
}

/// Rotary embedding of heads `head_dim` wide with base `theta`.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeConfig {
    /// The base wavelength (`rope_theta`).
    pub theta: f64,
    /// The head width (even).
    pub head_dim: usize,
    /// The width rotated (even, at most `head_dim`; `head_dim ·
    /// partial_rotary_factor`): the tables leave the pairs past
    /// `rotary_dim / 2` unrotated (cos 1, sin 0), so a head whose rotated
    /// and passed dimensions are interleaved to that layout (the family's
    /// checkpoint rule) is rotated as transformers' partial rotary does.
    pub rotary_dim: usize,
    /// The frequency scaling.
    pub scaling: RopeScaling,
    /// The model's context (`max_position_embeddings`; `dynamic` and `yarn` read it).
    pub max_position_embeddings: usize,
}

/// `1 / base^(2i/dim)` in f32, as `1.0 / (base ** (arange(0, dim, 2).float() / dim))`.
fn base_inv_freq(base: f64, dim: usize) -> Vec<f32> {
    (0..dim / 2)
        .map(|i| 1.0 / (base as f32).powf((2 * i) as f32 / dim as f32))
        .collect()
}

impl RopeConfig {
    /// Plain RoPE: `theta`, no scaling.
    pub fn new(theta: f64, head_dim: usize, max_position_embeddings: usize) -> Self {
        RopeConfig {
            theta,
            head_dim,
            rotary_dim: head_dim,
            scaling: RopeScaling::Default,
            max_position_embeddings,
        }
    }

    /// The inverse frequencies `[rotary_dim / 2]` (f32) and the attention
    /// scaling of `cos`, `sin` for a call whose longest position is
    /// `seq_len − 1`.
    pub fn inv_freq(&self, seq_len: usize) -> (Vec<f32>, f32) {
        let dim = self.rotary_dim;
        match &self.scaling {
            RopeScaling::Default => (base_inv_freq(self.theta, dim), 1.0),
            &RopeScaling::Linear { factor } => {
                let f = factor as f32;
                (
                    base_inv_freq(self.theta, dim)
                        .into_iter()
                        .map(|v| v / f)
                        .collect(),
                    1.0,
                )
            }
            &RopeScaling::Dynamic { factor } => {
                let max = self.max_position_embeddings as f64;
                let len = seq_len.max(self.max_position_embeddings) as f64;
                let d = dim as f64;
                let base = self.theta * ((factor * len / max) - (factor - 1.0)).powf(d / (d - 2.0));
                (base_inv_freq(base, dim), 1.0)
            }
            &RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings: old,
            } => {
                let (f, old) = (factor as f32, old as f32);
                let (lo, hi) = (low_freq_factor as f32, high_freq_factor as f32);
                let (low_wavelen, high_wavelen) = (old / lo, old / hi);
                let out = base_inv_freq(self.theta, dim)
                    .into_iter()
                    .map(|v| {
                        let wavelen = 2.0 * std::f32::consts::PI / v;
                        let scaled = if wavelen > low_wavelen { v / f } else { v };
                        let medium = wavelen >= high_wavelen && wavelen <= low_wavelen;
                        if medium {
                            let smooth = (old / wavelen - lo) / (hi - lo);
                            (1.0 - smooth) * scaled / f + smooth * scaled
                        } else {
                            scaled
                        }
                    })
                    .collect();
                (out, 1.0)
            }
            RopeScaling::Yarn { .. } => self.yarn(),
            RopeScaling::LongRope {
                short_factor,
                long_factor,
                factor,
                attention_factor,
                original_max_position_embeddings: orig,
            } => {
                let orig = (*orig).max(1);
                let factor = factor.unwrap_or(self.max_position_embeddings as f64 / orig as f64);
                let attention = attention_factor.unwrap_or(if factor <= 1.0 {
                    1.0
                } else {
                    (1.0 + factor.ln() / (orig as f64).ln()).sqrt()
                });
                let ext = if seq_len > orig {
                    long_factor
                } else {
                    short_factor
                };
                let base = self.theta as f32;
                let out = (0..dim / 2)
                    .map(|i| {
                        let e = ext.get(i).copied().unwrap_or(1.0) as f32;
                        1.0 / (e * base.powf((2 * i) as f32 / dim as f32))
                    })
                    .collect();
                (out, attention as f32)
            }
        }
    }

    /// YaRN's inverse frequencies and attention factor (transformers'
    /// `_compute_yarn_parameters`).
    fn yarn(&self) -> (Vec<f32>, f32) {
        let RopeScaling::Yarn {
            factor,
            original_max_position_embeddings: orig,
            attention_factor,
            beta_fast,
            beta_slow,
            mscale,
            mscale_all_dim,
            truncate,
        } = self.scaling
        else {
            return (base_inv_freq(self.theta, self.rotary_dim), 1.0);
        };
        let dim = self.rotary_dim;
        let factor = factor.unwrap_or(self.max_position_embeddings as f64 / orig.max(1) as f64);
        let get_mscale = |scale: f64, m: f64| {
            if scale <= 1.0 {
                1.0
            } else {
                0.1 * m * scale.ln() + 1.0
            }
        };
        let attention = attention_factor.unwrap_or(match (mscale, mscale_all_dim) {
            (Some(m), Some(a)) if m != 0.0 && a != 0.0 => {
                get_mscale(factor, m) / get_mscale(factor, a)
            }
            _ => get_mscale(factor, 1.0),
        });
        let beta_fast = beta_fast.filter(|&b| b != 0.0).unwrap_or(32.0);
        let beta_slow = beta_slow.filter(|&b| b != 0.0).unwrap_or(1.0);
        let base = self.theta;
        let correction_dim = |rot: f64| {
            (dim as f64 * (orig as f64 / (rot * 2.0 * std::f64::consts::PI)).ln())
                / (2.0 * base.ln())
        };
        let (mut low, mut high) = (correction_dim(beta_fast), correction_dim(beta_slow));
        if truncate {
            (low, high) = (low.floor(), high.ceil());
        }
        let (low, mut high) = (low.max(0.0), high.min(dim as f64 - 1.0));
        if low == high {
            high += 0.001;
        }
        let (low32, high32) = (low as f32, high as f32);
        let f = factor as f32;
        let out = (0..dim / 2)
            .map(|i| {
                let pos_freq = (base as f32).powf((2 * i) as f32 / dim as f32);
                let extra = 1.0 / pos_freq;
                let inter = 1.0 / (f * pos_freq);
                let ramp = ((i as f32 - low32) / (high32 - low32)).clamp(0.0, 1.0);
                let extra_factor = 1.0 - ramp;
                inter * (1.0 - extra_factor) + extra * extra_factor
            })
            .collect();
        (out, attention as f32)
    }

    /// `cos` and `sin` `[positions.len(), head_dim / 2]` (row-major f32) of
    /// `positions`: `(p · inv_freq_i)` in f32, then its cosine and sine times
    /// the attention scaling; past `rotary_dim / 2`, 1 and 0. `dynamic` and
    /// `longrope` take the call's longest position.
    pub fn tables(&self, positions: Range<usize>) -> (Vec<f32>, Vec<f32>) {
        let (inv_freq, scaling) = self.inv_freq(positions.end);
        let half = self.head_dim / 2;
        let n = positions.len() * half;
        let (mut cos, mut sin) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for p in positions {
            for i in 0..half {
                match inv_freq.get(i) {
                    Some(&f) => {
                        let angle = (p as f32 * f) as f64;
                        cos.push(angle.cos() as f32 * scaling);
                        sin.push(angle.sin() as f32 * scaling);
                    }
                    None => {
                        cos.push(1.0);
                        sin.push(0.0);
                    }
                }
            }
        }
        (cos, sin)
    }
}
