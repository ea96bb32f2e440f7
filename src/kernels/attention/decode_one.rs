//! Cached decoding of one new token per sequence in one dispatch
//! (`shaders/attention_decode.wgsl`): the cache append, the scores, the
//! softmax and the mix that [`decode_into`](super::gqa) otherwise records as
//! four kernels, with the same sums in the same order (the same bits). A
//! CPU adapter pays a fixed cost per dispatch that exceeded those kernels'
//! work when decoding. With rotary tables it rotates the new queries and
//! keys first, as `kernels::rotary_pair` would (one dispatch fewer again).
//! Taken on CPU adapters (not GPUs) where head_dim (at most 256) and the
//! views are whole vec4s (whole vec8s to rotate) and the device binds eight
//! storage buffers; the separate kernels otherwise.

use super::launch::{Problem, View};
use super::params::Params;
use crate::device::{Access, Dispatch, KernelSpec, LocalTensor};
use crate::error::Result;

pub(super) const SOURCE: &str = concat!(
    include_str!("../../../shaders/attention_header.wgsl"),
    include_str!("../../../shaders/attention_decode.wgsl")
);
/// q, k, v; the cache, the scores and the output; cos and sin.
pub(super) const BINDINGS: &[Access] = &[
    Access::Read,
    Access::Read,
    Access::Read,
    Access::ReadWrite,
    Access::ReadWrite,
    Access::ReadWrite,
    Access::Read,
    Access::Read,
];

/// The longest head the kernel's workgroup copy of the query holds.
const MAX_HEAD_DIM: usize = 256;

/// Rotary tables `(cos, sin)`, each `[1, D/2]` f32.
pub(super) type Rope<'a> = Option<(&'a LocalTensor, &'a LocalTensor)>;

#[cfg(test)]
thread_local! {
    /// Whether this thread's decoding takes the four kernels (a test
    /// compares them).
    pub(super) static UNFUSED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Fused steps this thread recorded.
    pub(super) static RUNS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Whether the fused kernel takes `pr` with these views of q, k and v
/// (and rotates, with `rotate`).
pub(super) fn fits(pr: &Problem, views: [View; 3], any: &LocalTensor, rotate: bool) -> bool {
    #[cfg(test)]
    if UNFUSED.with(|c| c.get()) {
        return false;
    }
    // Not on GPUs: one workgroup per head sums its row serially there, where
    // the separate kernels' tiles run in parallel and a dispatch is cheap.
    pr.s.seq == 1
        && pr.g.softcap == 0.0
        && !any.device().is_gpu()
        && pr.s.heads > 0
        && pr.s.batch > 0
        && pr.s.head_dim.is_multiple_of(if rotate { 8 } else { 4 })
        && pr.s.head_dim <= MAX_HEAD_DIM
        && views.iter().all(View::whole_vec4s)
        && any.device().limits().max_storage_buffers_per_shader_stage >= BINDINGS.len() as u32
}

/// Record the fused step: `[q, k, v]` (tensors and views; q and k rotated
/// by `rope` first where given) at position `pr.past` appended to `cache`
/// (which has room for it), the scores into `scores` (`[B, H, 1, past +
/// 1]`, scratch) and the output into `out`.
pub(super) fn record(
    pr: &Problem,
    [q, k, v]: [(&LocalTensor, View); 3],
    rope: Rope,
    cache: &LocalTensor,
    scores: &LocalTensor,
    out: &LocalTensor,
) -> Result<()> {
    #[cfg(test)]
    RUNS.with(|c| c.set(c.get() + 1));
    let params = params(pr, [q.1, k.1, v.1], rope.is_some());
    let (cos, sin) = rope.unwrap_or((q.0, q.0));
    let spec = KernelSpec::new("attention_decode", SOURCE, BINDINGS, "attend_one").in_vec4s();
    Dispatch {
        spec: &spec,
        params: bytemuck::bytes_of(&params),
        buffers: &[q.0, k.0, v.0, cache, scores, out, cos, sin],
        workgroups: params.n as u64,
    }
    .record(q.0.device())
}

/// The step's parameters: one workgroup per (sequence, query head).
pub(super) fn params(pr: &Problem, [q, k, v]: [View; 3], rotate: bool) -> Params {
    let mut params = pr.params(pr.inv_sqrt_d(), false, q, k, v);
    params.n = (pr.s.batch * pr.s.heads) as u32;
    params.rotate = rotate as u32;
    params
}
