// Causal softmax attention, one rank's heads (src/kernels/attention/).
// Per sequence b and head h, with queries at positions past + i (i < tq) and
// keys/values at positions j < tk:
//   S[i, j] = q_i . k_j * scale, masked to j <= past + i,
//   P = softmax over each row of S (max subtracted), exactly 0 where masked,
//   O[i] = sum_j P[i, j] v_j.
// Element e of head h at position t of sequence b of a view lives at
//   src[base + b*sb + h*sh + t*st + e]
// (the fused QKV layout, the output layout and the KV-cache layout are all
// such views), so one set of kernels serves training and cached decoding.
// Score-shaped matrices (P, dS) are [batch, heads, tq, tk], row-major.
//
// Why tiles: lavapipe/llvmpipe turn every storage-buffer load into a loop
// over the SIMD lanes (see src/device/texture.rs), so a load costs far more than an
// FMA. masked_dots and mix give each invocation a 4 x 4 tile of outputs and
// do 16 FMAs per 8 scalar loads; tile edges clamp their loads and skip their
// stores. Row kernels run one invocation per (b, h, i) row, in order
// (deterministic), and nothing uses barriers or workgroup memory.

struct Params {
    batch: u32,
    heads: u32,
    // Query positions per sequence.
    tq: u32,
    // Key positions per sequence (= past + tq).
    tk: u32,
    // head_dim.
    d: u32,
    // Positions before the first query (a cache's length); 0 in training.
    past: u32,
    // Factor on every result of masked_dots and mix.
    scale: f32,
    // mix: 1 sums over the rows of the score matrix (Mᵀ X), 0 over its
    // columns (M X).
    trans: u32,
    // View a (a_src): masked_dots' left rows, mix's X.
    a_base: u32,
    a_sb: u32,
    a_sh: u32,
    a_st: u32,
    // View b (b_src): masked_dots' right rows.
    b_base: u32,
    b_sb: u32,
    b_sh: u32,
    b_st: u32,
    // View o (out): mix's output.
    o_base: u32,
    o_sb: u32,
    o_sh: u32,
    o_st: u32,
    // Invocations with work: tiles or rows.
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

// One layout for every entry; unused slots get any read-only input.
@group(0) @binding(0) var<uniform> p: Params;
// append_kv: the new fused QKV rows.
@group(0) @binding(1) var<storage, read> a_src: array<f32>;
// append_kv: the old cache.
@group(0) @binding(2) var<storage, read> b_src: array<f32>;
// A score-shaped matrix: P or dS (mix), P (grad_softmax_rows).
@group(0) @binding(3) var<storage, read> mat: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

// Start of a row's max: finite, so a row whose scores are all -inf gives
// exp(-inf - NEG_BIG) = 0 rather than NaN.
const NEG_BIG: f32 = -3.4e38;

fn invocation(wg: vec3<u32>, nwg: vec3<u32>, li: u32) -> u32 {
    return (wg.y * nwg.x + wg.x) * 64u + li;
}

fn a_at(b: u32, h: u32, t: u32) -> u32 {
    return p.a_base + b * p.a_sb + h * p.a_sh + t * p.a_st;
}

fn b_at(b: u32, h: u32, t: u32) -> u32 {
    return p.b_base + b * p.b_sb + h * p.b_sh + t * p.b_st;
}

fn o_at(b: u32, h: u32, t: u32) -> u32 {
    return p.o_base + b * p.o_sb + h * p.o_sh + t * p.o_st;
}

// Keys query i sees: j < past + i + 1 (and j < tk).
fn keys_of(i: u32) -> u32 {
    return min(p.past + i + 1u, p.tk);
}

// Row i of a score tile into out (row-major, tk wide from `row`): columns
// j0..j0+4 that exist, scale * v where unmasked, 0 where masked.
fn store_scores(row: u32, i: u32, j0: u32, v: vec4<f32>) {
    if (i >= p.tq) { return; }
    for (var c = 0u; c < 4u; c++) {
        let j = j0 + c;
        if (j < p.tk) {
            out[row + j] = select(0.0, p.scale * v[c], j <= p.past + i);
        }
    }
}

// out[b, h, i, j] = scale * (a_i . b_j) for j <= past + i, else 0, over
// [batch, heads, tq, tk]: S = q kᵀ / sqrt(d) (a = q, b = k) or dP = dO vᵀ
// (a = dO, b = v, scale 1). One invocation per 4 x 4 tile of (i, j).
@compute @workgroup_size(64)
fn masked_dots(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) li: u32) {
    let id = invocation(wg, nwg, li);
    if (id >= p.n) { return; }
    let nj = (p.tk + 3u) / 4u;
    let ni = (p.tq + 3u) / 4u;
    let j0 = (id % nj) * 4u;
    let i0 = ((id / nj) % ni) * 4u;
    let bh = id / (nj * ni);
    let h = bh % p.heads;
    let b = bh / p.heads;
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    // Skip tiles wholly above the diagonal (they store zeros).
    if (j0 <= p.past + min(i0 + 3u, p.tq - 1u)) {
        let ia0 = a_at(b, h, min(i0, p.tq - 1u));
        let ia1 = a_at(b, h, min(i0 + 1u, p.tq - 1u));
        let ia2 = a_at(b, h, min(i0 + 2u, p.tq - 1u));
        let ia3 = a_at(b, h, min(i0 + 3u, p.tq - 1u));
        let jb0 = b_at(b, h, min(j0, p.tk - 1u));
        let jb1 = b_at(b, h, min(j0 + 1u, p.tk - 1u));
        let jb2 = b_at(b, h, min(j0 + 2u, p.tk - 1u));
        let jb3 = b_at(b, h, min(j0 + 3u, p.tk - 1u));
        for (var e = 0u; e < p.d; e++) {
            let kv = vec4<f32>(b_src[jb0 + e], b_src[jb1 + e], b_src[jb2 + e], b_src[jb3 + e]);
            acc0 += a_src[ia0 + e] * kv;
            acc1 += a_src[ia1 + e] * kv;
            acc2 += a_src[ia2 + e] * kv;
            acc3 += a_src[ia3 + e] * kv;
        }
    }
    let row0 = (bh * p.tq + i0) * p.tk;
    store_scores(row0, i0, j0, acc0);
    store_scores(row0 + p.tk, i0 + 1u, j0, acc1);
    store_scores(row0 + 2u * p.tk, i0 + 2u, j0, acc2);
    store_scores(row0 + 3u * p.tk, i0 + 3u, j0, acc3);
}

