//! Two layers of one input in one small-M pass over both weights
//! (`kernels::gemv::pair`) where nothing is recorded: SwiGLU's gate and up
//! ([`DTensor::linear_gated`]) and the key and value projections that
//! [`DTensor::linears`] takes last. Decoding a Llama on a CPU adapter paid
//! a fixed cost per dispatch for each, and at four ranks its k and v, 128
//! columns a rank, kept few of the adapter's threads busy.

use super::autograd::tracking;
use super::dtensor::DTensor;
use super::matmul::MatmulOptions;
use super::product::plan;
use crate::device::LocalTensor;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels::Activation;
use crate::kernels::gemv::group::Operands;
use crate::kernels::gemv::pair::{Pair, Store, fits, gemv_pairs};

/// Products one dispatch takes in the grouped and the paired kernels.
const PER_DISPATCH: usize = 4;

/// The pairs of the last two of `layers` layers (`operands` layer-major,
/// `ranks` a layer, every one on one device and grouped) where they pair
/// up (no bias, one shape a rank) and pairing them takes fewer dispatches
/// than grouping every product: a Llama's k and v at three or more ranks.
pub(super) fn last_two<'a>(
    operands: &[Operands<'a>],
    layers: usize,
    ranks: usize,
) -> Option<Vec<Pair<'a>>> {
    let singles = layers.checked_sub(2)? * ranks;
    let grouped = (layers * ranks).div_ceil(PER_DISPATCH);
    let paired = singles.div_ceil(PER_DISPATCH) + ranks.div_ceil(PER_DISPATCH);
    // The group takes two or more products.
    if paired >= grouped || singles == 1 {
        return None;
    }
    let pairs: Vec<Pair> = (0..ranks)
        .map(|r| {
            let (k, v) = (&operands[singles + r], &operands[singles + ranks + r]);
            (k.bias.is_none() && v.bias.is_none()).then_some(Pair {
                a: k.a,
                first: k.b,
                second: v.b,
            })
        })
        .collect::<Option<_>>()?;
    fits(&pairs).then_some(pairs)
}

/// Record `pairs` storing both products into `firsts` and `seconds`.
pub(super) fn both(pairs: &[Pair], firsts: &[LocalTensor], seconds: &[LocalTensor]) -> Result<()> {
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
    /// placement. Where nothing is recorded, `self` is f32 and neither layer
    /// has a bias, the small-M kernel's paired form reads both weights in one
    /// pass on a CPU adapter (at most 8 rows; four ranks a dispatch where
    /// they share a device). Otherwise it is those two calls (on the tape:
    /// their gradients).
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
        let placed = |p: &super::product::Plan| (p.t, p.n, p.placement, p.unit);
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
