//! Checking what a model will allocate against the memory there is, before
//! allocating: a configuration past it is an [`Error::OutOfMemory`] naming
//! the bytes, rather than an abort in the allocator or minutes of work.
//!
//! On a CPU adapter (lavapipe, llvmpipe, WARP) device memory is the host's,
//! so every rank of this process draws on the host's available memory
//! (`MemAvailable` in `/proc/meminfo`). wgpu reports no device memory for
//! GPUs: there each tensor is still checked against the device's buffer
//! limits when it is allocated.

use super::mesh::Mesh;
use crate::error::{Error, Result};

impl Mesh {
    /// Whether `bytes`, summed over this process's ranks, fit the memory
    /// they would come from (see the module docs); `what` names them in the
    /// error. Sizes that overflow are given saturated (`u128`).
    pub fn check_memory(&self, op: &'static str, what: &str, bytes: u128) -> Result<()> {
        let cpu = self.ranks().iter().any(|r| r.device().is_cpu());
        let available = if cpu { host_available() } else { None };
        match available {
            Some(available) if bytes > available as u128 => Err(Error::OutOfMemory {
                op,
                what: what.to_string(),
                needed: bytes.min(u64::MAX as u128) as u64,
                available,
                pool: "this host's available memory (the CPU adapter's device memory)".into(),
            }),
            _ => Ok(()),
        }
    }
}

impl Mesh {
    /// The bytes this process's ranks hold of `split` elements divided
    /// over all ranks and `whole` elements every rank holds, `each` bytes
    /// an element.
    pub(crate) fn held_bytes(&self, split: u128, whole: u128, each: u128) -> u128 {
        let ranks = self.ranks().len() as u128;
        let share = split.saturating_mul(ranks) / self.size().max(1) as u128;
        share
            .saturating_add(whole.saturating_mul(ranks))
            .saturating_mul(each)
    }
}

/// The host's available memory in bytes (`MemAvailable`), where it can be read.
pub(crate) fn host_available() -> Option<u64> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}