// In place on out = the scores from masked_dots: each row becomes
// softmax_j(S[i, j]) over j < keys_of(i), zeros after.
@compute @workgroup_size(64)
fn softmax_rows(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) li: u32) {
    let r = invocation(wg, nwg, li);
    if (r >= p.n) { return; }
    let base = r * p.tk;
    let keys = keys_of(r % p.tq);
    var m = NEG_BIG;
    for (var j = 0u; j < keys; j++) {
        m = max(m, out[base + j]);
    }
    var sum = 0.0;
    for (var j = 0u; j < keys; j++) {
        let x = exp(out[base + j] - m);
        out[base + j] = x;
        sum += x;
    }
    // sum >= 1 whenever a key is visible (the max contributes exp(0));
    // guarded so that nothing divides by 0.
    let inv = select(0.0, 1.0 / sum, sum > 0.0);
    for (var j = 0u; j < keys; j++) {
        out[base + j] *= inv;
    }
    for (var j = keys; j < p.tk; j++) {
        out[base + j] = 0.0;
    }
}

// In place on out = dP from masked_dots, with mat = P:
// dS[i, j] = P[i, j] (dP[i, j] - sum_l P[i, l] dP[i, l]), 0 where masked.
@compute @workgroup_size(64)
fn grad_softmax_rows(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) li: u32) {
    let r = invocation(wg, nwg, li);
    if (r >= p.n) { return; }
    let base = r * p.tk;
    let keys = keys_of(r % p.tq);
    var dot = 0.0;
    for (var j = 0u; j < keys; j++) {
        dot += mat[base + j] * out[base + j];
    }
    for (var j = 0u; j < keys; j++) {
        out[base + j] = mat[base + j] * (out[base + j] - dot);
    }
    for (var j = keys; j < p.tk; j++) {
        out[base + j] = 0.0;
    }
}

// Row r of an output tile: columns e0..e0+4 that exist, scale * v.
fn store_row(b: u32, h: u32, r: u32, rows: u32, e0: u32, v: vec4<f32>) {
    if (r >= rows) { return; }
    let o = o_at(b, h, r) + e0;
    for (var c = 0u; c < 4u; c++) {
        if (e0 + c < p.d) {
            out[o + c] = p.scale * v[c];
        }
    }
}

