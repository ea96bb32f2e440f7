//! The attention shader's uniform (`Params` in `shaders/attention_header.wgsl`),
//! filled by a problem (`launch.rs`) and completed by the entries that run
//! it (`entries.rs`: the texture shift).

/// The shader's `Params`. Every index the kernels form is below the length of
/// a tensor `check_size` accepted, so the `u32` casts cannot truncate.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct Params {
    pub(super) batch: u32,
    pub(super) heads: u32,
    pub(super) tq: u32,
    pub(super) tk: u32,
    pub(super) d: u32,
    pub(super) past: u32,
    pub(super) scale: f32,
    pub(super) trans: u32,
    pub(super) a: [u32; 4],
    pub(super) b: [u32; 4],
    pub(super) o: [u32; 4],
    pub(super) n: u32,
    pub(super) group: u32,
    pub(super) q0: u32,
    pub(super) kv0: u32,
    pub(super) window: u32,
    pub(super) kv_heads: u32,
    pub(super) shift: u32,
    pub(super) rotate: u32,
}
