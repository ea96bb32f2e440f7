//! What the GEMM derives from a weight B (a pack, a texture copy), kept
//! with B's buffer until a kernel writes it in place ([`GemmOptions::weight`](super::GemmOptions::weight);
//! the version and the keeping are `device/derived.rs`'s).

use crate::device::{LocalTensor, settings};
use crate::error::Result;

/// `make()`, kept with `b`'s buffer under `key` when `cache` (B is a weight)
/// and the pack cache is on, from its second use between writes of `b`.
pub(super) fn of_b<T: Clone + Send + Sync + 'static>(
    b: &LocalTensor,
    cache: bool,
    key: impl FnOnce() -> String,
    make: impl FnOnce() -> Result<T>,
) -> Result<T> {
    // `WGPU_TP_PACK_CACHE`.
    if !(cache && settings::current().pack_cache) {
        return make();
    }
    // The view's shape and rank are part of what was derived.
    let key = format!(
        "{}|{:?}|{:?}|rank {}",
        key(),
        b.shape(),
        b.dtype(),
        b.rank_index()
    );
    b.derived(key, make)
}
