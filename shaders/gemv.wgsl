// Small-M GEMM ("GEMV"): c[M,N] = act(a·op(b) (+ bias[n]) (+ acc[m,n])),
// or act(a·op(b) (+ bias[n])) ⊙ acc[m,n] (SwiGLU's gate times up), for
// M ≤ 8 rows, reading b (a weight) where it is stored: [N, K] (entry
// gemv_nk, the layers' x·Wᵀ) or [K, N] (gemv_kn). No pack, no texture: one
// token's GEMMs are bound by streaming the weight once, and a pack or a
// texture copy would stream it twice more. a is [M, K] row-major.
//
// Each invocation owns four adjacent columns of c and every row (ROWS ≥ M,
// an override: 1, 2, 4 or 8), so each weight element is loaded once for all
// rows. src/kernels/gemv.rs composes in front: `enable f16;` where needed,
// the aliases AIn / COut (element types of a, b and of c), AV / BV (how a
// and b are bound: AIn or vec4<AIn>) and the loads
//   lda4(m, q) -> vec4<f32>: a[m, 4q..4q+4]     (4q + 3 < K)
//   lda(m, k) -> f32:        a[m, k]
//   ldb4_nk(n, q) -> vec4<f32>: b[n, 4q..4q+4]  (b [N, K], 4q + 3 < K)
//   ldb_nk(n, k) -> f32:     b[n, k]
//   ldb4_kn(k, j) -> vec4<f32>: b[k, 4j..4j+4], zero past N (b [K, N])
// each reading vec4s where the row length allows (bindings AV / BV).
// Grid: p.groups workgroups folded into x/y; linear id = wg.y * nwg.x + wg.x.

struct Params {
    m: u32,
    n: u32,
    k: u32,
    // bit 0: add bias; bit 1: add acc; bits 2-3: then the activation
    // (0 none, 1 GELU, 2 SiLU, 3 ReLU), as elementwise.wgsl computes it;
    // bit 4: then multiply by acc (bit 1 clear), as its `mul` does.
    flags: u32,
    groups: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<AV>;
@group(0) @binding(2) var<storage, read> b: array<BV>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read> acc_in: array<f32>;
@group(0) @binding(5) var<storage, read_write> c: array<COut>;

// Rows computed (a's rows past M are read clamped, and not stored).
override ROWS: u32 = 1u;
override WG: u32 = 32u;

// a's row m, clamped to the last one (rows past M are computed, not stored).
fn arow(m: u32) -> u32 {
    return min(m, p.m - 1u);
}

// c(m, n) = act(v (+ bias) (+ acc)) (⊙ acc), for m < M and n < N.
fn store1(m: u32, n: u32, v: f32) {
    if (m >= p.m || n >= p.n) {
        return;
    }
    var r = v;
    if ((p.flags & 1u) != 0u) {
        r += bias[n];
    }
    let idx = m * p.n + n;
    if ((p.flags & 2u) != 0u) {
        r += acc_in[idx];
    }
    var o = activate(r, (p.flags >> 2u) & 3u);
    if ((p.flags & 16u) != 0u) {
        o = o * acc_in[idx];
    }
    c[idx] = COut(o);
}

// elementwise.wgsl's activations, one element at a time (the same
// operations, so the same bits as the product followed by that kernel).
fn activate(x: f32, act: u32) -> f32 {
    switch act {
        case 1u: {
            let u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
            let e = exp(2.0 * clamp(u, -15.0, 15.0));
            return 0.5 * x * (1.0 + (e - 1.0) / (e + 1.0));
        }
        case 2u: {
            return x * (1.0 / (1.0 + exp(-clamp(x, -80.0, 80.0))));
        }
        case 3u: {
            return max(x, 0.0);
        }
        default: {
            return x;
        }
    }
}

fn store4(m: u32, n: u32, v: vec4<f32>) {
    store1(m, n, v.x);
    store1(m, n + 1u, v.y);
    store1(m, n + 2u, v.z);
    store1(m, n + 3u, v.w);
}

// b [N, K]: columns 4g..4g+4 of c are rows of b, each walked along K.
@compute @workgroup_size(WG)
fn gemv_nk(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let g = (wg.y * nwg.x + wg.x) * WG + li;
    let n0 = 4u * g;
    if (n0 >= p.n) {
        return;
    }
    // Rows of b past N read the last one (computed, not stored).
    let last = p.n - 1u;
    let r0 = n0;
    let r1 = min(n0 + 1u, last);
    let r2 = min(n0 + 2u, last);
    let r3 = min(n0 + 3u, last);
    var s: array<vec4<f32>, 8>;
    let k4 = p.k / 4u;
    for (var q = 0u; q < k4; q++) {
        let b0 = ldb4_nk(r0, q);
        let b1 = ldb4_nk(r1, q);
        let b2 = ldb4_nk(r2, q);
        let b3 = ldb4_nk(r3, q);
        for (var m = 0u; m < ROWS; m++) {
            let x = lda4(m, q);
            s[m] += vec4<f32>(dot(x, b0), dot(x, b1), dot(x, b2), dot(x, b3));
        }
    }
    for (var k = 4u * k4; k < p.k; k++) {
        let bk = vec4<f32>(ldb_nk(r0, k), ldb_nk(r1, k), ldb_nk(r2, k), ldb_nk(r3, k));
        for (var m = 0u; m < ROWS; m++) {
            s[m] += lda(m, k) * bk;
        }
    }
    for (var m = 0u; m < ROWS; m++) {
        store4(m, n0, s[m]);
    }
}

// b [K, N]: columns 4j..4j+4 of c are four adjacent columns of b, read as
// one vec4 per step of K.
@compute @workgroup_size(WG)
fn gemv_kn(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let j = (wg.y * nwg.x + wg.x) * WG + li;
    if (4u * j >= p.n) {
        return;
    }
    var s: array<vec4<f32>, 8>;
    for (var k = 0u; k < p.k; k++) {
        let bk = ldb4_kn(k, j);
        for (var m = 0u; m < ROWS; m++) {
            s[m] += lda(m, k) * bk;
        }
    }
    for (var m = 0u; m < ROWS; m++) {
        store4(m, 4u * j, s[m]);
    }
}
