//! Initialisers. A model's seeded [`InitRng`] gives each tensor a 64-bit
//! key; element `g` of the tensor (its row-major index in the whole,
//! unsharded tensor) is then a function of `(key, g)` alone, drawn by
//! Philox-4x32-10 (`kernels::random`). Each rank draws its own shard on its
//! device, so a model built with seed s on P ranks holds the weights of the
//! serial model built with seed s, and no rank needs the whole weight on the
//! host. [`Init::sample`] draws the same values on the host.
//!
//! The generators are fixed algorithms the crate controls (SplitMix64 for
//! the keys, Philox and Box-Muller for the values), so the same seed gives
//! the same weights in every version of every dependency.

use super::parameter::Parameter;
use crate::ReduceOp;
use crate::device::Mesh;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels::random::{Draw, Sections, draw_host, random};
use crate::shard::{split_range_in_units, with_dim};
use crate::tensor::{DTensor, Placement, made_once};

/// A seeded, deterministic random generator (SplitMix64): the keys of a
/// model's tensors, one per tensor, in the order the model draws them.
#[derive(Clone, Debug)]
pub struct InitRng {
    state: u64,
}

impl InitRng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        InitRng { state: seed }
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Skip `n` draws of [`InitRng::next_u64`] (a parameter's key each):
    /// how a pipeline stage starts where its first layer's keys begin, giving
    /// the same weights as the whole model without drawing the others.
    pub fn skip(&mut self, n: u64) {
        self.state = self
            .state
            .wrapping_add(0x9E37_79B9_7F4A_7C15u64.wrapping_mul(n));
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller; one value per call, for simplicity).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.next_f64().max(f64::MIN_POSITIVE);
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// How to fill a weight of shape `[fan_out, fan_in]` (or a bias / table).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// N(mean, std²).
    Normal {
        /// Mean.
        mean: f32,
        /// Standard deviation.
        std: f32,
    },
    /// U[low, high).
    Uniform {
        /// Lower bound.
        low: f32,
        /// Upper bound.
        high: f32,
    },
    /// N(mean, std²) redrawn until inside [a, b].
    TruncNormal {
        /// Mean.
        mean: f32,
        /// Standard deviation.
        std: f32,
        /// Lower cut.
        a: f32,
        /// Upper cut.
        b: f32,
    },
    /// N(0, gain²·2/(fan_in+fan_out)).
    XavierNormal {
        /// Gain.
        gain: f32,
    },
    /// U(±gain·sqrt(6/(fan_in+fan_out))).
    XavierUniform {
        /// Gain.
        gain: f32,
    },
    /// N(0, 2/fan_in) (ReLU gain, fan-in mode).
    KaimingNormal,
    /// U(±sqrt(6/fan_in)) (ReLU gain, fan-in mode).
    KaimingUniform,
    /// All zeros.
    Zeros,
    /// All ones.
    Ones,
}

impl Default for Init {
    /// Megatron's default: N(0, 0.02²).
    fn default() -> Self {
        Init::Normal {
            mean: 0.0,
            std: 0.02,
        }
    }
}

impl Init {
    /// The distribution of a `[fan_out, fan_in]` weight (fan-in and fan-out
    /// modes resolved to a plain normal or uniform).
    pub fn draw(&self, fan_out: usize, fan_in: usize) -> Draw {
        let fi = fan_in.max(1) as f64;
        let fo = fan_out.max(1) as f64;
        let normal = |std: f64| Draw::Normal {
            mean: 0.0,
            std: std as f32,
        };
        let symmetric = |a: f64| Draw::Uniform {
            low: -a as f32,
            high: a as f32,
        };
        match *self {
            Init::Normal { mean, std } => Draw::Normal { mean, std },
            Init::Uniform { low, high } => Draw::Uniform { low, high },
            Init::TruncNormal { mean, std, a, b } => Draw::TruncNormal {
                mean,
                std,
                low: a,
                high: b,
            },
            Init::XavierNormal { gain } => normal(gain as f64 * (2.0 / (fi + fo)).sqrt()),
            Init::XavierUniform { gain } => symmetric(gain as f64 * (6.0 / (fi + fo)).sqrt()),
            Init::KaimingNormal => normal((2.0 / fi).sqrt()),
            Init::KaimingUniform => symmetric((6.0 / fi).sqrt()),
            Init::Zeros => Draw::Constant(0.0),
            Init::Ones => Draw::Constant(1.0),
        }
    }

