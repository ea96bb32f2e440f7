// Cast between f32 and f16: out[i] = Out(x[i]); narrowing gives a
// neighbouring f16 (WGSL leaves which one to the driver). Composed in Rust after
// `enable f16;`, the In / Out aliases and the grid prefix (src/kernels/cast.rs),
// so one file serves both directions. Grid: one invocation per element.

struct Params {
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<In>;
@group(0) @binding(2) var<storage, read_write> out: array<Out>;

@compute @workgroup_size(WG)
fn convert(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) li: u32) {
    let i = linear_id(wg, nwg, li);
    if (i >= p.n) { return; }
    out[i] = Out(x[i]);
}
