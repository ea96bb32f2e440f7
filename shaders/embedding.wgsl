// Vocab-parallel embedding, one rank's piece. The table holds global rows
// [start, start + rows); an id outside that range (negative included) is not
// owned: lookup gives a zero row, backward skips it.
// Grid: workgroups folded into x/y (fold_workgroups in src/device/dispatch.rs);
// linear id = (wg.y * nwg.x + wg.x) * workgroup size + local index.
// src/kernels/embedding.rs composes in front the alias Src (how src is
// bound: f32, or u32 words of two bf16 for a bf16 table) and
// ld_src(i) -> f32, element i of src widened.

struct Params {
    // lookup: n * dim output elements; backward: unused.
    total: u32,
    // Tokens (flattened ids).
    n: u32,
    dim: u32,
    rows: u32,
    // Global id of table row 0; 0 <= start <= i32 max - rows (checked on the host).
    start: i32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: array<i32>;
@group(0) @binding(2) var<storage, read> src: array<Src>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

// Local row of `id`, or -1 when this shard does not own it. Compare before
// subtracting so a very negative id cannot wrap into range.
fn local_row(id: i32) -> i32 {
    if (id < p.start) { return -1; }
    let r = id - p.start;
    if (u32(r) >= p.rows) { return -1; }
    return r;
}

// out[i, c] = src[id_i - start, c] if owned, else 0.   (src = table)
@compute @workgroup_size(WG)
fn lookup(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) li: u32) {
    let idx = linear_id(wg, nwg, li);
    if (idx >= p.total) { return; }
    let i = idx / p.dim;
    let c = idx - i * p.dim;
    let r = local_row(ids[i]);
    var v = 0.0;
    if (r >= 0) { v = ld_src(u32(r) * p.dim + c); }
    out[idx] = v;
}

// out[id_i - start, c] += src[i, c] for owned ids (src = dout; out was zeroed
// or holds the accumulator). One invocation per column walks the tokens in
// order: columns are disjoint, so no atomics, and every element's sum has a
// fixed order, so results are bit-identical run to run.
// 64 per workgroup: dim is often only a few hundred, and smaller groups
// spread those columns over more cores.
@compute @workgroup_size(64)
fn scatter_add(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) li: u32) {
    let c = (wg.y * nwg.x + wg.x) * 64u + li;
    if (c >= p.dim) { return; }
    for (var i = 0u; i < p.n; i++) {
        let r = local_row(ids[i]);
        if (r >= 0) {
            let o = u32(r) * p.dim + c;
            out[o] = out[o] + ld_src(i * p.dim + c);
        }
    }
}
