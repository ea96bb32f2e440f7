//! Random tensors drawn on the device by a counter-based generator
//! (`shaders/init.wgsl`): element `g` of the logical tensor (its row-major
//! index in the whole, unsharded tensor) is a function of `(key, g)` alone,
//! from the Philox-4x32-10 words of the counter `(g, attempt, 0, 0)` under
//! `key`. So a shard draws exactly its slice of what the whole tensor would
//! hold, at any world size, and no rank needs the whole tensor on the host:
//! the model initialisers (`nn::Init`) build on it.
//!
//! [`draw_host`] computes the same values on the host in f64 (the device's
//! `log`, `sqrt` and `cos` in f32 differ from it by rounding only).

use super::grid::grid_groups;
use crate::device::{Access, Dispatch, KernelSpec, LocalTensor, Rank};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::shard::outer_dim_inner;

pub(crate) const SOURCE: &str = concat!(
    include_str!("../../shaders/grid.wgsl"),
    include_str!("../../shaders/philox.wgsl"),
    include_str!("../../shaders/init.wgsl")
);
const BINDINGS: &[Access] = &[Access::ReadWrite];

/// Redraws before a truncated normal or a half-open uniform gives up (then
/// the value is clamped into range): the shader's `ATTEMPTS`.
const ATTEMPTS: u32 = 32;

/// What each element is drawn from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Draw {
    /// Every element `value`.
    Constant(f32),
    /// N(mean, std²), by Box-Muller.
    Normal {
        /// Mean.
        mean: f32,
        /// Standard deviation.
        std: f32,
    },
    /// U[low, high) (redrawn where f32 rounding reaches `high`).
    Uniform {
        /// Lower bound.
        low: f32,
        /// Upper bound (excluded).
        high: f32,
    },
    /// N(mean, std²) redrawn until inside [low, high].
    TruncNormal {
        /// Mean.
        mean: f32,
        /// Standard deviation.
        std: f32,
        /// Lower cut.
        low: f32,
        /// Upper cut.
        high: f32,
    },
}

/// Which slice of a logical tensor a local tensor holds along `dim`:
/// `local / per` sections of `per` indices, section `s` starting at logical
/// index `s·section + first` (one section for a plain shard; several for
/// a fused projection split section by section); every other dim is whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sections {
    /// The split dimension.
    pub dim: usize,
    /// Indices along `dim` in each section of this shard.
    pub per: usize,
    /// The logical size of one section.
    pub section: usize,
    /// The first logical index of this shard in each section.
    pub first: usize,
    /// The logical size of `dim`.
    pub total: usize,
}

