// Products with a quantized weight w [N, K] (a layer's [out, in], blocks
// along K), dequantized as loaded and accumulated in f32:
//   qmm_nk: c[M, N] = act(a·wᵀ (+ bias) (+ acc)) (⊙ acc), a [M, K] (the
//           forward: a decoding step's few rows or a prefill's many);
//   qmm_kn: c[M, K] = a·w, a [M, N] (the backward's dx = dy·w).
// Each invocation owns four rows of w (qmm_nk) or a 16-weight chunk of
// K (qmm_kn) for ROWS rows of a; the workgroups past p.groups take the
// next ROWS rows, so one dispatch covers any M. A row's last block may
// be partly used (K not a multiple of BL): weights past K multiply zeros.
// Composed in front (src/kernels/quant/sources.rs): the aliases, the a
// loads (lda4, lda: src/kernels/gemv/loads.rs), this family's bindings and
// gemv_header.wgsl's epilogue, quant_header.wgsl and the format's decoder.

struct Params {
    m: u32,
    n: u32,
    k: u32,
    // gemv_params.wgsl's flags: bias, acc, activation, multiply.
    flags: u32,
    // Workgroups per ROWS rows of a.
    groups: u32,
    // Blocks per row of w.
    nb: u32,
    // Word offsets of w's extra and halves regions.
    xo: u32,
    ho: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
// Binding 1, a, is composed in front: a storage array of AV, or for one
// token a uniform of 4096 vec4s (src/kernels/quant/sources.rs).
@group(0) @binding(2) var<storage, read> w: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read> acc_in: array<f32>;
@group(0) @binding(5) var<storage, read_write> c: array<COut>;

fn a_ld(i: u32) -> AV { return a[i]; }
fn wv(i: u32) -> vec4<u32> { return w[i]; }
fn q_xo() -> u32 { return p.xo; }
fn q_ho() -> u32 { return p.ho; }
fn bias_at(n: u32) -> f32 { return bias[n]; }
fn acc_at(i: u32) -> f32 { return acc_in[i]; }
fn put(i: u32, v: COut) { c[i] = v; }

// a[m, k] for k < K, else 0 (a ragged last chunk).
fn lda0(m: u32, k: u32) -> f32 {
    if (k < p.k) {
        return lda(m, k);
    }
    return 0.0;
}

fn lda04(m: u32, k: u32) -> vec4<f32> {
    return vec4<f32>(lda0(m, k), lda0(m, k + 1u), lda0(m, k + 2u), lda0(m, k + 3u));
}

fn dot16(x: mat4x4<f32>, y: mat4x4<f32>) -> f32 {
    return dot(x[0], y[0]) + dot(x[1], y[1]) + dot(x[2], y[2]) + dot(x[3], y[3]);
}

@compute @workgroup_size(WG)
fn qmm_nk(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let lin = wg.y * nwg.x + wg.x;
    let n0 = 4u * ((lin % p.groups) * WG + li);
    let m0 = (lin / p.groups) * ROWS;
    if (n0 >= p.n || m0 >= p.m) {
        return;
    }
    // Rows of w past N read the last one (computed, not stored).
    let last = p.n - 1u;
    let r = vec4<u32>(n0, min(n0 + 1u, last), min(n0 + 2u, last), min(n0 + 3u, last)) * p.nb;
    let per = BL / 16u;
    var s: array<vec4<f32>, 8>;
    let whole = p.k / 16u;
    // Whole chunks: the raw quants dotted with a, scaled after the dot
    // (w = d·q − o, so w·x = d·(q·x) − o·Σx), not each weight before it.
    // Where a pair of chunks shares its scales (DM_PAIRS) they are read
    // once for both: their loads (an f16 word, K-quants' packed 6-bit
    // sub-block scales) cost as much as the quants'.
    var g0 = 0u;
    if (DM_PAIRS) {
        for (; g0 + 1u < whole; g0 += 2u) {
            let blk = g0 / per;
            let h = g0 % per;
            let d01 = vec4<f32>(chunk_dm(r.x + blk, h), chunk_dm(r.y + blk, h));
            let d23 = vec4<f32>(chunk_dm(r.z + blk, h), chunk_dm(r.w + blk, h));
            let d = vec4<f32>(d01.x, d01.z, d23.x, d23.z);
            let o = vec4<f32>(d01.y, d01.w, d23.y, d23.w);
            for (var e = 0u; e < 2u; e++) {
                let g = g0 + e;
                let q0 = chunk_raw(r.x + blk, h + e);
                let q1 = chunk_raw(r.y + blk, h + e);
                let q2 = chunk_raw(r.z + blk, h + e);
                let q3 = chunk_raw(r.w + blk, h + e);
                for (var m = 0u; m < ROWS; m++) {
                    let x = mat4x4<f32>(
                        lda4(m0 + m, 4u * g),
                        lda4(m0 + m, 4u * g + 1u),
                        lda4(m0 + m, 4u * g + 2u),
                        lda4(m0 + m, 4u * g + 3u),
                    );
                    let sx = dot(x[0] + x[1] + x[2] + x[3], vec4<f32>(1.0));
                    let qx = vec4<f32>(dot16(x, q0), dot16(x, q1), dot16(x, q2), dot16(x, q3));
                    s[m] += d * qx - o * sx;
                }
            }
        }
    }
    for (var g = g0; g < whole; g++) {
        let blk = g / per;
        let h = g % per;
        let q0 = chunk_raw(r.x + blk, h);
        let q1 = chunk_raw(r.y + blk, h);
        let q2 = chunk_raw(r.z + blk, h);
        let q3 = chunk_raw(r.w + blk, h);
        let d01 = vec4<f32>(chunk_dm(r.x + blk, h), chunk_dm(r.y + blk, h));
        let d23 = vec4<f32>(chunk_dm(r.z + blk, h), chunk_dm(r.w + blk, h));
        let d = vec4<f32>(d01.x, d01.z, d23.x, d23.z);
        let o = vec4<f32>(d01.y, d01.w, d23.y, d23.w);
        for (var m = 0u; m < ROWS; m++) {
            let x = mat4x4<f32>(
                lda4(m0 + m, 4u * g),
                lda4(m0 + m, 4u * g + 1u),
                lda4(m0 + m, 4u * g + 2u),
                lda4(m0 + m, 4u * g + 3u),
            );
            let sx = dot(x[0] + x[1] + x[2] + x[3], vec4<f32>(1.0));
            let qx = vec4<f32>(dot16(x, q0), dot16(x, q1), dot16(x, q2), dot16(x, q3));
            s[m] += d * qx - o * sx;
        }
    }
    if (16u * whole < p.k) {
        let g = whole;
        let blk = g / per;
        let h = g % per;
        let w0 = chunk(r.x + blk, h);
        let w1 = chunk(r.y + blk, h);
        let w2 = chunk(r.z + blk, h);
        let w3 = chunk(r.w + blk, h);
        for (var m = 0u; m < ROWS; m++) {
            let k = 16u * g;
            let x = mat4x4<f32>(lda04(m0 + m, k), lda04(m0 + m, k + 4u), lda04(m0 + m, k + 8u),
                lda04(m0 + m, k + 12u));
            s[m] += vec4<f32>(dot16(x, w0), dot16(x, w1), dot16(x, w2), dot16(x, w3));
        }
    }
    for (var m = 0u; m < ROWS; m++) {
        store4(m0 + m, n0, s[m]);
    }
}

// c[M, K] = a·w for a [M, N]: here p.n is w's K (c's columns), p.k its
// rows N (the sum's length). Each invocation owns chunk g's 16 columns.
@compute @workgroup_size(WG)
fn qmm_kn(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let lin = wg.y * nwg.x + wg.x;
    let g = (lin % p.groups) * WG + li;
    let m0 = (lin / p.groups) * ROWS;
    if (16u * g >= p.n || m0 >= p.m) {
        return;
    }
    let per = BL / 16u;
    let blk = g / per;
    let h = g % per;
    var s: array<mat4x4<f32>, 4>;
    for (var n = 0u; n < p.k; n++) {
        let wc = chunk(n * p.nb + blk, h);
        for (var m = 0u; m < ROWS; m++) {
            s[m] += wc * lda(m0 + m, n);
        }
    }
    for (var m = 0u; m < ROWS; m++) {
        for (var j = 0u; j < 4u; j++) {
            store4(m0 + m, 16u * g + 4u * j, s[m][j]);
        }
    }
}
