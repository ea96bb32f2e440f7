// Row reduction: out[c, n] = sum of x[r, n] for r in chunk c = [c·chunk, min((c+1)·chunk, rows)).
// x is [rows, N], out is [chunks, N], row-major f32. sum_rows (src/kernels/reduce.rs)
// applies it repeatedly until one row is left; each sum runs in row order, so
// the result depends only on the shape (deterministic, unlike atomics).
// Both buffers are arrays of vec4s bound in whole vec4s (KernelSpec::in_vec4s;
// lavapipe loads storage lane by lane): one invocation per four adjacent
// outputs, 64 per workgroup; workgroups folded into x/y (see
// fold_workgroups); linear id = wg.y * nwg.x + wg.x.

struct Params {
    rows: u32,
    n: u32,
    chunk: u32,
    chunks: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> out: array<vec4<f32>>;

// Output e = (chunk, column) of the chunks · n; 0 past them.
fn chunk_sum(e: u32) -> f32 {
    if (e >= p.chunks * p.n) {
        return 0.0;
    }
    let ci = e / p.n;
    let col = e % p.n;
    let r0 = ci * p.chunk;
    let r1 = min(r0 + p.chunk, p.rows);
    var s = 0.0;
    for (var r = r0; r < r1; r++) {
        let i = r * p.n + col;
        s += x[i / 4u][i % 4u];
    }
    return s;
}

@compute @workgroup_size(64)
fn sum_rows_chunk(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) li: u32) {
    let q = (wg.y * nwg.x + wg.x) * 64u + li;
    // chunks · n fits u32 (checked on the host); adjacent lanes take adjacent columns.
    if (q >= (p.chunks * p.n + 3u) / 4u) {
        return;
    }
    let e = 4u * q;
    if (p.n % 4u != 0u) {
        // Outputs one at a time in a loop rather than four inlined copies
        // (lavapipe compiles it faster), filled by select: FXC cannot store
        // to a component by a runtime index.
        var v = vec4<f32>();
        for (var k = 0u; k < min(4u, p.chunks * p.n - e); k++) {
            v = select(v, vec4<f32>(chunk_sum(e + k)), vec4<u32>(0u, 1u, 2u, 3u) == vec4<u32>(k));
        }
        out[q] = v;
        return;
    }
    // Four columns of one chunk, read as one vec4 per row.
    let ci = e / p.n;
    let r0 = ci * p.chunk;
    let r1 = min(r0 + p.chunk, p.rows);
    let n4 = p.n / 4u;
    let c4 = q - ci * n4;
    var s = vec4<f32>(0.0);
    for (var r = r0; r < r1; r++) {
        s += x[r * n4 + c4];
    }
    out[q] = s;
}
