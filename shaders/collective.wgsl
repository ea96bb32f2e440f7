// Collective kernels for shared-device meshes (all ranks on one wgpu device).
//
// Both tensors are viewed as [outer, dim, inner] around one dimension; a block
// of `len` indices along that dimension is moved from src (dimension size
// src_dim, window starting at src_start) to dst (dst_dim, dst_start):
//   copy_block: dst[o, dst_start + k, i] = src[o, src_start + k, i]
//   sum_* / max_*: dst[...] = op(dst[...], src[...])   (in place on dst)
// Data is bound as raw 32-bit words (array<u32>) so one module serves f32 and
// i32; the reduce entries bitcast. i32 sums wrap (WGSL integer semantics),
// matching the host path's wrapping_add.
// Grid: 256 invocations per workgroup, workgroups folded into x/y (see
// fold_workgroups in src/device/local.rs); linear id = wg.y * nwg.x + wg.x.

struct Params {
    outer: u32,
    len: u32,
    inner: u32,
    total: u32,
    src_dim: u32,
    src_start: u32,
    dst_dim: u32,
    dst_start: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;

fn linear_id(wg: vec3<u32>, nwg: vec3<u32>, li: u32) -> u32 {
    return (wg.y * nwg.x + wg.x) * 256u + li;
}

// (src index, dst index) of the block's t-th element; t < p.total, so inner
// and len are non-zero here.
fn indices(t: u32) -> vec2<u32> {
    let i = t % p.inner;
    let rest = t / p.inner;
    let k = rest % p.len;
    let o = rest / p.len;
    let s = (o * p.src_dim + p.src_start + k) * p.inner + i;
    let d = (o * p.dst_dim + p.dst_start + k) * p.inner + i;
    return vec2<u32>(s, d);
}

@compute @workgroup_size(256)
fn copy_block(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) li: u32) {
    let t = linear_id(wg, nwg, li);
    if (t >= p.total) { return; }
    let ix = indices(t);
    dst[ix.y] = src[ix.x];
}

@compute @workgroup_size(256)
fn sum_f32(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) li: u32) {
    let t = linear_id(wg, nwg, li);
    if (t >= p.total) { return; }
    let ix = indices(t);
    dst[ix.y] = bitcast<u32>(bitcast<f32>(dst[ix.y]) + bitcast<f32>(src[ix.x]));
}

@compute @workgroup_size(256)
fn max_f32(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) li: u32) {
    let t = linear_id(wg, nwg, li);
    if (t >= p.total) { return; }
    let ix = indices(t);
    dst[ix.y] = bitcast<u32>(max(bitcast<f32>(dst[ix.y]), bitcast<f32>(src[ix.x])));
}

@compute @workgroup_size(256)
fn sum_i32(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) li: u32) {
    let t = linear_id(wg, nwg, li);
    if (t >= p.total) { return; }
    let ix = indices(t);
    dst[ix.y] = bitcast<u32>(bitcast<i32>(dst[ix.y]) + bitcast<i32>(src[ix.x]));
}

@compute @workgroup_size(256)
fn max_i32(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) li: u32) {
    let t = linear_id(wg, nwg, li);
    if (t >= p.total) { return; }
    let ix = indices(t);
    dst[ix.y] = bitcast<u32>(max(bitcast<i32>(dst[ix.y]), bitcast<i32>(src[ix.x])));
}

// Flat fast path: the block is one contiguous run (src[s0 + t], dst[d0 + t])
// with s0, d0 and total multiples of 4, so each invocation moves one vec4
// (four words) with no index arithmetic. On CPU adapters this is several
// times faster than the generic entries above, which pay two divisions and
// two modulos per element. The same bindings viewed as vec4 words; `total`,
// `src_start` and `dst_start` are in vec4 units here.
@group(0) @binding(1) var<storage, read> src4: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> dst4: array<vec4<u32>>;

@compute @workgroup_size(256)
fn sum_f32_flat4(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) li: u32) {
    let t = linear_id(wg, nwg, li);
    if (t >= p.total) { return; }
    let d = p.dst_start + t;
    dst4[d] = bitcast<vec4<u32>>(bitcast<vec4<f32>>(dst4[d]) + bitcast<vec4<f32>>(src4[p.src_start + t]));
}

@compute @workgroup_size(256)
fn max_f32_flat4(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) li: u32) {
    let t = linear_id(wg, nwg, li);
    if (t >= p.total) { return; }
    let d = p.dst_start + t;
    dst4[d] = bitcast<vec4<u32>>(max(bitcast<vec4<f32>>(dst4[d]), bitcast<vec4<f32>>(src4[p.src_start + t])));
}

@compute @workgroup_size(256)
fn sum_i32_flat4(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) li: u32) {
    let t = linear_id(wg, nwg, li);
    if (t >= p.total) { return; }
    let d = p.dst_start + t;
    dst4[d] = bitcast<vec4<u32>>(bitcast<vec4<i32>>(dst4[d]) + bitcast<vec4<i32>>(src4[p.src_start + t]));
}

@compute @workgroup_size(256)
fn max_i32_flat4(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) li: u32) {
    let t = linear_id(wg, nwg, li);
    if (t >= p.total) { return; }
    let d = p.dst_start + t;
    dst4[d] = bitcast<vec4<u32>>(max(bitcast<vec4<i32>>(dst4[d]), bitcast<vec4<i32>>(src4[p.src_start + t])));
}