// A score-shaped mat M [batch, heads, tq, tk] times view a (X), into view o:
//   trans = 0: o[i, e] = scale * sum_j M[i, j] X[j, e]   (O = P v, dQ = dS k / sqrt(d))
//   trans = 1: o[j, e] = scale * sum_i M[i, j] X[i, e]   (dK = dSᵀ q / sqrt(d), dV = Pᵀ dO)
// M is 0 where masked, so each sum may run over whole tiles of the unmasked
// range. One invocation per 4 x 4 tile of (output row, e).
@compute @workgroup_size(64)
fn mix(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
       @builtin(local_invocation_index) li: u32) {
    let id = invocation(wg, nwg, li);
    if (id >= p.n) { return; }
    let trans = p.trans != 0u;
    let rows = select(p.tq, p.tk, trans);
    let ne = (p.d + 3u) / 4u;
    let nr = (rows + 3u) / 4u;
    let e0 = (id % ne) * 4u;
    let r0 = ((id / ne) % nr) * 4u;
    let bh = id / (ne * nr);
    let h = bh % p.heads;
    let b = bh / p.heads;
    let mbase = bh * p.tq * p.tk;
    let ec = min(vec4<u32>(e0, e0 + 1u, e0 + 2u, e0 + 3u), vec4<u32>(p.d - 1u));
    let last = rows - 1u;
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    if (!trans) {
        // Rows i0..i0+4 of M, summed over the keys the tile's last row sees.
        let m0 = mbase + min(r0, last) * p.tk;
        let m1 = mbase + min(r0 + 1u, last) * p.tk;
        let m2 = mbase + min(r0 + 2u, last) * p.tk;
        let m3 = mbase + min(r0 + 3u, last) * p.tk;
        let keys = keys_of(min(r0 + 3u, last));
        for (var j = 0u; j < keys; j++) {
            let xr = a_at(b, h, j);
            let x = vec4<f32>(a_src[xr + ec.x], a_src[xr + ec.y], a_src[xr + ec.z], a_src[xr + ec.w]);
            acc0 += mat[m0 + j] * x;
            acc1 += mat[m1 + j] * x;
            acc2 += mat[m2 + j] * x;
            acc3 += mat[m3 + j] * x;
        }
    } else {
        // Columns j0..j0+4 of M, summed over the queries that see column j0.
        let c0 = min(r0, last);
        let c1 = min(r0 + 1u, last);
        let c2 = min(r0 + 2u, last);
        let c3 = min(r0 + 3u, last);
        let first = select(0u, r0 - p.past, r0 > p.past);
        for (var i = first; i < p.tq; i++) {
            let xr = a_at(b, h, i);
            let x = vec4<f32>(a_src[xr + ec.x], a_src[xr + ec.y], a_src[xr + ec.z], a_src[xr + ec.w]);
            let mr = mbase + i * p.tk;
            acc0 += mat[mr + c0] * x;
            acc1 += mat[mr + c1] * x;
            acc2 += mat[mr + c2] * x;
            acc3 += mat[mr + c3] * x;
        }
    }
    store_row(b, h, r0, rows, e0, acc0);
    store_row(b, h, r0 + 1u, rows, e0, acc1);
    store_row(b, h, r0 + 2u, rows, e0, acc2);
    store_row(b, h, r0 + 3u, rows, e0, acc3);
}

// out = the grown KV cache [2, batch, heads, tk, d] (keys, then values): the
// old cache [2, batch, heads, past, d] (b_src) for positions t < past, the new
// rows' k and v (a_src: fused [batch * tq, 3 heads d]) after. One invocation
// per element.
@compute @workgroup_size(64)
fn append_kv(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) li: u32) {
    let idx = invocation(wg, nwg, li);
    if (idx >= p.n) { return; }
    let e = idx % p.d;
    let t = (idx / p.d) % p.tk;
    let sbh = idx / (p.d * p.tk);
    let h = sbh % p.heads;
    let b = (sbh / p.heads) % p.batch;
    let s = sbh / (p.heads * p.batch);
    if (t < p.past) {
        out[idx] = b_src[(sbh * p.past + t) * p.d + e];
    } else {
        let hd = p.heads * p.d;
        let row = b * p.tq + (t - p.past);
        out[idx] = a_src[row * 3u * hd + (1u + s) * hd + h * p.d + e];
    }
}
