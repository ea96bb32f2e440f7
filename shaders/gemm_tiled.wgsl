// GEMM for real GPUs: c[M,N] = op(a)·op(b) (+ bias[n]) (+ acc[m,n]).
// a is [M,K] (TA: [K,M]), b is [K,N] (TB: [N,K]), all row-major f32; any shape.
//
// Classic workgroup-memory tiling: a 16×16 workgroup computes a 64×64 tile
// of c, 4×4 per invocation, staging 64×16 slices of op(a) and op(b) in
// workgroup memory between barriers. Slow on CPU adapters (barriers and
// workgroup memory are emulated there; see gemm_cpu.wgsl), so only chosen
// when the adapter is not a CPU. Grid: p.groups workgroups folded into x/y.

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

// Tile of c per workgroup (BT × BT), K slice (BK), per invocation (4 × 4).
const BT: u32 = 64u;
const BK: u32 = 16u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read> acc_in: array<f32>;
@group(0) @binding(5) var<storage, read_write> c: array<f32>;

// [kk * BT + mm] = op(a)(m0 + mm, k0 + kk); [kk * BT + nn] = op(b)(k0 + kk, n0 + nn).
var<workgroup> sa: array<f32, 1024>;
var<workgroup> sb: array<f32, 1024>;

// op(a)(m, k), or 0 outside [M, K].
fn a_at(m: u32, k: u32) -> f32 {
    let ok = m < p.m && k < p.k;
    let mc = min(m, p.m - 1u);
    let kc = min(k, p.k - 1u);
    var v: f32;
    if (TA) {
        v = a[kc * p.m + mc];
    } else {
        v = a[mc * p.k + kc];
    }
    return select(0.0, v, ok);
}

// op(b)(k, n), or 0 outside [K, N].
fn b_at(k: u32, n: u32) -> f32 {
    let ok = n < p.n && k < p.k;
    let nc = min(n, p.n - 1u);
    let kc = min(k, p.k - 1u);
    var v: f32;
    if (TB) {
        v = b[nc * p.k + kc];
    } else {
        v = b[kc * p.n + nc];
    }
    return select(0.0, v, ok);
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
    var acc: array<array<f32, 4>, 4>;
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
            var av: array<f32, 4>;
            var bv: array<f32, 4>;
            for (var i = 0u; i < 4u; i++) {
                av[i] = sa[kk * BT + lid.y * 4u + i];
                bv[i] = sb[kk * BT + lid.x * 4u + i];
            }
            for (var i = 0u; i < 4u; i++) {
                for (var j = 0u; j < 4u; j++) {
                    acc[i][j] = fma(av[i], bv[j], acc[i][j]);
                }
            }
        }
        workgroupBarrier();
    }
    if (g >= p.groups) {
        return;
    }
    for (var i = 0u; i < 4u; i++) {
        let m = m0 + lid.y * 4u + i;
        for (var j = 0u; j < 4u; j++) {
            let n = n0 + lid.x * 4u + j;
            if (m < p.m && n < p.n) {
                var r = acc[i][j];
                if ((p.flags & 1u) != 0u) {
                    r += bias[n];
                }
                let idx = m * p.n + n;
                if ((p.flags & 2u) != 0u) {
                    r += acc_in[idx];
                }
                c[idx] = r;
            }
        }
    }
}
