//! Two layers of one input in one small-M pass over both weights
//! (`kernels::gemv::pair`) where nothing is recorded: a gated MLP's gate
//! and up ([`DTensor::linear_gated`]) and adjacent layers of one shape
//! among those [`DTensor::linears`] takes (attention's key and value
//! projections). Decoding on a CPU adapter paid a fixed cost per dispatch
//! for each, and small products (128 columns a rank) kept few of the
//! adapter's threads busy.

use super::autograd::tracking;
use super::dtensor::DTensor;
use super::elementwise::expect_placed_not_partial;
use super::matmul_plan::{MatmulOptions, Plan, plan};
use crate::device::LocalTensor;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels::Activation;
use crate::kernels::gemv::group::Operands;
use crate::kernels::gemv::pair::{Pair, Store, fits, gemv_pairs};

/// Products one dispatch takes in the grouped and the paired kernels.
const PER_DISPATCH: usize = crate::kernels::gemv::group::GROUP;

/// Products read in one pass with a neighbour's ([`adjacent`]): the pairs,
/// their first and second products and the products left single, as
/// operand indices.
pub(super) struct Pairing<'a> {
    pub(super) pairs: Vec<Pair<'a>>,
    pub(super) firsts: Vec<usize>,
    pub(super) seconds: Vec<usize>,
    pub(super) singles: Vec<usize>,
}

/// The products `kept` of `operands` (operand `i` is layer `i / ranks` on
/// rank `i % ranks`; all on one device) with adjacent layers paired where
/// pairing takes fewer dispatches than grouping every product: from the
/// last layer back, layers `l` and `l + 1` pair up where both are kept on
/// the same ranks, neither has a bias and each rank's two weights share a
/// shape (`pair::fits`); `None` where grouping them all takes as few.
pub(super) fn adjacent<'a>(
    operands: &[Operands<'a>],
    kept: &[usize],
    (layers, ranks): (usize, usize),
) -> Option<Pairing<'a>> {
    let of_layer =
        |l: usize| -> Vec<usize> { (kept.iter().copied()).filter(|&i| i / ranks == l).collect() };
    let pair_of = |firsts: &[usize], seconds: &[usize]| -> Option<Vec<Pair<'a>>> {
        let same_ranks = (firsts.iter().map(|i| i % ranks)).eq(seconds.iter().map(|i| i % ranks));
        if firsts.is_empty() || !same_ranks {
            return None;
        }
        let pairs: Vec<Pair> = (firsts.iter().zip(seconds))
            .map(|(&i, &j)| {
                let (x, y) = (operands[i], operands[j]);
                (x.bias.is_none() && y.bias.is_none()).then_some(Pair {
                    a: x.a,
                    first: x.b,
                    second: y.b,
                })
            })
            .collect::<Option<_>>()?;
        fits(&pairs).then_some(pairs)
    };
    let mut p = Pairing {
        pairs: Vec::new(),
        firsts: Vec::new(),
        seconds: Vec::new(),
        singles: Vec::new(),
    };
    let mut paired_layer = vec![false; layers];
    let mut l = layers;
    while l >= 2 {
        let (firsts, seconds) = (of_layer(l - 2), of_layer(l - 1));
        match pair_of(&firsts, &seconds) {
            Some(pairs) => {
                p.pairs.extend(pairs);
                p.firsts.extend(firsts);
                p.seconds.extend(seconds);
                paired_layer[l - 2] = true;
                paired_layer[l - 1] = true;
                l -= 2;
            }
            None => l -= 1,
        }
    }
    p.singles = (kept.iter().copied())
        .filter(|&i| !paired_layer[i / ranks])
        .collect();
    let grouped = kept.len().div_ceil(PER_DISPATCH);
    let paired = p.singles.len().div_ceil(PER_DISPATCH) + p.pairs.len().div_ceil(PER_DISPATCH);
    // The group takes two or more products.
    let worth = !p.pairs.is_empty() && paired < grouped && p.singles.len() != 1;
    (worth && fits(&p.pairs)).then_some(p)
}

/// Record `pairs` storing both products into `firsts` and `seconds`.
pub(super) fn both(
    pairs: &[Pair],
    firsts: &[&LocalTensor],
    seconds: &[&LocalTensor],
) -> Result<()> {
    let stores: Vec<Store> = (firsts.iter().zip(seconds))
        .map(|(c, e)| Store::Both(c, e))
        .collect();
    gemv_pairs(pairs, &stores)
}

