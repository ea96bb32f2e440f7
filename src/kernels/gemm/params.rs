//! What every GEMM kernel is bound with: the uniform ([`Params`]) and the
//! binding layout after it.

use crate::device::Access;
use crate::error::{Error, Result};

/// A GEMM kernel's bindings after the uniform: A and B bound as `operands`,
/// then bias, accumulate (read) and C (written).
pub(super) const fn gemm_bindings(operands: Access) -> [Access; 5] {
    [
        operands,
        operands,
        Access::Read,
        Access::Read,
        Access::ReadWrite,
    ]
}

/// The buffer kernels (register and tiled) reading A and B from storage
/// buffers.
pub(super) const BINDINGS: &[Access] = &gemm_bindings(Access::Read);

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct Params {
    pub(super) m: u32,
    pub(super) n: u32,
    pub(super) k: u32,
    pub(super) flags: u32,
    pub(super) groups_n: u32,
    pub(super) groups: u32,
    pub(super) lda: u32,
    pub(super) ldb: u32,
}

impl Params {
    /// The uniform for an M×N×K product with `flags`, a workgroup covering
    /// `span` = (rows, columns) of C, and operand row strides `(lda, ldb)`.
    pub(super) fn new(
        m: usize,
        n: usize,
        k: usize,
        flags: u32,
        (tile_m, tile_n): (usize, usize),
        (lda, ldb): (usize, usize),
    ) -> Result<Params> {
        let groups_n = n.div_ceil(tile_n);
        let groups = m.div_ceil(tile_m) as u64 * groups_n as u64;
        Ok(Params {
            m: m as u32,
            n: n as u32,
            k: k as u32,
            flags,
            groups_n: groups_n as u32,
            groups: u32::try_from(groups).map_err(|_| Error::invalid("gemm", "grid too large"))?,
            lda: lda as u32,
            ldb: ldb as u32,
        })
    }
}
