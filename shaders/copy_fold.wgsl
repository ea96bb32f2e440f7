// Block copy and fold kernels: the on-device copies and reductions of the shared-device
// collectives (all ranks on one wgpu device), and narrow / concat on one rank.
//
// Both tensors are viewed as [outer, dim, inner] around one dimension; a block
// of `len` indices along that dimension is moved from src (dimension size
// src_dim, window starting at src_start) to dst (dst_dim, dst_start):
//   copy_block: dst[o, dst_start + k, i] = src[o, src_start + k, i]
//   fold:       dst[...] = op(op(op(s0[...], s1[...]), s2[...]), s3[...])
//               (COUNT inputs, all with the same geometry; with ACCUMULATE
//               dst's old value comes first: op(dst[...], s0[...], ...))
// Data is bound as raw 32-bit words (array<u32>) so one module serves f32 and
// i32; the fold entries bitcast. i32 sums wrap (WGSL integer semantics),
// matching the host path's wrapping_add. Folding in participant order keeps
// the result bit-identical to the host-staged transport.
// Grid: one invocation per element (linear_id, WG: see grid.wgsl).

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

@compute @workgroup_size(WG)
fn copy_block(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) li: u32) {
    let t = linear_id(wg, nwg, li);
    if (t >= p.total) { return; }
    let ix = indices(t);
    dst[ix.y] = src[ix.x];
}

// One fused pass over up to four inputs: each input word is read once and
// the output written once (folding pairwise in place would read and write
// the accumulator once per input). Pipeline constants pick the operation
// and the number of inputs, so every variant is straight-line code.
override OP: u32 = 0u;          // 0: f32 sum, 1: f32 max, 2: i32 sum, 3: i32 max
override COUNT: u32 = 4u;       // inputs bound in this pass, 1..=4
override ACCUMULATE: bool = false;

@group(0) @binding(1) var<storage, read> in0: array<u32>;
@group(0) @binding(2) var<storage, read> in1: array<u32>;
@group(0) @binding(3) var<storage, read> in2: array<u32>;
@group(0) @binding(4) var<storage, read> in3: array<u32>;
@group(0) @binding(5) var<storage, read_write> out: array<u32>;

fn op1(x: u32, y: u32) -> u32 {
    switch OP {
        case 0u: { return bitcast<u32>(bitcast<f32>(x) + bitcast<f32>(y)); }
        case 1u: { return bitcast<u32>(max(bitcast<f32>(x), bitcast<f32>(y))); }
        case 2u: { return bitcast<u32>(bitcast<i32>(x) + bitcast<i32>(y)); }
        default: { return bitcast<u32>(max(bitcast<i32>(x), bitcast<i32>(y))); }
    }
}

@compute @workgroup_size(WG)
fn fold(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let t = linear_id(wg, nwg, li);
    if (t >= p.total) { return; }
    let ix = indices(t);
    var acc = in0[ix.x];
    if (ACCUMULATE) { acc = op1(out[ix.y], acc); }
    if (COUNT > 1u) { acc = op1(acc, in1[ix.x]); }
    if (COUNT > 2u) { acc = op1(acc, in2[ix.x]); }
    if (COUNT > 3u) { acc = op1(acc, in3[ix.x]); }
    out[ix.y] = acc;
}

// Flat fast path: the block is one contiguous run (in[s0 + t], out[d0 + t])
// with s0, d0 and total multiples of 4, so each invocation moves one vec4
// (four words) with no index arithmetic. On CPU adapters this is several
// times faster than `fold`, which pays two divisions and two modulos per
// element. The same bindings viewed as vec4 words; `total`, `src_start` and
// `dst_start` are in vec4 units here.
@group(0) @binding(1) var<storage, read> in0_4: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> in1_4: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> in2_4: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read> in3_4: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read_write> out4: array<vec4<u32>>;

fn op4(x: vec4<u32>, y: vec4<u32>) -> vec4<u32> {
    switch OP {
        case 0u: { return bitcast<vec4<u32>>(bitcast<vec4<f32>>(x) + bitcast<vec4<f32>>(y)); }
        case 1u: { return bitcast<vec4<u32>>(max(bitcast<vec4<f32>>(x), bitcast<vec4<f32>>(y))); }
        case 2u: { return bitcast<vec4<u32>>(bitcast<vec4<i32>>(x) + bitcast<vec4<i32>>(y)); }
        default: { return bitcast<vec4<u32>>(max(bitcast<vec4<i32>>(x), bitcast<vec4<i32>>(y))); }
    }
}

// The folded vec4 of the inputs' word s (out4[d]'s old value first with ACCUMULATE).
fn fold4(s: u32, d: u32) -> vec4<u32> {
    var acc = in0_4[s];
    if (ACCUMULATE) { acc = op4(out4[d], acc); }
    if (COUNT > 1u) { acc = op4(acc, in1_4[s]); }
    if (COUNT > 2u) { acc = op4(acc, in2_4[s]); }
    if (COUNT > 3u) { acc = op4(acc, in3_4[s]); }
    return acc;
}

@compute @workgroup_size(WG)
fn fold_flat4(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) li: u32) {
    let t = linear_id(wg, nwg, li);
    if (t >= p.total) { return; }
    out4[p.dst_start + t] = fold4(p.src_start + t, p.dst_start + t);
}

// An f32 sum over whole tensors with a residual added last: a row-parallel
// layer's all-reduce and its residual branch's add in one pass, with the two
// steps' bits (`res + sum`, as `axpby(1, res, 1, sum)` rounds it).
@group(0) @binding(6) var<storage, read> res4: array<vec4<u32>>;

@compute @workgroup_size(WG)
fn fold_flat4_add(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) li: u32) {
    let t = linear_id(wg, nwg, li);
    if (t >= p.total) { return; }
    let sum = bitcast<vec4<f32>>(fold4(t, t));
    out4[t] = bitcast<vec4<u32>>(bitcast<vec4<f32>>(res4[t]) + sum);
}
