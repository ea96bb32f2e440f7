// Causal softmax attention, one rank's heads (src/kernels/attention.rs).
// Per sequence b and head h, with queries at positions past + i (i < tq) and
// keys/values at positions j < tk:
//   S[i, j] = q_i . k_j * scale, masked to j <= past + i,
//   P = softmax over each row of S (max subtracted), exactly 0 where masked,
//   O[i] = sum_j P[i, j] v_j.
// Element e of head h at position t of sequence b lives at
//   src[base + b*sb + h*sh + t*st + e]
// (the fused QKV layout and the KV-cache layout are both such views), so one
// set of kernels serves training and cached decoding.
// Row kernels run one invocation per (b, h, i) row, looping over keys in order
// (deterministic and barrier-free, which CPU adapters need); the rest run one
// invocation per output element (linear_id, WG: see grid.wgsl).

struct Params {
    batch: u32,
    heads: u32,
    // Query positions per sequence.
    tq: u32,
    // Key positions per sequence (= past + tq).
    tk: u32,
    // head_dim, and heads * head_dim.
    d: u32,
    hd: u32,
    // Positions before the first query (a cache's length); 0 in training.
    past: u32,
    // 1 / sqrt(head_dim).
    scale: f32,
    // Views: q in q_src, k and v in kv_src.
    q_base: u32,
    q_sb: u32,
    q_sh: u32,
    q_st: u32,
    k_base: u32,
    k_sb: u32,
    k_sh: u32,
    k_st: u32,
    v_base: u32,
    v_sb: u32,
    v_sh: u32,
    v_st: u32,
    // Invocations with work: rows or output elements.
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

// One layout for every entry; unused slots get any read-only input.
@group(0) @binding(0) var<uniform> p: Params;
// Queries (the fused QKV activation); append_kv: the new QKV rows.
@group(0) @binding(1) var<storage, read> q_src: array<f32>;
// Keys and values (the fused QKV activation or a cache); append_kv: the old cache.
@group(0) @binding(2) var<storage, read> kv_src: array<f32>;
// Probabilities [batch, heads, tq, tk].
@group(0) @binding(3) var<storage, read> probs: array<f32>;
// Output gradient [batch * tq, hd].
@group(0) @binding(4) var<storage, read> d_out: array<f32>;
// Score gradient dS [batch, heads, tq, tk] (grad_scores' output).
@group(0) @binding(5) var<storage, read> d_scores: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;

// Start of a row's max: finite, so a row whose scores are all -inf still gives
// exp(-inf - NEG_BIG) = 0 rather than NaN.
const NEG_BIG: f32 = -3.4e38;

fn row_id(wg: vec3<u32>, nwg: vec3<u32>, li: u32) -> u32 {
    return (wg.y * nwg.x + wg.x) * 64u + li;
}

fn q_at(b: u32, h: u32, t: u32) -> u32 {
    return p.q_base + b * p.q_sb + h * p.q_sh + t * p.q_st;
}

fn k_at(b: u32, h: u32, t: u32) -> u32 {
    return p.k_base + b * p.k_sb + h * p.k_sh + t * p.k_st;
}

fn v_at(b: u32, h: u32, t: u32) -> u32 {
    return p.v_base + b * p.v_sb + h * p.v_sh + t * p.v_st;
}

// Keys query i sees: j < past + i + 1 (and j < tk).
fn keys_of(i: u32) -> u32 {
    return min(p.past + i + 1u, p.tk);
}

// out = P [batch, heads, tq, tk]: row r = (b*heads + h)*tq + i holds
// softmax_j(q_i . k_j * scale) for j < keys_of(i), then zeros.
@compute @workgroup_size(64)
fn softmax_rows(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) li: u32) {
    let r = row_id(wg, nwg, li);
    if (r >= p.n) { return; }
    let i = r % p.tq;
    let h = (r / p.tq) % p.heads;
    let b = r / (p.tq * p.heads);
    let base = r * p.tk;
    let keys = keys_of(i);
    let qi = q_at(b, h, i);
    // Scores into the output row, tracking their max.
    var m = NEG_BIG;
    for (var j = 0u; j < keys; j++) {
        let kj = k_at(b, h, j);
        var s = 0.0;
        for (var e = 0u; e < p.d; e++) {
            s += q_src[qi + e] * kv_src[kj + e];
        }
        s *= p.scale;
        out[base + j] = s;
        m = max(m, s);
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

// out = O [batch * tq, hd]: out[b*tq + i, h*d + e] = sum_j P[b, h, i, j] v_j[e].
@compute @workgroup_size(WG)
fn apply_probs(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) li: u32) {
    let idx = linear_id(wg, nwg, li);
    if (idx >= p.n) { return; }
    let row = idx / p.hd;
    let c = idx % p.hd;
    let h = c / p.d;
    let e = c % p.d;
    let b = row / p.tq;
    let i = row % p.tq;
    let pr = ((b * p.heads + h) * p.tq + i) * p.tk;
    let keys = keys_of(i);
    var acc = 0.0;
    for (var j = 0u; j < keys; j++) {
        acc += probs[pr + j] * kv_src[v_at(b, h, j) + e];
    }
    out[idx] = acc;
}

// out = dS [batch, heads, tq, tk] (without the scale): per row,
// dP_j = dO_i . v_j, dS_j = P_j (dP_j - sum_l P_l dP_l), 0 where masked.
@compute @workgroup_size(64)
fn grad_scores(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) li: u32) {
    let r = row_id(wg, nwg, li);
    if (r >= p.n) { return; }
    let i = r % p.tq;
    let h = (r / p.tq) % p.heads;
    let b = r / (p.tq * p.heads);
    let base = r * p.tk;
    let keys = keys_of(i);
    let go = (b * p.tq + i) * p.hd + h * p.d;
    var dot = 0.0;
    for (var j = 0u; j < keys; j++) {
        let vj = v_at(b, h, j);
        var dp = 0.0;
        for (var e = 0u; e < p.d; e++) {
            dp += d_out[go + e] * kv_src[vj + e];
        }
        out[base + j] = dp;
        dot += probs[base + j] * dp;
    }
    for (var j = 0u; j < keys; j++) {
        out[base + j] = probs[base + j] * (out[base + j] - dot);
    }
    for (var j = keys; j < p.tk; j++) {
        out[base + j] = 0.0;
    }
}