impl DTensor {
    /// `act(self·gateᵀ (+ bias)) ⊙ (self·upᵀ (+ bias))` for `gate` and `up`
    /// each `(w, bias)`: a gated MLP's hidden activations (SwiGLU with
    /// [`Activation::Silu`]). The result is `self.linear_activation_mul(gate,
    /// act, &self.linear(up))`'s, with the same bits; both layers are checked
    /// before anything is recorded, and they must give one shape and
    /// placement, which must not be partial (an activation of partial sums
    /// is an error). Where nothing is recorded, `self` is f32 and neither
    /// layer has a bias, the small-M kernel's paired form reads both weights
    /// in one pass on a CPU adapter that binds 20 storage buffers (at most 8
    /// rows; weights of one dtype, f32 with K a multiple of 4 or bf16 of 8,
    /// each under 32 MiB; four ranks a dispatch where they share a device).
    /// Otherwise it is those two calls (on the tape: their gradients).
    pub fn linear_gated(
        &self,
        gate: (&DTensor, Option<&DTensor>),
        up: (&DTensor, Option<&DTensor>),
        act: Activation,
    ) -> Result<DTensor> {
        const OP: &str = "DTensor::linear_gated";
        let opts = MatmulOptions {
            transpose_w: true,
            out_dtype: None,
        };
        let pg = plan(self, gate.0, gate.1, opts, None)?;
        let pu = plan(self, up.0, up.1, opts, None)?;
        let placed = |p: &Plan| (p.t, p.n, p.placement, p.unit);
        if placed(&pg) != placed(&pu) {
            return Err(Error::invalid(
                OP,
                format!(
                    "gate and up must give one shape and placement: gate gives {:?}, up {:?} \
                     ([tokens, columns, placement, shard unit])",
                    placed(&pg),
                    placed(&pu)
                ),
            ));
        }
        expect_placed_not_partial(OP, pg.placement)?;
        let two_calls = || {
            let u = self.linear(up.0, up.1, MatmulOptions::default())?;
            self.linear_activation_mul(gate.0, gate.1, act, &u, MatmulOptions::default())
        };
        let biased = gate.1.is_some() || up.1.is_some();
        if biased || self.dtype() != DType::F32 || tracking(&[self, gate.0, up.0]) {
            return two_calls();
        }
        let pairs: Vec<Pair> = (0..self.shards().len())
            .map(|r| Pair {
                a: &self.shards()[r],
                first: &gate.0.shards()[r],
                second: &up.0.shards()[r],
            })
            .collect();
        // Every rank's together where they share a device, else each its own.
        let sets: Vec<&[Pair]> = if fits(&pairs) {
            vec![&pairs]
        } else if pairs.iter().all(|x| fits(std::slice::from_ref(x))) {
            pairs.chunks(1).collect()
        } else {
            return two_calls();
        };
        let outs = (pairs.iter())
            .map(|x| (x.a.rank()).alloc(OP, &[x.a.shape()[0], x.first.shape()[0]], DType::F32))
            .collect::<Result<Vec<_>>>()?;
        let mut done = 0;
        for set in sets {
            let stores: Vec<Store> = (outs[done..done + set.len()].iter())
                .map(|c| Store::Gated(c, act))
                .collect();
            gemv_pairs(set, &stores)?;
            done += set.len();
        }
        Ok(self.with_shards_in_units(outs, vec![pg.t, pg.n], pg.placement, pg.unit))
    }
}

#[cfg(test)]
mod tests {
    use crate::device::{DeviceLayout, MeshBuilder};
    use crate::tensor::{DTensor, Placement};

    /// Ranks 1 to 3 holding one copy of k's and v's rows (as 3 key/value
    /// heads on 4 ranks are held) take rank 1's products, aliased,
    /// with the bits `linears` gives each rank; not where x is split, nor
    /// where products do not share dispatches.
    #[test]
    fn repeated_products_are_made_once_with_the_same_bits() -> crate::Result<()> {
        let m = MeshBuilder::new()
            .ranks(4)
            .layout(DeviceLayout::SharedDevice)
            .build()?;
        let (t, k, per) = (1, 16, 3);
        let vals = |len: usize, seed: usize| -> Vec<f32> {
            (0..len)
                .map(|i| ((i * 7 + seed * 5) % 19) as f32 / 9.0 - 1.0)
                .collect()
        };
        // Expanded [4·per, k] with rank 0's block its own, 1..3 one block.
        let held = |seed: usize| -> crate::Result<DTensor> {
            let (a, b) = (vals(per * k, seed), vals(per * k, seed + 1));
            let rows = [a.clone(), b.clone(), b.clone(), b].concat();
            DTensor::from_host(&m, &[4 * per, k], &rows, Placement::Shard(0))
        };
        let wq = DTensor::from_host(&m, &[8, k], &vals(8 * k, 9), Placement::Shard(0))?;
        let (wk, wv) = (held(1)?, held(3)?);
        let wr = DTensor::from_host(&m, &[8, k], &vals(8 * k, 4), Placement::Replicate)?;
        let src = [0, 1, 1, 1];
        // Only where the products share dispatches (not on GPUs, nor under
        // WebGPU's 8 storage buffers a stage).
        let dev = m.ranks()[0].device();
        let grouped = !dev.is_gpu() && dev.limits().max_storage_buffers_per_shader_stage >= 16;
        let layers = [(&wq, None), (&wk, None), (&wv, None)];
        for xp in [Placement::Replicate, Placement::Shard(0)] {
            let rows = if xp == Placement::Replicate { t } else { 4 };
            let x = DTensor::from_host(&m, &[rows, k], &vals(rows * k, 7), xp)?;
            let layers = if xp == Placement::Replicate {
                layers.to_vec()
            } else {
                // Split rows take replicated weights.
                vec![(&wr, None), (&wr, None), (&wr, None)]
            };
            let once = x.linears_with(&layers, &[None, Some(&src), Some(&src)])?;
            let each = x.linears(&layers)?;
            for (l, (a, b)) in once.iter().zip(&each).enumerate() {
                for r in 0..4 {
                    let (sa, sb) = (&a.shards()[r], &b.shards()[r]);
                    let bits = |v: Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(sa.to_vec()?),
                        bits(sb.to_vec()?),
                        "{xp:?} layer {l} rank {r}"
                    );
                    // Rank 1's k and v are ranks 2's and 3's.
                    let aliased = r != 1 && sa.same_buffer(&a.shards()[1]);
                    let want = l > 0 && r > 1 && xp == Placement::Replicate && grouped;
                    assert_eq!(aliased, want, "{xp:?} layer {l} rank {r}: aliased");
                }
            }
        }
        Ok(())
    }
}
