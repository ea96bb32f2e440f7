//! The attention entry points' argument checks: shapes, dtypes, ranks and
//! sizes against the device's limits, each an error that says what to pass.

use super::shape::{AttentionShape, elements};
use crate::device::{Device, LocalTensor};
use crate::element::DType;
use crate::error::{Error, Result};

/// A tensor of `dims` must fit one binding and 32-bit shader indices.
pub(super) fn check_size(
    op: &'static str,
    what: &'static str,
    dims: &[usize],
    dev: &Device,
) -> Result<()> {
    let needed = elements(dims).saturating_mul(4);
    let l = dev.limits();
    let limits = [
        (
            l.max_storage_buffer_binding_size,
            "max_storage_buffer_binding_size",
        ),
        (l.max_buffer_size, "max_buffer_size"),
        (
            4 * u32::MAX as u64,
            "2^32 elements, the shaders' 32-bit indices",
        ),
    ];
    for (limit, limit_name) in limits {
        if needed > limit {
            return Err(Error::TooLarge {
                op,
                what,
                needed,
                limit,
                limit_name,
            });
        }
    }
    Ok(())
}

/// Check `s` itself and that `qkv` is its fused F32 input.
pub(super) fn check_qkv(op: &'static str, qkv: &LocalTensor, s: &AttentionShape) -> Result<()> {
    qkv.expect_dtype(op, DType::F32)?;
    if s.heads > 0 && s.head_dim == 0 {
        return Err(Error::invalid(
            op,
            format!("{} heads of head_dim 0: give head_dim ≥ 1", s.heads),
        ));
    }
    let fits = |dims: &[usize]| {
        dims.iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .is_some()
    };
    if !fits(&[s.batch, s.seq]) || !fits(&[3, s.heads, s.head_dim]) {
        return Err(Error::invalid(op, format!("{s:?} overflows usize")));
    }
    let want = s.qkv_shape();
    if qkv.shape() != want {
        return Err(Error::ShapeMismatch {
            op,
            expected: format!(
                "fused QKV [batch·seq, 3·heads·head_dim] = {want:?} for batch {}, seq {}, heads {}, head_dim {}",
                s.batch, s.seq, s.heads, s.head_dim
            ),
            got: format!("{:?}", qkv.shape()),
        });
    }
    check_size(op, "the fused QKV activation", &want, qkv.device())
}

/// Check that `x` is an F32 tensor of `want` on `anchor`'s rank.
pub(super) fn check_operand(
    op: &'static str,
    name: &str,
    anchor: &LocalTensor,
    x: &LocalTensor,
    want: &[usize],
) -> Result<()> {
    x.expect_dtype(op, DType::F32)?;
    anchor.same_rank(op, x)?;
    if x.shape() != want {
        return Err(Error::ShapeMismatch {
            op,
            expected: format!("{name} {want:?}"),
            got: format!("{:?}", x.shape()),
        });
    }
    Ok(())
}
