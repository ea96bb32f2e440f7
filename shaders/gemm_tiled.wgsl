// GEMM for real GPUs, appended to the shared header in src/kernels/gemm/precision.rs:
// c[M,N] = a·b (+ bias[n]) (+ acc[m,n]), a [M,K] with row stride p.lda, b
// [K,N] with row stride p.ldb (transposed operands are packed first); any shape.
//
// Classic workgroup-memory tiling: a 16×16 workgroup computes a 64×64 tile
// of c, 4×4 per invocation, staging 64×16 slices of a and b in
// workgroup memory between barriers. Slow on CPU adapters (barriers and
// workgroup memory are emulated there; see the register kernel in
// src/kernels/gemm/register.rs), so only chosen when the adapter is not a
// CPU. Grid: p.groups workgroups folded into x/y.

// Tile of c per workgroup (BT × BT), K slice (BK), per invocation (4 × 4).
const BT: u32 = 64u;
const BK: u32 = 16u;

@group(0) @binding(1) var<storage, read> a: array<AIn>;
@group(0) @binding(2) var<storage, read> b: array<AIn>;

// [kk * BT + mm] = a(m0 + mm, k0 + kk); [kk * BT + nn] = b(k0 + kk, n0 + nn).
var<workgroup> sa: array<f32, 1024>;
var<workgroup> sb: array<f32, 1024>;

// a(m, k), or 0 outside [M, K].
fn a_at(m: u32, k: u32) -> f32 {
    let ok = m < p.m && k < p.k;
    let mc = min(m, p.m - 1u);
    let kc = min(k, p.k - 1u);
    return select(0.0, f32(a[mc * p.lda + kc]), ok);
}

// b(k, n), or 0 outside [K, N].
fn b_at(k: u32, n: u32) -> f32 {
    let ok = n < p.n && k < p.k;
    let nc = min(n, p.n - 1u);
    let kc = min(k, p.k - 1u);
    return select(0.0, f32(b[kc * p.ldb + nc]), ok);
}

@compute @workgroup_size(16, 16)
fn gemm_tiled(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_id) lid: vec3<u32>,
              @builtin(local_invocation_index) li: u32) {
    // No early return: every invocation must reach the barriers. Groups past
    // p.groups (a folded grid) load zeros and store nothing.
    let g = wg.y * nwg.x + wg.x;
    let m0 = (g / p.groups_n) * BT;
    let n0 = (g % p.groups_n) * BT;
    // Row i of this invocation's 4×4 block; whole-vec4 writes only (FXC).
    var acc0 = vec4<f32>();
    var acc1 = vec4<f32>();
    var acc2 = vec4<f32>();
    var acc3 = vec4<f32>();
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
        for (var e = 0u; e < 4u; e++) {
            let idx = li + 256u * e;
            let kk = idx / BT;
            let x = idx % BT;
            sa[idx] = a_at(m0 + x, k0 + kk);
            sb[idx] = b_at(k0 + kk, n0 + x);
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk++) {
            let ia = kk * BT + lid.y * 4u;
            let ib = kk * BT + lid.x * 4u;
            let bv = vec4<f32>(sb[ib], sb[ib + 1u], sb[ib + 2u], sb[ib + 3u]);
            acc0 = fma(vec4<f32>(sa[ia]), bv, acc0);
            acc1 = fma(vec4<f32>(sa[ia + 1u]), bv, acc1);
            acc2 = fma(vec4<f32>(sa[ia + 2u]), bv, acc2);
            acc3 = fma(vec4<f32>(sa[ia + 3u]), bv, acc3);
        }
        workgroupBarrier();
    }
    if (g >= p.groups) {
        return;
    }
    let m = m0 + lid.y * 4u;
    let n = n0 + lid.x * 4u;
    store4(m, n, acc0);
    store4(m + 1u, n, acc1);
    store4(m + 2u, n, acc2);
    store4(m + 3u, n, acc3);
}
