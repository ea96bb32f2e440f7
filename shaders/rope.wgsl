// Rotary position embedding in Hugging Face's rotate_half layout
// (src/kernels/rope.rs). Row r of x [rows, heads * d] is a token at table
// row r % seq; each head's two halves x1 = x[..d/2], x2 = x[d/2..] become
//   out1 = x1 cos - x2 sin,   out2 = x2 cos + x1 sin
// with cos, sin [seq, d/2] (sign = -1 rotates back: the backward pass).
// Grid: one invocation per (row, head, i < d/2), writing both halves.

struct Params {
    rows: u32,
    heads: u32,
    half: u32,
    seq: u32,
    sign: f32,
    // k's heads (entry rotary_pair only).
    heads2: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> cos_t: array<f32>;
@group(0) @binding(3) var<storage, read> sin_t: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(WG)
fn rotary(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) li: u32) {
    let id = linear_id(wg, nwg, li);
    if (id >= p.rows * p.heads * p.half) { return; }
    let i = id % p.half;
    let rh = id / p.half;
    let h = rh % p.heads;
    let row = rh / p.heads;
    let t = (row % p.seq) * p.half + i;
    let c = cos_t[t];
    let s = p.sign * sin_t[t];
    let base = (row * p.heads + h) * 2u * p.half;
    let x1 = x[base + i];
    let x2 = x[base + i + p.half];
    out[base + i] = x1 * c - x2 * s;
    out[base + i + p.half] = x2 * c + x1 * s;
}

// Decoding's q and k in one dispatch (entry rotary_pair): x holds q
// [rows, heads * d] and x2 k [rows, heads2 * d]; heads h < heads are q's,
// the rest k's, each rotated as `rotary` does it (the same operations, so
// the same bits) into out and out2.
@group(0) @binding(5) var<storage, read> x2: array<f32>;
@group(0) @binding(6) var<storage, read_write> out2: array<f32>;

@compute @workgroup_size(WG)
fn rotary_pair(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) li: u32) {
    let both = p.heads + p.heads2;
    let id = linear_id(wg, nwg, li);
    if (id >= p.rows * both * p.half) { return; }
    let i = id % p.half;
    let rh = id / p.half;
    let h = rh % both;
    let row = rh / both;
    let t = (row % p.seq) * p.half + i;
    let c = cos_t[t];
    let s = p.sign * sin_t[t];
    if (h < p.heads) {
        let base = (row * p.heads + h) * 2u * p.half;
        let x1 = x[base + i];
        let xb = x[base + i + p.half];
        out[base + i] = x1 * c - xb * s;
        out[base + i + p.half] = xb * c + x1 * s;
    } else {
        let base = (row * p.heads2 + h - p.heads) * 2u * p.half;
        let x1 = x2[base + i];
        let xb = x2[base + i + p.half];
        out2[base + i] = x1 * c - xb * s;
        out2[base + i + p.half] = xb * c + x1 * s;
    }
}
