//! What a shard-by-shard product is asked ([`MatmulOptions`]) and the
//! checks every product runs before it records anything ([`plan`]): shapes,
//! dtypes, which placements multiply shard by shard, and the bias's and
//! multiplier's. The product (`product.rs`), its VJP (`matmul_grad.rs`),
//! the public entry points (`matmul.rs`) and the paired products
//! (`paired.rs`) all sit above it.

use super::checks::{check_bias, dims2, expect_aligned, expect_same_mesh};
use super::dtensor::DTensor;
use super::placement::Placement;
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};

/// How [`DTensor::matmul_with`] multiplies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MatmulOptions {
    /// `w` is stored `[N, K]` and used transposed (a layer's `[out, in]` weight).
    pub transpose_w: bool,
    /// y's dtype (f32 or f16); `None` means x's. Products accumulate in f32
    /// either way and are rounded once when stored.
    pub out_dtype: Option<DType>,
}

/// Both operands f32, or both f16, or x f32 and w a weight kept in bf16,
/// f16 or a quantized type; the output f32 or f16.
pub(super) fn check_dtypes(op: &'static str, x: &DTensor, w: &DTensor, out: DType) -> Result<()> {
    if !matches!(x.dtype(), DType::F32 | DType::F16) {
        return Err(Error::DTypeMismatch {
            op,
            expected: DType::F32,
            got: x.dtype(),
        });
    }
    let narrow_w =
        x.dtype() == DType::F32 && matches!(w.dtype(), DType::BF16 | DType::F16 | DType::Quant(_));
    if w.dtype() != x.dtype() && !narrow_w {
        return Err(Error::DTypeMismatch {
            op,
            expected: x.dtype(),
            got: w.dtype(),
        });
    }
    if !matches!(out, DType::F32 | DType::F16) {
        return Err(Error::invalid(
            op,
            format!("out_dtype must be F32 or F16, got {out:?}"),
        ));
    }
    Ok(())
}

/// A checked product: y's shape `[t, n]`, its placement and shard unit.
pub(super) struct Plan {
    pub(super) t: usize,
    pub(super) n: usize,
    pub(super) placement: Placement,
    pub(super) unit: usize,
}

/// The checks of `act(x·w (+ bias)) (⊙ up)`: shapes, dtypes, placements
/// (which pairs multiply shard by shard) and the bias's and up's.
pub(super) fn plan(
    x: &DTensor,
    w: &DTensor,
    bias: Option<&DTensor>,
    opts: MatmulOptions,
    up: Option<&DTensor>,
) -> Result<Plan> {
    const OP: &str = "DTensor::matmul";
    expect_same_mesh(OP, x, w)?;
    let [t, k] = dims2(OP, "x [T, K]", x)?;
    let w_dims = if opts.transpose_w {
        "w [N, K]"
    } else {
        "w [K, N]"
    };
    let [w0, w1] = dims2(OP, w_dims, w)?;
    // w's dims by role.
    let (k_dim, n_dim) = if opts.transpose_w { (1, 0) } else { (0, 1) };
    let (kw, n) = if opts.transpose_w { (w1, w0) } else { (w0, w1) };
    if kw != k {
        return Err(Error::shape(
            OP,
            format!("{w_dims} with K = {k} (x's columns)"),
            w.shape(),
        ));
    }
    let out_dtype = opts.out_dtype.unwrap_or(x.dtype());
    check_dtypes(OP, x, w, out_dtype)?;
    let (placement, unit) = match (x.placement(), w.placement()) {
        (Placement::Replicate, Placement::Shard(d)) if d == n_dim => {
            (Placement::Shard(1), w.shard_unit())
        }
        (Placement::Shard(1), Placement::Shard(d)) if d == k_dim => {
            expect_aligned(OP, (x, 1, "x's K (dim 1)"), (w, k_dim, "w's K"))?;
            (Placement::Partial(ReduceOp::Sum), 1)
        }
        (Placement::Replicate, Placement::Replicate) => (Placement::Replicate, 1),
        (Placement::Shard(0), Placement::Replicate) => (Placement::Shard(0), x.shard_unit()),
        (xp, wp) => {
            return Err(Error::invalid(
                OP,
                format!(
                    "no shard-by-shard product of x placed {xp:?} and w placed {wp:?} \
                         (w's K is dim {k_dim}, its N dim {n_dim}): the pairs are x Replicate \
                         × w Shard({n_dim}), x Shard(1) × w Shard({k_dim}), x Replicate or \
                         Shard(0) × w Replicate; redistribute first"
                ),
            ));
        }
    };
    if let Some(b) = bias {
        // y's placement meets the bias's as in add_row.
        check_bias(OP, placement, n, b, (w, n_dim, "w's rows"))?;
    }
    if let Some(up) = up {
        expect_same_mesh(OP, x, up)?;
        if up.shape() != [t, n] || up.placement() != placement || up.shard_unit() != unit {
            return Err(Error::invalid(
                OP,
                format!(
                    "up must be shaped and placed as the product ([{t}, {n}], {placement:?} in \
                     units of {unit}), got {:?}, {:?} in units of {}",
                    up.shape(),
                    up.placement(),
                    up.shard_unit()
                ),
            ));
        }
    }
    Ok(Plan {
        t,
        n,
        placement,
        unit,
    })
}
