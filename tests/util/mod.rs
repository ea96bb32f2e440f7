//! Helpers shared by every test module (one test binary, so one copy of each):
//! - [`mesh`]: one mesh per (transport, world size) for the whole binary (each
//!   wgpu device compiles its own pipelines, so sharing saves minutes), the
//!   counting meshes and their lock, and host tensors sharded onto ranks;
//! - [`reference`]: f64 reference maths, the one copy every module checks against;
//! - [`Fixture`]: a reference tool's outputs for a fixture directory;
//! - [`check`]: tolerance asserts, bit-exact and communication-count checks;
//! - [`transformer`]: the f64 GPT (norms, attention, MLP, block, tied head);
//! - [`run_test_in_child`]: one test in a child process, with a watchdog;
//! - here: the seeded random generator, token batches and a model's master weights.
//!
//! Everything in `mesh` and `check` is re-exported here (`crate::util::mesh(2)`).
#![allow(dead_code)]

mod check;
mod child;
mod fixture;
mod mesh;
pub mod reference;
pub mod transformer;

pub use check::*;
pub use child::{peak_rss_kib, run_test_in_child};
pub use fixture::Fixture;
pub use mesh::*;

use wgpu_tp::DTensor;
use wgpu_tp::nn::Params;

/// A small deterministic generator (SplitMix64) so tests need no extra crate;
/// seeds come from the test name plus the time, printed on failure.
pub struct Rng(u64);

impl Rng {
    /// Fresh inputs every run; the seed is printed so a failure can be replayed
    /// with `WGPU_TP_SEED`.
    pub fn fresh(label: &str) -> Rng {
        let seed = std::env::var("WGPU_TP_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        eprintln!("[{label}] seed {seed}");
        Rng(seed)
    }

    /// A fixed seed.
    pub fn seeded(seed: u64) -> Rng {
        Rng(seed)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }

    /// `n` values uniform in [-1, 1).
    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.uniform(-1.0, 1.0)).collect()
    }

    /// Uniform integer in [0, n).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// `t` random token ids and `t` random targets, all in `0..vocab` (ids drawn first).
pub fn token_batch(rng: &mut Rng, vocab: usize, t: usize) -> (Vec<i32>, Vec<i32>) {
    let ids = (0..t).map(|_| rng.below(vocab) as i32).collect();
    let targets = (0..t).map(|_| rng.below(vocab) as i32).collect();
    (ids, targets)
}

/// Every parameter's name and gathered master value, in `named_parameters` order.
pub fn masters(model: &dyn Params) -> Vec<(String, Vec<f32>)> {
    model
        .named_parameters()
        .into_iter()
        .map(|(n, p)| (n, p.master().unwrap()))
        .collect()
}

/// Every parameter's name and gathered master gradient (which must exist).
pub fn master_grads(model: &dyn Params) -> Vec<(String, Vec<f32>)> {
    model
        .named_parameters()
        .into_iter()
        .map(|(n, p)| (n, p.master_grad().unwrap().expect("a gradient")))
        .collect()
}

/// A linear layer's results on the host, `[y, dx, dW, db]`: its output, its
/// input gradient and its gathered weight and bias gradients (the layer's
/// parameters must be exactly `weight` and `bias`, both with gradients).
pub fn linear_results(y: &DTensor, dx: &DTensor, layer: &dyn Params) -> [Vec<f32>; 4] {
    let grads = master_grads(layer);
    let names: Vec<&str> = grads.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["weight", "bias"], "a linear layer with a bias");
    let [(_, dw), (_, db)]: [(String, Vec<f32>); 2] = grads.try_into().unwrap();
    [y.to_host().unwrap(), dx.to_host().unwrap(), dw, db]
}
