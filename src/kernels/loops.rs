//! Kernels whose invocation walks a whole row or column in one loop check
//! the walk against the device's loop limit first: Mesa < 24's llvmpipe
//! ends an invocation's loops, silently, after about 65535 iterations, and
//! a cut-short sum is a wrong answer with no error.

use crate::device::{Device, loop_limit};
use crate::error::{Error, Result};

/// `Ok` when one invocation of `op` may walk `count` elements on `device`,
/// else an error naming `what` and saying how to avoid it.
pub(crate) fn check_walk(
    op: &'static str,
    device: &Device,
    what: &'static str,
    count: usize,
    hint: &'static str,
) -> Result<()> {
    match loop_limit(device) {
        Some(limit) if count as u64 >= limit => Err(Error::Unsupported {
            op,
            what,
            feature: "loops past 65535 iterations",
            adapter: device.adapter_info().name.clone(),
            hint,
        }),
        _ => Ok(()),
    }
}
