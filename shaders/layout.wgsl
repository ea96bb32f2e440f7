// Layout kernels: copy a slab of a tensor seen as [outer, dim, inner].
// narrow: out[o, j, i] = src[o, start + j, i]  for j < len
// place:  out[o, start + j, i] = src[o, j, i]  (out is a fresh tensor holding
//         `dst` elsewhere; used to concatenate parts one at a time)
// One invocation per output (narrow) or source (place) element; works for any
// 4-byte element type since it moves bits.

struct Params {
    outer: u32,
    len: u32,      // extent of the slab along dim
    inner: u32,
    src_dim: u32,  // extent of dim in src
    dst_dim: u32,  // extent of dim in out
    start: u32,    // offset along dim (in src for narrow, in out for place)
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

fn linear_id(wg: vec3<u32>, nwg: vec3<u32>, li: u32) -> u32 {
    return (wg.y * nwg.x + wg.x) * 256u + li;
}

@compute @workgroup_size(256)
fn narrow(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) li: u32) {
    let idx = linear_id(wg, nwg, li);
    let total = p.outer * p.len * p.inner;
    if (idx >= total) { return; }
    let i = idx % p.inner;
    let j = (idx / p.inner) % p.len;
    let o = idx / (p.inner * p.len);
    out[idx] = src[(o * p.src_dim + p.start + j) * p.inner + i];
}

@compute @workgroup_size(256)
fn place(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) li: u32) {
    let idx = linear_id(wg, nwg, li);
    let total = p.outer * p.len * p.inner;
    if (idx >= total) { return; }
    let i = idx % p.inner;
    let j = (idx / p.inner) % p.len;
    let o = idx / (p.inner * p.len);
    out[(o * p.dst_dim + p.start + j) * p.inner + i] = src[idx];
}
