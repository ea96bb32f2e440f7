// Row reduction: out[c, n] = sum of x[r, n] for r in chunk c = [c·chunk, min((c+1)·chunk, rows)).
// x is [rows, N], out is [chunks, N], row-major f32. sum_rows (src/kernels/reduce.rs)
// applies it repeatedly until one row is left; each sum runs in row order, so
// the result depends only on the shape (deterministic, unlike atomics).
// Grid: 64 invocations per workgroup, one per (chunk, column); workgroups
// folded into x/y (see fold_workgroups); linear id = wg.y * nwg.x + wg.x.

struct Params {
    rows: u32,
    n: u32,
    chunk: u32,
    chunks: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn sum_rows_chunk(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) li: u32) {
    let i = (wg.y * nwg.x + wg.x) * 64u + li;
    // chunks · n fits u32 (checked on the host); adjacent lanes take adjacent columns.
    if (i >= p.chunks * p.n) {
        return;
    }
    let ci = i / p.n;
    let col = i % p.n;
    let r0 = ci * p.chunk;
    let r1 = min(r0 + p.chunk, p.rows);
    var s = 0.0;
    for (var r = r0; r < r1; r++) {
        s += x[r * p.n + col];
    }
    out[i] = s;
}
