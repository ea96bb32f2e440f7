//! Initialisers that draw the *master* weight on the host with one seeded
//! generator, so a model built with seed s on P ranks holds exactly the
//! weights of the serial model built with seed s (shards are slices of it).
//!
//! The generator is our own SplitMix64 plus Box-Muller: a fixed algorithm the
//! crate controls, so the same seed gives the same weights in every version of
//! every dependency.

/// A seeded, deterministic random generator (SplitMix64).
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
    /// Draw `fan_out × fan_in` values (row-major) from `rng`.
    pub fn sample(&self, rng: &mut InitRng, fan_out: usize, fan_in: usize) -> Vec<f32> {
        let n = fan_out * fan_in;
        let fi = fan_in.max(1) as f64;
        let fo = fan_out.max(1) as f64;
        let mut draw =
            |f: &mut dyn FnMut(&mut InitRng) -> f64| (0..n).map(|_| f(rng) as f32).collect();
        match *self {
            Init::Normal { mean, std } => draw(&mut |r| mean as f64 + std as f64 * r.normal()),
            Init::Uniform { low, high } => draw(&mut |r| loop {
                let v = low as f64 + (high as f64 - low as f64) * r.next_f64();
                // Rounding to f32 may reach `high`: draw again (half-open).
                if (v as f32) < high || low >= high {
                    break v;
                }
            }),
            Init::TruncNormal { mean, std, a, b } => draw(&mut |r| loop {
                let v = mean as f64 + std as f64 * r.normal();
                if v >= a as f64 && v <= b as f64 {
                    break v;
                }
            }),
            Init::XavierNormal { gain } => {
                let std = gain as f64 * (2.0 / (fi + fo)).sqrt();
                draw(&mut |r| std * r.normal())
            }
            Init::XavierUniform { gain } => {
                let a = gain as f64 * (6.0 / (fi + fo)).sqrt();
                draw(&mut |r| a * (2.0 * r.next_f64() - 1.0))
            }
            Init::KaimingNormal => {
                let std = (2.0 / fi).sqrt();
                draw(&mut |r| std * r.normal())
            }
            Init::KaimingUniform => {
                let a = (6.0 / fi).sqrt();
                draw(&mut |r| a * (2.0 * r.next_f64() - 1.0))
            }
            Init::Zeros => vec![0.0; n],
            Init::Ones => vec![1.0; n],
        }
    }
}
