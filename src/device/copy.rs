//! Copying a region of one tensor into another on the same device
//! ([`copy_region`]), block by block where either is stored in row blocks:
//! what collectives and slicing build on.

use super::tensor::LocalTensor;
use crate::error::{Error, Result};

/// Record a copy of `count` elements from `src[src_off..]` into `dst[dst_off..]`
/// (same device; offsets in elements), block by block where either is blocked.
pub(crate) fn copy_region(
    src: &LocalTensor,
    src_off: usize,
    dst: &LocalTensor,
    dst_off: usize,
    count: usize,
) -> Result<()> {
    if !src.is_blocked() && !dst.is_blocked() {
        return copy_one(src, src_off, dst, dst_off, count);
    }
    if src_off + count > src.len() || dst_off + count > dst.len() {
        return Err(Error::invalid("copy", "copy region out of bounds"));
    }
    // Walk both block lists over the copied range, one copy per overlap.
    let spans = |t: &LocalTensor| {
        let mut at = 0;
        t.blocks()
            .iter()
            .map(|b| {
                at += b.len();
                (at - b.len(), b.clone())
            })
            .collect::<Vec<_>>()
    };
    let (s, d) = (spans(src), spans(dst));
    let mut done = 0;
    while done < count {
        let (from, to) = (src_off + done, dst_off + done);
        let find = |spans: &[(usize, LocalTensor)], at: usize| {
            spans
                .iter()
                .rev()
                .find(|(start, b)| *start <= at && at < start + b.len())
                .cloned()
                .expect("offset within the tensor")
        };
        let ((s0, sb), (d0, db)) = (find(&s, from), find(&d, to));
        let n = (count - done)
            .min(s0 + sb.len() - from)
            .min(d0 + db.len() - to);
        copy_one(&sb, from - s0, &db, to - d0, n)?;
        done += n;
    }
    Ok(())
}

/// [`copy_region`] between one-buffer tensors.
fn copy_one(
    src: &LocalTensor,
    src_off: usize,
    dst: &LocalTensor,
    dst_off: usize,
    count: usize,
) -> Result<()> {
    if src.device().id() != dst.device().id() {
        return Err(Error::RankMismatch {
            op: "copy",
            a: src.rank_index(),
            b: dst.rank_index(),
        });
    }
    if src_off + count > src.len() || dst_off + count > dst.len() {
        return Err(Error::invalid("copy", "copy region out of bounds"));
    }
    if src.dtype() != dst.dtype() {
        return Err(Error::DTypeMismatch {
            op: "copy",
            expected: dst.dtype(),
            got: src.dtype(),
        });
    }
    if count == 0 {
        return Ok(());
    }
    let size = src.dtype().size_bytes() as u64;
    let bytes = (count as u64 * size).next_multiple_of(4);
    // Whole words only: an odd f16 count is rounded up, which may only spill
    // into the destination's pad past its last element.
    let aligned = (src_off as u64 * size).is_multiple_of(4)
        && (dst_off as u64 * size).is_multiple_of(4)
        && (bytes == count as u64 * size || dst_off + count == dst.len());
    if !aligned {
        return Err(Error::invalid(
            "copy",
            "f16 regions must start at an even element and have an even length (or end the destination); cast to f32 to move odd f16 regions",
        ));
    }
    dst.bump_version();
    let (s, d) = (src.buffer("copy")?.clone(), dst.buffer("copy")?.clone());
    src.device().record(|enc| {
        enc.copy_buffer_to_buffer(
            &s,
            src_off as u64 * size,
            &d,
            dst_off as u64 * size,
            Some(bytes),
        )
    });
    Ok(())
}
