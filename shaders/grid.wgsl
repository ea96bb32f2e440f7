// Shared prefix of every kernel family that runs one invocation per element
// (composed in front of the family's source in Rust: WGSL has no include).
// WG invocations per workgroup (src/kernels/grid.rs passes the same number
// to the dispatch); workgroups are folded into x/y past the per-dimension
// limit (fold_workgroups in src/device/dispatch.rs), so the element index is
// (wg.y * nwg.x + wg.x) * WG + li and kernels skip indices past their work.
// The pipeline cache sets WG per device: 256, or less where the device
// allows less (Device::grid_workgroup in src/device/context.rs).
override WG: u32 = 256u;

fn linear_id(wg: vec3<u32>, nwg: vec3<u32>, li: u32) -> u32 {
    return (wg.y * nwg.x + wg.x) * WG + li;
}

