//! Pairs of small-M products of one input in one dispatch
//! (`shaders/gemv_pair.wgsl`), up to [`GROUP`] pairs a dispatch: two
//! layers of one input whose weights share a shape (an attention's key and
//! value projections), both stored, or a gated MLP's gate and up, stored as
//! SwiGLU's `act(x·gateᵀ) ⊙ x·upᵀ`. Each column is summed
//! as [`gemv_nk`](super) sums it alone, so the same bits. An invocation
//! owns two columns of each product: four weight rows in flight, as
//! `gemv_nk`'s four columns of one; with four of each, the pair read its
//! weights a fifth slower than two dispatches did (BENCHMARKS.md, round 35).
//!
//! Why: decoding at four ranks on one CPU adapter took a layer's q, k and
//! v in three grouped dispatches, and at every P the gate and up in two;
//! a CPU adapter pays a fixed cost per dispatch, and k's and v's products
//! of 128 columns each kept few of its threads busy.

use super::group::{GROUP, Operands, Params, act_code, measured_wg};
use super::knobs::GEMV_MAX_ROWS;
use super::pair_source::source;
use crate::device::{Access, Dispatch, KernelSpec, LocalTensor};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels::Activation;

/// a, b (first weight), d (second weight), c and e (outputs) of each of
/// the [`GROUP`] pairs, in that order.
const BINDINGS: &[Access] = &{
    let mut b = [Access::Read; 5 * GROUP];
    let mut i = 3 * GROUP;
    while i < 5 * GROUP {
        b[i] = Access::ReadWrite;
        i += 1;
    }
    b
};

/// One input `a` `[M, K]` (f32) and two weights `[N, K]` of one shape and
/// dtype (f32 or bf16).
#[derive(Clone, Copy)]
pub(crate) struct Pair<'a> {
    /// `[M, K]`, f32.
    pub a: &'a LocalTensor,
    /// `[N, K]`: the key's or the gate's weight.
    pub first: &'a LocalTensor,
    /// `[N, K]`: the value's or up's weight.
    pub second: &'a LocalTensor,
}

/// What a pair stores (`[M, N]` f32 each).
#[derive(Clone, Copy)]
pub(crate) enum Store<'a> {
    /// `a·firstᵀ` and `a·secondᵀ`.
    Both(&'a LocalTensor, &'a LocalTensor),
    /// `act(a·firstᵀ) ⊙ a·secondᵀ`.
    Gated(&'a LocalTensor, Activation),
}

/// Whether one paired dispatch takes `pairs`: what the grouped kernel
/// takes of their products without biases ([`super::group::fits`]), two
/// weights of one shape a pair, each under the size from which a weight
/// may be read from a kept texture instead (`texture::TEXTURE_MIN_BYTES`;
/// pairs read buffers), on a device that binds [`BINDINGS`] storage
/// buffers.
pub(crate) fn fits(pairs: &[Pair]) -> bool {
    let operands: Vec<Operands> = (pairs.iter())
        .flat_map(|x| {
            [x.first, x.second].map(|b| Operands {
                a: x.a,
                b,
                bias: None,
                mul: None,
            })
        })
        .collect();
    let small = |t: &LocalTensor| t.byte_len() < super::texture::TEXTURE_MIN_BYTES as u64;
    super::group::fits(&operands)
        && pairs
            .iter()
            .all(|x| x.first.shape() == x.second.shape() && small(x.first) && small(x.second))
        && pairs.first().is_some_and(|x| {
            x.a.device().limits().max_storage_buffers_per_shader_stage >= BINDINGS.len() as u32
        })
}

/// Record `pairs` ([`fits`] must hold), storing each as `stores` says
/// (every store of one kind, and one activation), [`GROUP`] pairs a
/// dispatch.
pub(crate) fn gemv_pairs(pairs: &[Pair], stores: &[Store]) -> Result<()> {
    record_pairs(pairs, stores, None)
}