impl Sections {
    /// The whole tensor: one section, all of it.
    pub fn whole(shape: &[usize]) -> Self {
        let n = shape.first().copied().unwrap_or(1);
        Sections {
            dim: 0,
            per: n,
            section: n,
            first: 0,
            total: n,
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    offset: u32,
    inner: u32,
    local: u32,
    per: u32,
    section: u32,
    first: u32,
    total: u32,
    kind: u32,
    key_lo: u32,
    key_hi: u32,
    a: f32,
    b: f32,
    lo: f32,
    hi: f32,
    _pad: u32,
}

impl Draw {
    /// The shader's (kind, a, b, lo, hi).
    fn params(self) -> (u32, f32, f32, f32, f32) {
        match self {
            Draw::Constant(v) => (0, v, 0.0, 0.0, 0.0),
            Draw::Normal { mean, std } => (1, mean, std, 0.0, 0.0),
            Draw::Uniform { low, high } => (2, low, high, low, high),
            Draw::TruncNormal {
                mean,
                std,
                low,
                high,
            } => (3, mean, std, low, high),
        }
    }
}

/// A fresh f32 tensor of `shape` on `rank` holding `sections` of the
/// logical tensor drawn from `draw` under `key`. The logical tensor must
/// have fewer than 2³² elements.
pub fn random(
    rank: &Rank,
    shape: &[usize],
    draw: Draw,
    key: u64,
    sections: Sections,
) -> Result<LocalTensor> {
    const OP: &str = "random";
    let Sections {
        dim,
        per,
        section,
        first,
        total,
    } = sections;
    if !shape.is_empty() && dim >= shape.len() {
        return Err(Error::OutOfRange {
            op: OP,
            what: "sections dim",
            value: dim as i64,
            bound: shape.len(),
        });
    }
    let (outer, local, inner) = if shape.is_empty() {
        (1, 1, 1)
    } else {
        outer_dim_inner(shape, dim)
    };
    let fits = per > 0 && local.is_multiple_of(per) && first + per <= section;
    if local > 0 && (!fits || (local / per - 1) * section + first + per > total) {
        return Err(Error::invalid(
            OP,
            format!(
                "sections of {per} at {first} in sections of {section} do not fit {local} local indices of a dimension of {total}"
            ),
        ));
    }
    let logical = outer.checked_mul(total).and_then(|n| n.checked_mul(inner));
    if logical.is_none_or(|n| n > u32::MAX as usize) {
        return Err(Error::invalid(
            OP,
            "the logical tensor has 2^32 elements or more: draw it in smaller tensors",
        ));
    }
    // Zeros are a new buffer, not a kernel writing them: a parameter built
    // to be loaded over is replaced before anything reads it, and its
    // pages are never touched (`Rank::zeros_untouched`).
    if matches!(draw, Draw::Constant(v) if v.to_bits() == 0) {
        return rank.zeros_untouched(shape, DType::F32);
    }
    let out = rank.alloc(OP, shape, DType::F32)?;
    let (kind, a, b, lo, hi) = draw.params();
    let row = out.len() / shape.first().copied().unwrap_or(1).max(1);
    for (block, start) in out.blocks().iter().zip(out.block_row_starts()) {
        if block.is_empty() {
            continue;
        }
        let params = Params {
            n: block.len() as u32,
            offset: (start * row) as u32,
            inner: inner.max(1) as u32,
            local: local.max(1) as u32,
            per: per.max(1) as u32,
            section: section as u32,
            first: first as u32,
            total: total as u32,
            kind,
            key_lo: key as u32,
            key_hi: (key >> 32) as u32,
            a,
            b,
            lo,
            hi,
            _pad: 0,
        };
        Dispatch {
            spec: &KernelSpec::new("init", SOURCE, BINDINGS, "init"),
            params: bytemuck::bytes_of(&params),
            buffers: &[block],
            workgroups: grid_groups(block.device(), block.len()),
        }
        .record(block.device())?;
    }
    Ok(out)
}

/// Philox-4x32 with 10 rounds (Salmon et al., Random123's constants): the
/// four words of `counter` under `key`, as `shaders/philox.wgsl` computes.
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    const M0: u64 = 0xD251_1F53;
    const M1: u64 = 0xCD9E_8D57;
    const W: [u32; 2] = [0x9E37_79B9, 0xBB67_AE85];
    let (mut c, mut k) = (counter, key);
    for round in 0..10 {
        if round > 0 {
            k = [k[0].wrapping_add(W[0]), k[1].wrapping_add(W[1])];
        }
        let p0 = M0 * c[0] as u64;
        let p1 = M1 * c[2] as u64;
        c = [
            (p1 >> 32) as u32 ^ c[1] ^ k[0],
            p1 as u32,
            (p0 >> 32) as u32 ^ c[3] ^ k[1],
            p0 as u32,
        ];
    }
    c
}

/// Element `g` of the logical tensor drawn from `draw` under `key`, on the
/// host in f64: what [`random`] computes on the device in f32.
pub fn draw_host(draw: Draw, key: u64, g: u32) -> f64 {
    let key = [key as u32, (key >> 32) as u32];
    let words = |attempt: u32| philox4x32_10([g, attempt, 0, 0], key);
    let unit = |w: u32| (w >> 8) as f64 / (1u64 << 24) as f64;
    let normal = |w: [u32; 4]| {
        let u1 = ((w[0] >> 8) + 1) as f64 / (1u64 << 24) as f64;
        -(-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * (unit(w[1]) - 0.5)).cos()
    };
    match draw {
        Draw::Constant(v) => v as f64,
        Draw::Normal { mean, std } => mean as f64 + std as f64 * normal(words(0)),
        Draw::Uniform { low, high } => (0..ATTEMPTS)
            .map(|a| low as f64 + (high as f64 - low as f64) * unit(words(a)[0]))
            .find(|&v| (v as f32) < high)
            .unwrap_or(low as f64),
        Draw::TruncNormal {
            mean,
            std,
            low,
            high,
        } => {
            let draw = |a| mean as f64 + std as f64 * normal(words(a));
            (0..ATTEMPTS)
                .map(draw)
                .find(|&v| v >= low as f64 && v <= high as f64)
                .unwrap_or_else(|| draw(ATTEMPTS - 1).clamp(low as f64, high as f64))
        }
    }
}
