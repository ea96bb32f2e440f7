// GEMM: c[M,N] = op(a)·op(b) (+ bias[n]) (+ acc[m,n]); op = transpose when TA / TB.
// a is [M,K] (TA: [K,M]), b is [K,N] (TB: [N,K]), all row-major f32.
//
// Built for CPU adapters first (lavapipe/llvmpipe run invocations as SIMD
// lanes, where barriers and workgroup memory are slow): no workgroup memory;
// each invocation keeps a TM×TN tile of c in registers. All invocations of a
// workgroup share the same TM rows, so a's loads are uniform (one scalar load
// per SIMD group); each invocation owns TN consecutive columns of b.
//
// This file is completed by one of two tails appended in src/kernels/gemm.rs:
// they declare `b` (binding 2) as array<f32> or array<vec4<f32>> (only when
// the vec4 loads are aligned) with accessors b1 (element) and b4 (4 elements
// at a multiple of 4), plus the entry point. Grid: p.groups workgroups folded
// into x/y (see fold_workgroups); linear id = wg.y * nwg.x + wg.x.

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

// Transposes (pipeline constants, so the dead layout folds away).
override TA: bool = false;
override TB: bool = false;
// Invocations per workgroup, all along n.
override WG: u32 = 16u;

// Register tile: TM rows × TN columns (TN = 4·VN) per invocation.
const TM: u32 = 4u;
const VN: u32 = 4u;
const TN: u32 = 4u * VN;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read> acc_in: array<f32>;
@group(0) @binding(5) var<storage, read_write> c: array<f32>;

alias Tile = array<array<vec4<f32>, VN>, TM>;
alias ABlock = array<vec4<f32>, TM>;          // [i] = a(m0+i, k0..k0+4)
alias BBlock = array<array<vec4<f32>, VN>, 4>; // [t][j] = b(k0+t, n0+4j..n0+4j+4)

// a(m, k) for in-range m, k.
fn a_at(m: u32, k: u32) -> f32 {
    if (TA) {
        return a[k * p.m + m];
    }
    return a[m * p.k + k];
}

// b(k, n) for in-range k, n.
fn b_at(k: u32, n: u32) -> f32 {
    if (TB) {
        return b1(n * p.k + k);
    }
    return b1(k * p.n + n);
}

// Rows past M are clamped: they load real data whose results are never stored.
fn load_a(m0: u32, k0: u32) -> ABlock {
    var r: ABlock;
    for (var i = 0u; i < TM; i++) {
        let m = min(m0 + i, p.m - 1u);
        r[i] = vec4<f32>(a_at(m, k0), a_at(m, k0 + 1u), a_at(m, k0 + 2u), a_at(m, k0 + 3u));
    }
    return r;
}

// Columns past N are clamped like rows. B_VEC (from the tail) says whether b's
// rows (TB: its columns) can be read as aligned vec4s.
fn load_b(n0: u32, k0: u32) -> BBlock {
    var r: BBlock;
    for (var j = 0u; j < VN; j++) {
        let n = n0 + 4u * j;
        if (B_VEC && !TB) {
            // N % 4 == 0: 4 consecutive columns of a row are one aligned vec4.
            let nc = min(n, p.n - 4u);
            for (var t = 0u; t < 4u; t++) {
                r[t][j] = b4(((k0 + t) * p.n + nc) / 4u);
            }
        } else if (B_VEC && TB) {
            // K % 4 == 0: 4 consecutive k of one column are an aligned vec4.
            let v0 = b4((min(n, p.n - 1u) * p.k + k0) / 4u);
            let v1 = b4((min(n + 1u, p.n - 1u) * p.k + k0) / 4u);
            let v2 = b4((min(n + 2u, p.n - 1u) * p.k + k0) / 4u);
            let v3 = b4((min(n + 3u, p.n - 1u) * p.k + k0) / 4u);
            r[0][j] = vec4<f32>(v0.x, v1.x, v2.x, v3.x);
            r[1][j] = vec4<f32>(v0.y, v1.y, v2.y, v3.y);
            r[2][j] = vec4<f32>(v0.z, v1.z, v2.z, v3.z);
            r[3][j] = vec4<f32>(v0.w, v1.w, v2.w, v3.w);
        } else {
            let c0 = min(n, p.n - 1u);
            let c1 = min(n + 1u, p.n - 1u);
            let c2 = min(n + 2u, p.n - 1u);
            let c3 = min(n + 3u, p.n - 1u);
            for (var t = 0u; t < 4u; t++) {
                let k = k0 + t;
                r[t][j] = vec4<f32>(b_at(k, c0), b_at(k, c1), b_at(k, c2), b_at(k, c3));
            }
        }
    }
    return r;
}

// The last K % 4 values of k: scalar loads, lanes past K read as 0 (not as a
// clamped copy, which would be added twice).
fn load_tail(m0: u32, n0: u32, k0: u32, av: ptr<function, ABlock>, bv: ptr<function, BBlock>) {
    for (var t = 0u; t < 4u; t++) {
        let ok = k0 + t < p.k;
        let k = min(k0 + t, p.k - 1u);
        for (var i = 0u; i < TM; i++) {
            (*av)[i][t] = select(0.0, a_at(min(m0 + i, p.m - 1u), k), ok);
        }
        for (var j = 0u; j < VN; j++) {
            let n = n0 + 4u * j;
            let v = vec4<f32>(
                b_at(k, min(n, p.n - 1u)),
                b_at(k, min(n + 1u, p.n - 1u)),
                b_at(k, min(n + 2u, p.n - 1u)),
                b_at(k, min(n + 3u, p.n - 1u)));
            (*bv)[t][j] = select(vec4<f32>(0.0), v, ok);
        }
    }
}

fn update(acc: ptr<function, Tile>, av: ABlock, bv: BBlock) {
    for (var i = 0u; i < TM; i++) {
        let x = av[i];
        for (var j = 0u; j < VN; j++) {
            (*acc)[i][j] += x.x * bv[0][j] + x.y * bv[1][j] + x.z * bv[2][j] + x.w * bv[3][j];
        }
    }
}

fn store(m: u32, n: u32, v: f32) {
    if (n >= p.n) {
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
    c[idx] = r;
}

fn gemm_main(wg: vec3<u32>, nwg: vec3<u32>, lid: u32) {
    let g = wg.y * nwg.x + wg.x;
    if (g >= p.groups) {
        return;
    }
    let m0 = (g / p.groups_n) * TM;
    // Invocations past N clamp their loads and store nothing; no early return,
    // so control flow stays uniform and lavapipe keeps a's loads scalar.
    let n0 = ((g % p.groups_n) * WG + lid) * TN;
    var acc: Tile;
    let k4 = p.k & ~3u;
    for (var k0 = 0u; k0 < k4; k0 += 4u) {
        update(&acc, load_a(m0, k0), load_b(n0, k0));
    }
    if (k4 < p.k) {
        var av: ABlock;
        var bv: BBlock;
        load_tail(m0, n0, k4, &av, &bv);
        update(&acc, av, bv);
    }
    for (var i = 0u; i < TM; i++) {
        let m = m0 + i;
        if (m >= p.m) {
            break;
        }
        for (var j = 0u; j < VN; j++) {
            let n = n0 + 4u * j;
            let v = acc[i][j];
            store(m, n, v.x);
            store(m, n + 1u, v.y);
            store(m, n + 2u, v.z);
            store(m, n + 3u, v.w);
        }
    }
}
