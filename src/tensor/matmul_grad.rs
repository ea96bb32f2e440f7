//! The VJP of [`DTensor::matmul`] (and of the product in
//! [`DTensor::linear`]): with `y = x·w` (`x·wᵀ` when `transpose_w`),
//! `dx = dy·wᵀ` (`dy·w`) and `dw = xᵀ·dy` (`dyᵀ·x`), shard by shard, placed
//! by the forward's rule (docs/MATH.md §2.1):
//!
//! | forward | dy | dx | dw |
//! |---|---|---|---|
//! | Replicate × Shard(N) → Shard(1) | `Shard(1)` | `Partial(Sum)`, f32 | `Shard(N)` |
//! | Shard(1) × Shard(K) → Partial | `Replicate` | `Shard(1)` | `Shard(K)` |
//! | Replicate × Replicate | `Replicate` | `Replicate` | `Replicate` |
//! | Shard(0) × Replicate → Shard(0) | `Shard(0)` | `Shard(0)` | `Partial(Sum)`, f32 |
//! | Replicate × Replicate, dy partial | `Partial(Sum)` | `Partial(Sum)`, f32 | `Partial(Sum)`, f32 |
//!
//! The last row is a replicated projection whose output each rank uses for
//! its own part of the work (a grouped-query attention's keys and values,
//! read by each rank's own query heads): the products are linear in `dy`,
//! so each rank's share stays a partial sum, reduced once where it is
//! needed (the weight's gradient at the parameter, `dx` with the other
//! partial input gradients) rather than as an activation-sized `dy`.
//!
//! These are the column and row layers' backward GEMMs: products in the
//! operands' dtype, accumulated in f32; `dw` and partial sums stay f32 (a
//! partial is rounded once, after its reduction), `dx` is x's dtype. No
//! communication here: a `Partial` dx is reduced by the mapping before it.

use super::autograd::placed;
use super::dtensor::DTensor;
use super::matmul_plan::MatmulOptions;
use super::placement::Placement;
use super::tied_head;
use crate::element::{DType, ReduceOp};
use crate::error::Result;
use crate::kernels::GemmOptions;

/// `(dx, dw)` for `y = x·w(ᵀ)` given `dy`; no `dw` for a quantized `w`
/// (frozen: the gradient still reaches `x`).
pub(super) fn product_vjp(
    x: &DTensor,
    w: &DTensor,
    dy: &DTensor,
    opts: MatmulOptions,
) -> Result<(DTensor, Option<DTensor>)> {
    const SUM: Placement = Placement::Partial(ReduceOp::Sum);
    let t = opts.transpose_w;
    let (dy_at, dx_placement, dw_placement) = match (x.placement(), w.placement()) {
        (Placement::Replicate, Placement::Shard(d)) if x.mesh().size() > 1 => {
            (Placement::Shard(1), SUM, Placement::Shard(d))
        }
        (Placement::Shard(1), wp @ Placement::Shard(_)) if x.mesh().size() > 1 => {
            (Placement::Replicate, Placement::Shard(1), wp)
        }
        (Placement::Shard(0), Placement::Replicate) if x.mesh().size() > 1 => {
            (Placement::Shard(0), Placement::Shard(0), SUM)
        }
        (Placement::Replicate, Placement::Replicate)
            if x.mesh().size() > 1 && dy.placement() == SUM =>
        {
            (SUM, SUM, SUM)
        }
        (xp, wp) => (xp, xp, wp),
    };
    // In the operands' dtype, as the forward computed.
    let dy = if dy_at == SUM {
        dy.clone()
    } else {
        placed(dy, dy_at)?
    };
    let dy = dy.cast(x.dtype())?;
    let dx_dtype = if dx_placement == SUM {
        DType::F32
    } else {
        x.dtype()
    };
    let n = x.shards().len();
    let mut dx = Vec::with_capacity(n);
    let mut dw = Vec::with_capacity(n);
    for r in 0..n {
        let (xs, ws, dys) = (&x.shards()[r], &w.shards()[r], &dy.shards()[r]);
        // dx = dy·w (w stored [N, K]) or dy·wᵀ (w stored [K, N]); w's packs
        // kept. dw = dyᵀ·x ([N, K]) or xᵀ·dy ([K, N]), in f32. Block by
        // block where dy or w is past one binding (a tied head).
        let opts = (
            GemmOptions {
                trans_b: !t,
                out_dtype: Some(dx_dtype),
                ..Default::default()
            },
            GemmOptions {
                trans_a: true,
                out_dtype: Some(DType::F32),
                ..Default::default()
            },
        );
        let (dxr, dwr) = tied_head::product_vjp(dys, xs, ws, t, opts)?;
        dx.push(dxr);
        dw.extend(dwr);
    }
    let dx = x.with_shards_in_units(dx, x.shape().to_vec(), dx_placement, x.shard_unit());
    let dw = (dw.len() == n)
        .then(|| w.with_shards_in_units(dw, w.shape().to_vec(), dw_placement, w.shard_unit()));
    Ok((dx, dw))
}