// out = dQKV [batch * tq, 3 hd] in the fused layout (training: past = 0,
// tk = tq): column block 0 is dQ = scale dS K, block 1 dK = scale dSᵀ Q,
// block 2 dV = Pᵀ dO. Masked entries of P and dS are 0, so each sum runs over
// the unmasked range only.
@compute @workgroup_size(WG)
fn grad_qkv(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) li: u32) {
    let idx = linear_id(wg, nwg, li);
    if (idx >= p.n) { return; }
    let row = idx / (3u * p.hd);
    let col = idx % (3u * p.hd);
    let block = col / p.hd;
    let c = col % p.hd;
    let h = c / p.d;
    let e = c % p.d;
    let b = row / p.tq;
    let t = row % p.tq;
    // Row (b, h, i) of P and dS starts at (bh * tq + i) * tk.
    let bh = b * p.heads + h;
    var acc = 0.0;
    if (block == 0u) {
        let sr = (bh * p.tq + t) * p.tk;
        for (var j = 0u; j < keys_of(t); j++) {
            acc += d_scores[sr + j] * kv_src[k_at(b, h, j) + e];
        }
        acc *= p.scale;
    } else if (block == 1u) {
        for (var i = t; i < p.tq; i++) {
            acc += d_scores[(bh * p.tq + i) * p.tk + t] * q_src[q_at(b, h, i) + e];
        }
        acc *= p.scale;
    } else {
        for (var i = t; i < p.tq; i++) {
            acc += probs[(bh * p.tq + i) * p.tk + t] * d_out[(b * p.tq + i) * p.hd + c];
        }
    }
    out[idx] = acc;
}

// out = the grown KV cache [2, batch, heads, tk, d] (keys, then values): the
// old cache [2, batch, heads, past, d] (in kv_src) for positions t < past, the
// new rows' k and v (q_src, fused layout with tq rows per sequence) after.
@compute @workgroup_size(WG)
fn append_kv(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) li: u32) {
    let idx = linear_id(wg, nwg, li);
    if (idx >= p.n) { return; }
    let e = idx % p.d;
    let t = (idx / p.d) % p.tk;
    let sbh = idx / (p.d * p.tk);
    let h = sbh % p.heads;
    let b = (sbh / p.heads) % p.batch;
    let s = sbh / (p.heads * p.batch);
    if (t < p.past) {
        out[idx] = kv_src[(sbh * p.past + t) * p.d + e];
    } else {
        let row = b * p.tq + (t - p.past);
        out[idx] = q_src[row * 3u * p.hd + (1u + s) * p.hd + h * p.d + e];
    }
}
