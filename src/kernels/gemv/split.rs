//! The small-M GEMM's split-K entry for GPUs (`gemv_nk_split`,
//! `shaders/gemv_split.wgsl`, `B [N, K]`): a team of `TEAM` (32) invocations
//! per column of C splits K with coalesced loads and adds its lanes by a
//! tree in workgroup memory. Its bits depend on `TEAM` (32) only (fixed), not
//! on the measured columns per workgroup; they differ from the serial
//! entries' (another order of sums) within the GEMM's tolerance. Ranks
//! agree as long as they choose alike: `device::tune` keeps one choice per
//! adapter and driver in a process.

/// The entry's name in the composed GEMV module.
pub(super) const ENTRY: &str = "gemv_nk_split";

/// Invocations per column of C (the shader's `TEAM`): a warp on NVIDIA and
/// Apple, half a wave64 on AMD. Changing it changes the bits.
pub(super) const TEAM: usize = 32;

/// The split entry's knob, `c`: `c` columns, `32·c` invocations a
/// workgroup. Every `c` computes the same bits.
pub const SPLIT_CANDIDATES: [usize; 3] = [2, 4, 8];

/// `c` where nothing was measured: 64 invocations, so a product of a few
/// hundred columns still spreads over a hundred or more workgroups.
pub(super) const GUESS: usize = 2;
