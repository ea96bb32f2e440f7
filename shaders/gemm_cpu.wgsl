// GEMM for CPU adapters: c[M,N] = op(a)·op(b) (+ bias[n]) (+ acc[m,n]).
// a is [M,K] (TA: [K,M]), b is [K,N] (TB: [N,K]), all row-major f32.
//
// Only used when every operand's contiguous dimension is a multiple of 4
// (a: K, or M when TA; b: N, or K when TB; c: N), so all bindings are arrays
// of aligned vec4s. Ragged shapes use gemm.wgsl.
//
// Why this shape: lavapipe/llvmpipe run 8 invocations as the lanes of one
// 256-bit SIMD register, and Mesa 22 turns every storage-buffer load into a
// loop over the lanes (one scalar load and bounds check per lane and
// component), so a load costs ~100× an FMA. The kernel therefore maximises
// FMAs per load: each invocation owns a TM × TN tile of c (mat4x4 blocks in
// registers), loads 4 values of k for every row and column of its tile as
// vec4s, and does TM·TN·4 FMAs per TM + TN vec4 loads. Transposed layouts only
// change which direction the vec4s run; turning them around (`transpose`) is
// free in SIMD-across-lanes code. No workgroup memory, no barriers, and no
// branches in the K loop (edges clamp their loads instead).
//
// The tile is unrolled by hand (c{i}_{j} = block i of 4 rows, block j of 4
// columns): written as loops over arrays of mat4x4 it ran 3.5× slower on
// lavapipe (the array stayed in memory). 16 × 32 is the largest tile that
// compiles quickly: 32 × 32 took 67 s to compile in lavapipe for ~1.2× more.

struct Params {
    m: u32,
    n: u32,
    k: u32,
    // bit 0: add bias; bit 1: add acc.
    flags: u32,
    // Workgroups along n, and in all.
    groups_n: u32,
    groups: u32,
    _pad0: u32,
    _pad1: u32,
}

override TA: bool = false;
override TB: bool = false;
// Invocations per workgroup, all along n.
override WG: u32 = 8u;

// Register tile per invocation: BM blocks of 4 rows × BN blocks of 4 columns.
const BM: u32 = 4u;
const BN: u32 = 8u;
const TM: u32 = 4u * BM;
const TN: u32 = 4u * BN;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> b: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> bias: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> acc_in: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> c: array<vec4<f32>>;

// Rows m..m+4 of op(a) at k0..k0+4, as a matrix whose column r is row m+r
// (a vec4 along k). Rows past M are clamped (their results are not stored);
// k past K (only possible when TA, the last block) reads as 0.
fn load_a(m: u32, k0: u32) -> mat4x4<f32> {
    if (TA) {
        let mc = min(m, p.m - 4u) / 4u;
        let w = p.m / 4u;
        var v: array<vec4<f32>, 4>;
        for (var t = 0u; t < 4u; t++) {
            let k = k0 + t;
            v[t] = select(vec4<f32>(0.0), a[min(k, p.k - 1u) * w + mc], k < p.k);
        }
        return transpose(mat4x4<f32>(v[0], v[1], v[2], v[3]));
    }
    let w = p.k / 4u;
    let q = k0 / 4u;
    let last = p.m - 1u;
    return mat4x4<f32>(
        a[min(m, last) * w + q],
        a[min(m + 1u, last) * w + q],
        a[min(m + 2u, last) * w + q],
        a[min(m + 3u, last) * w + q]);
}

// Rows k0..k0+4 of op(b) at columns n..n+4, as a matrix whose column t is row
// k0+t (a vec4 along n). Columns past N are clamped; k past K reads as 0.
fn load_b(n: u32, k0: u32) -> mat4x4<f32> {
    if (TB) {
        let w = p.k / 4u;
        let q = k0 / 4u;
        let last = p.n - 1u;
        return transpose(mat4x4<f32>(
            b[min(n, last) * w + q],
            b[min(n + 1u, last) * w + q],
            b[min(n + 2u, last) * w + q],
            b[min(n + 3u, last) * w + q]));
    }
    let nc = min(n, p.n - 4u) / 4u;
    let w = p.n / 4u;
    var v: array<vec4<f32>, 4>;
    for (var t = 0u; t < 4u; t++) {
        let k = k0 + t;
        v[t] = select(vec4<f32>(0.0), b[min(k, p.k - 1u) * w + nc], k < p.k);
    }
    return mat4x4<f32>(v[0], v[1], v[2], v[3]);
}