/// [`gemv_pairs`] with workgroups of `16·c` invocations where `knob` is
/// `Some(c)`, else the measured (or guessed) knob.
fn record_pairs(pairs: &[Pair], stores: &[Store], knob: Option<usize>) -> Result<()> {
    const OP: &str = "gemv_pairs";
    let m = pairs.first().map_or(0, |x| x.a.shape()[0]);
    let shaped = |t: &LocalTensor, x: &Pair| {
        t.dtype() == DType::F32
            && t.shape() == [m, x.first.shape()[0]]
            && std::sync::Arc::ptr_eq(t.device(), x.a.device())
            && !t.is_blocked()
    };
    let first_act = match stores.first() {
        Some(Store::Gated(_, act)) => Some(*act),
        _ => None,
    };
    let ok = fits(pairs)
        && (1..=GEMV_MAX_ROWS).contains(&m)
        && pairs.len() == stores.len()
        && pairs.iter().zip(stores).all(|(x, s)| match *s {
            Store::Both(c, e) => first_act.is_none() && shaped(c, x) && shaped(e, x),
            Store::Gated(c, act) => first_act == Some(act) && shaped(c, x),
        });
    if !ok {
        return Err(Error::invalid(
            OP,
            "internal: pairs the paired kernel cannot take (please report this)",
        ));
    }
    let bf16 = pairs[0].first.dtype() == DType::BF16;
    let (family, source, entry) = program(bf16);
    let rows = m.next_power_of_two();
    let flags = match stores[0] {
        Store::Gated(_, act) => 32 | act_code(act) << 2,
        Store::Both(..) => 0,
    };
    let members: Vec<(Pair, Store)> = pairs.iter().copied().zip(stores.iter().copied()).collect();
    let record = |chunk: &[(Pair, Store)], c: usize| {
        let sizes: Vec<(usize, usize)> = (chunk.iter())
            .map(|(x, _)| (x.first.shape()[0], x.first.shape()[1]))
            .collect();
        let (p, workgroups) = Params::new(m, flags, &sizes, 16 * c, 2);
        // Unused slots bind the first pair's tensors; no workgroup reads them.
        let at = |g: usize| chunk.get(g).unwrap_or(&chunk[0]);
        let outs = |g: usize| match at(g).1 {
            Store::Both(c, e) => (c, e),
            Store::Gated(c, _) => (c, c),
        };
        let buffers: Vec<&LocalTensor> = (0..GROUP)
            .map(|g| at(g).0.a)
            .chain((0..GROUP).map(|g| at(g).0.first))
            .chain((0..GROUP).map(|g| at(g).0.second))
            .chain((0..GROUP).map(|g| outs(g).0))
            .chain((0..GROUP).map(|g| outs(g).1))
            .collect();
        let constants = vec![("ROWS", rows as f64), ("WG", (16 * c) as f64)];
        let spec = KernelSpec::new(family, source, BINDINGS, entry).with_constants(constants);
        Dispatch {
            spec: &spec,
            params: bytemuck::bytes_of(&p),
            buffers: &buffers,
            workgroups,
        }
        .record(pairs[0].a.device())
    };
    for chunk in members.chunks(GROUP) {
        let (n, k) = chunk.iter().fold((0, 0), |(n, k), (x, _)| {
            (n + 2 * x.first.shape()[0], k.max(x.first.shape()[1]))
        });
        let what = format!("{family} pairs {}", chunk.len());
        let dev = pairs[0].a.device();
        let c = match knob {
            Some(c) => c,
            None => measured_wg(dev, &what, (rows, n, k), &|c| record(chunk, c))?,
        };
        record(chunk, c)?;
    }
    Ok(())
}

/// The (family, source, entry) of the paired program for f32 or bf16
/// weights, composed once per process.
pub(super) fn program(bf16: bool) -> (&'static str, &'static str, &'static str) {
    use std::sync::OnceLock;
    static F32: OnceLock<(String, &str)> = OnceLock::new();
    static BF16: OnceLock<(String, &str)> = OnceLock::new();
    let (family, cell) = if bf16 {
        ("gemv_pair_bf16", &BF16)
    } else {
        ("gemv_pair", &F32)
    };
    let (src, entry) = cell.get_or_init(|| source(bf16));
    (family, src, entry)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Mesh;
    use crate::kernels::gemv::{CANDIDATES, gemv_with_candidate};

    /// Every workgroup knob, f32 and bf16 weights, 1 and 3 rows, odd N:
    /// both stores give `gemv_nk`'s bits, and the gated one SiLU of the
    /// gate times up.
    #[test]
    fn every_knob_gives_the_one_product_bits() -> Result<()> {
        let mesh = Mesh::simulated(1)?;
        let r = &mesh.ranks()[0];
        let (n, k) = (37, 24);
        let vals = |len: usize, seed: usize| -> Vec<f32> {
            (0..len)
                .map(|i| ((i * 7 + seed * 13) % 23) as f32 / 11.0 - 1.0)
                .collect()
        };
        let bits = |t: &LocalTensor| -> Result<Vec<u32>> {
            Ok(t.to_vec()?.iter().map(|v| v.to_bits()).collect())
        };
        for dtype in [DType::F32, DType::BF16] {
            let b = crate::kernels::cast(&r.upload(&[n, k], &vals(n * k, 1))?, dtype)?;
            let d = crate::kernels::cast(&r.upload(&[n, k], &vals(n * k, 2))?, dtype)?;
            for m in [1, 3] {
                let a = r.upload(&[m, k], &vals(m * k, m))?;
                let pair = Pair {
                    a: &a,
                    first: &b,
                    second: &d,
                };
                if !fits(&[pair]) {
                    return Ok(()); // not on this adapter (GL, WebGPU limits, GPUs)
                }
                let one_b = gemv_with_candidate(&a, &b, true, 2)?;
                let one_d = gemv_with_candidate(&a, &d, true, 2)?;
                let silu = |x: f32| x * (1.0 / (1.0 + (-x.clamp(-80.0, 80.0)).exp()));
                let gated: Vec<f32> = (one_b.to_vec()?.iter().zip(one_d.to_vec()?))
                    .map(|(g, u)| silu(*g) * u)
                    .collect();
                // Every knob at one row; three rows (ROWS 4) at the guess.
                let knobs = if m == 1 { &CANDIDATES[..] } else { &[2][..] };
                for &c in knobs {
                    let what = format!("{dtype} m {m} wg {}", 16 * c);
                    let (c1, e1, g1) = (
                        r.zeros(&[m, n], DType::F32)?,
                        r.zeros(&[m, n], DType::F32)?,
                        r.zeros(&[m, n], DType::F32)?,
                    );
                    record_pairs(&[pair], &[Store::Both(&c1, &e1)], Some(c))?;
                    record_pairs(&[pair], &[Store::Gated(&g1, Activation::Silu)], Some(c))?;
                    assert_eq!(bits(&c1)?, bits(&one_b)?, "{what}: first");
                    assert_eq!(bits(&e1)?, bits(&one_d)?, "{what}: second");
                    // The host's exp is not the shader's: within rounding.
                    let got = g1.to_vec()?;
                    let close = got
                        .iter()
                        .zip(&gated)
                        .all(|(a, b)| (a - b).abs() <= 1e-5 * (1.0 + b.abs()));
                    assert!(close, "{what}: gated {got:?} against {gated:?}");
                }
            }
        }
        Ok(())
    }
}
