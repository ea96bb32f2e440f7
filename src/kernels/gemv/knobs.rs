//! What the small-M kernel's files share: its limits, the knobs its
//! measurement picks from ([`Knob`]), and the bindings and uniform every
//! entry records with.

use crate::device::Access;

/// Products one grouped dispatch takes (`group.rs`).
pub(super) const GROUP_OF: usize = 4;

/// The most rows of A the GEMV kernel takes.
pub const GEMV_MAX_ROWS: usize = 8;

/// The serial kernel's knob, `c`: a workgroup of `16·c` invocations. Every
/// `c` computes the same bits (an invocation's columns and the order of
/// their sums do not change).
pub const CANDIDATES: [usize; 4] = [1, 2, 4, 8];

/// A variant the GEMV's measurement (`device::tune`) picks from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Knob {
    /// The serial entries, a workgroup of `16·c` invocations ([`CANDIDATES`]).
    Serial(usize),
    /// The split-K entry (`B [N, K]` only), `c` columns a workgroup
    /// ([`SPLIT_CANDIDATES`](super::SPLIT_CANDIDATES)): other bits than `Serial`, within tolerance.
    Split(usize),
    /// The texture entries (CPU adapters, a kept weight): (columns an
    /// invocation, workgroup size) ([`TEXTURE_CANDIDATES`](super::TEXTURE_CANDIDATES)); `Serial`'s bits.
    Texture((usize, usize)),
}

/// `c` where nothing was measured: 32 invocations a workgroup (small, so a
/// one-token product over a few hundred columns still spreads over several
/// workgroups, which CPU adapters run on separate threads).
pub(super) const GUESS: usize = 2;

/// Products with fewer weight elements than this take [`GUESS`]
/// unmeasured: they take microseconds, less than measuring them would.
pub(super) const TUNE_MIN_WEIGHTS: usize = 1 << 18;

pub(super) const BINDINGS: &[Access] = &[
    Access::Read,
    Access::Read,
    Access::Read,
    Access::Read,
    Access::ReadWrite,
];

/// How A and B are bound: the combinations the layouts need.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Binding {
    /// A and B as vec4s (`[N, K]` B, K a multiple of 4).
    BothVec4,
    /// A element-wise, B as vec4s (`[K, N]` B, N a multiple of 4).
    BVec4,
    /// Both element-wise (ragged).
    Scalar,
    /// A as vec4s, bf16 B `[N, K]` eight a load (K a multiple of 8).
    Bf16Vec8,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct Params {
    pub(super) m: u32,
    pub(super) n: u32,
    pub(super) k: u32,
    pub(super) flags: u32,
    pub(super) groups: u32,
    pub(super) shift: u32,
    pub(super) _pad: [u32; 2],
}