    /// `fan_out × fan_in` values (row-major) on the host, under the next key
    /// of `rng`: the values [`Init::parameter`] draws on the devices for the
    /// same key (up to the f32 rounding of `log`, `sqrt` and `cos` there).
    /// Tensors of 2³² elements or more have no key-indexed values; use
    /// smaller tensors.
    pub fn sample(&self, rng: &mut InitRng, fan_out: usize, fan_in: usize) -> Vec<f32> {
        let key = rng.next_u64();
        let draw = self.draw(fan_out, fan_in);
        let n = fan_out * fan_in;
        (0..n)
            .map(|g| draw_host(draw, key, g as u32) as f32)
            .collect()
    }

    /// A parameter of `shape` (`[fan_out, fan_in, ...]`: fan-in is the
    /// product of the other dims) drawn on each rank's device under the next
    /// key of `rng`, placed as `placement`; a `Shard` dim is split in
    /// `stride` sections of whole `unit`s as
    /// [`Parameter::from_master_in_units`] splits a master. Equal to
    /// `Parameter::from_master_in_units` of [`Init::sample`]'s values up to
    /// the device's rounding, at every world size; nothing of the size of
    /// the weight is allocated on the host.
    pub fn parameter(
        &self,
        mesh: &Mesh,
        shape: &[usize],
        rng: &mut InitRng,
        placement: Placement,
        (stride, unit): (usize, usize),
    ) -> Result<Parameter> {
        const OP: &str = "Init::parameter";
        let key = rng.next_u64();
        let fan_out = shape.first().copied().unwrap_or(1);
        let fan_in = shape.iter().skip(1).product::<usize>();
        let draw = self.draw(fan_out, fan_in);
        if stride == 0 || unit == 0 {
            return Err(Error::invalid(OP, "stride and unit must be at least 1"));
        }
        let p = mesh.size();
        let (dim, n) = match placement {
            Placement::Shard(d) if d < shape.len() => (d, shape[d]),
            Placement::Shard(d) => {
                return Err(Error::OutOfRange {
                    op: OP,
                    what: "shard dim",
                    value: d as i64,
                    bound: shape.len(),
                });
            }
            _ => (0, shape.first().copied().unwrap_or(1)),
        };
        let sharded = matches!(placement, Placement::Shard(_));
        let whole = matches!(
            placement,
            Placement::Replicate | Placement::Partial(ReduceOp::Max)
        );
        // Ranks on one device read one buffer of a replicated parameter.
        if whole
            && let Some(shards) = made_once(mesh, |r| {
                random(r, shape, draw, key, Sections::whole(shape))
            })?
        {
            let value = DTensor::from_shards_in_units(mesh, shards, shape, placement, 1)?;
            return Ok(Parameter::from_value(value, stride, unit));
        }
        if sharded && !n.is_multiple_of(stride * unit) {
            return Err(Error::invalid(
                OP,
                format!(
                    "dim {dim} of size {n} must be a multiple of stride ({stride}) × unit ({unit})"
                ),
            ));
        }
        let shards = mesh
            .ranks()
            .iter()
            .map(|r| {
                let (sections, local) = if sharded {
                    let block = n / stride;
                    let range = split_range_in_units(block, p, r.index(), unit);
                    let local = with_dim(shape, dim, stride * range.len());
                    let sections = Sections {
                        dim,
                        per: range.len(),
                        section: block,
                        first: range.start,
                        total: n,
                    };
                    (sections, local)
                } else {
                    (Sections::whole(shape), shape.to_vec())
                };
                if matches!(placement, Placement::Partial(ReduceOp::Sum)) && r.index() > 0 {
                    return r.zeros(shape, DType::F32);
                }
                random(r, &local, draw, key, sections)
            })
            .collect::<Result<Vec<_>>>()?;
        let units = if sharded { stride * unit } else { 1 };
        let value = DTensor::from_shards_in_units(mesh, shards, shape, placement, units)?;
        Ok(Parameter::from_value(value, stride, unit))
    }
}