@compute @workgroup_size(WG)
fn gemm_cpu(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let g = wg.y * nwg.x + wg.x;
    if (g >= p.groups) {
        return;
    }
    let m0 = (g / p.groups_n) * TM;
    let n0 = ((g % p.groups_n) * WG + lid) * TN;
    var c0_0 = mat4x4<f32>();
    var c0_1 = mat4x4<f32>();
    var c0_2 = mat4x4<f32>();
    var c0_3 = mat4x4<f32>();
    var c0_4 = mat4x4<f32>();
    var c0_5 = mat4x4<f32>();
    var c0_6 = mat4x4<f32>();
    var c0_7 = mat4x4<f32>();
    var c1_0 = mat4x4<f32>();
    var c1_1 = mat4x4<f32>();
    var c1_2 = mat4x4<f32>();
    var c1_3 = mat4x4<f32>();
    var c1_4 = mat4x4<f32>();
    var c1_5 = mat4x4<f32>();
    var c1_6 = mat4x4<f32>();
    var c1_7 = mat4x4<f32>();
    var c2_0 = mat4x4<f32>();
    var c2_1 = mat4x4<f32>();
    var c2_2 = mat4x4<f32>();
    var c2_3 = mat4x4<f32>();
    var c2_4 = mat4x4<f32>();
    var c2_5 = mat4x4<f32>();
    var c2_6 = mat4x4<f32>();
    var c2_7 = mat4x4<f32>();
    var c3_0 = mat4x4<f32>();
    var c3_1 = mat4x4<f32>();
    var c3_2 = mat4x4<f32>();
    var c3_3 = mat4x4<f32>();
    var c3_4 = mat4x4<f32>();
    var c3_5 = mat4x4<f32>();
    var c3_6 = mat4x4<f32>();
    var c3_7 = mat4x4<f32>();
    for (var k0 = 0u; k0 < p.k; k0 += 4u) {
        let a0 = load_a(m0 + 0u, k0);
        let a1 = load_a(m0 + 4u, k0);
        let a2 = load_a(m0 + 8u, k0);
        let a3 = load_a(m0 + 12u, k0);
        let b0 = load_b(n0 + 0u, k0);
        let b1 = load_b(n0 + 4u, k0);
        let b2 = load_b(n0 + 8u, k0);
        let b3 = load_b(n0 + 12u, k0);
        let b4 = load_b(n0 + 16u, k0);
        let b5 = load_b(n0 + 20u, k0);
        let b6 = load_b(n0 + 24u, k0);
        let b7 = load_b(n0 + 28u, k0);
        c0_0 += b0 * a0;
        c0_1 += b1 * a0;
        c0_2 += b2 * a0;
        c0_3 += b3 * a0;
        c0_4 += b4 * a0;
        c0_5 += b5 * a0;
        c0_6 += b6 * a0;
        c0_7 += b7 * a0;
        c1_0 += b0 * a1;
        c1_1 += b1 * a1;
        c1_2 += b2 * a1;
        c1_3 += b3 * a1;
        c1_4 += b4 * a1;
        c1_5 += b5 * a1;
        c1_6 += b6 * a1;
        c1_7 += b7 * a1;
        c2_0 += b0 * a2;
        c2_1 += b1 * a2;
        c2_2 += b2 * a2;
        c2_3 += b3 * a2;
        c2_4 += b4 * a2;
        c2_5 += b5 * a2;
        c2_6 += b6 * a2;
        c2_7 += b7 * a2;
        c3_0 += b0 * a3;
        c3_1 += b1 * a3;
        c3_2 += b2 * a3;
        c3_3 += b3 * a3;
        c3_4 += b4 * a3;
        c3_5 += b5 * a3;
        c3_6 += b6 * a3;
        c3_7 += b7 * a3;
    }
    let w = p.n / 4u;
    store(m0 + 0u, n0 + 0u, w, c0_0);
    store(m0 + 0u, n0 + 4u, w, c0_1);
    store(m0 + 0u, n0 + 8u, w, c0_2);
    store(m0 + 0u, n0 + 12u, w, c0_3);
    store(m0 + 0u, n0 + 16u, w, c0_4);
    store(m0 + 0u, n0 + 20u, w, c0_5);
    store(m0 + 0u, n0 + 24u, w, c0_6);
    store(m0 + 0u, n0 + 28u, w, c0_7);
    store(m0 + 4u, n0 + 0u, w, c1_0);
    store(m0 + 4u, n0 + 4u, w, c1_1);
    store(m0 + 4u, n0 + 8u, w, c1_2);
    store(m0 + 4u, n0 + 12u, w, c1_3);
    store(m0 + 4u, n0 + 16u, w, c1_4);
    store(m0 + 4u, n0 + 20u, w, c1_5);
    store(m0 + 4u, n0 + 24u, w, c1_6);
    store(m0 + 4u, n0 + 28u, w, c1_7);
    store(m0 + 8u, n0 + 0u, w, c2_0);
    store(m0 + 8u, n0 + 4u, w, c2_1);
    store(m0 + 8u, n0 + 8u, w, c2_2);
    store(m0 + 8u, n0 + 12u, w, c2_3);
    store(m0 + 8u, n0 + 16u, w, c2_4);
    store(m0 + 8u, n0 + 20u, w, c2_5);
    store(m0 + 8u, n0 + 24u, w, c2_6);
    store(m0 + 8u, n0 + 28u, w, c2_7);
    store(m0 + 12u, n0 + 0u, w, c3_0);
    store(m0 + 12u, n0 + 4u, w, c3_1);
    store(m0 + 12u, n0 + 8u, w, c3_2);
    store(m0 + 12u, n0 + 12u, w, c3_3);
    store(m0 + 12u, n0 + 16u, w, c3_4);
    store(m0 + 12u, n0 + 20u, w, c3_5);
    store(m0 + 12u, n0 + 24u, w, c3_6);
    store(m0 + 12u, n0 + 28u, w, c3_7);
}

fn store(m: u32, n: u32, w: u32, v: mat4x4<f32>) {
    for (var r = 0u; r < 4u; r++) {
        if (m + r < p.m && n < p.n) {
            var x = v[r];
            if ((p.flags & 1u) != 0u) {
                x += bias[n / 4u];
            }
            let idx = (m + r) * w + n / 4u;
            if ((p.flags & 2u) != 0u) {
                x += acc_in[idx];
            }
            c[idx] = x;
        }
    }
}
