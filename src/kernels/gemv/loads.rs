//! How the small-M GEMM loads its operands: WGSL snippets composed in
//! front of `shaders/gemv.wgsl` (the loads it names, and for bf16 weights
//! eight-wide the `gemv_nk8` entry), one per binding and element type;
//! `ldb8_nk` (`shaders/gemv_split.wgsl`'s chunk) is `B8_FROM_4` except
//! in `B_VEC8_BF16`.

/// A read as vec4s (rows of whole vec4s).
pub(crate) const A_VEC4: &str = "alias AV = vec4<AIn>;
fn lda4(m: u32, q: u32) -> vec4<f32> { return vec4<f32>(a_ld(arow(m) * (p.k / 4u) + q)); }
fn lda(m: u32, k: u32) -> f32 { let i = arow(m) * p.k + k; return f32(a_ld(i / 4u)[i % 4u]); }
";

/// A read element by element.
pub(crate) const A_SCALAR: &str = "alias AV = AIn;
fn lda4(m: u32, q: u32) -> vec4<f32> {
    let i = arow(m) * p.k + 4u * q;
    return vec4<f32>(f32(a_ld(i)), f32(a_ld(i + 1u)), f32(a_ld(i + 2u)), f32(a_ld(i + 3u)));
}
fn lda(m: u32, k: u32) -> f32 { return f32(a_ld(arow(m) * p.k + k)); }
";

/// B read as vec4s: `[N, K]` with K a multiple of 4, or `[K, N]` with N one.
pub(super) const B_VEC4: &str = "alias BV = vec4<BIn>;
fn ldb4_nk(n: u32, q: u32) -> vec4<f32> { return vec4<f32>(b_ld(n * (p.k / 4u) + q)); }
fn ldb_nk(n: u32, k: u32) -> f32 { let i = n * p.k + k; return f32(b_ld(i / 4u)[i % 4u]); }
fn ldb4_kn(k: u32, j: u32) -> vec4<f32> { return vec4<f32>(b_ld(k * (p.n / 4u) + j)); }
";

/// B read element by element (columns past N read the last one).
pub(super) const B_SCALAR: &str = "alias BV = BIn;
fn ldb4_nk(n: u32, q: u32) -> vec4<f32> {
    let i = n * p.k + 4u * q;
    return vec4<f32>(f32(b_ld(i)), f32(b_ld(i + 1u)), f32(b_ld(i + 2u)), f32(b_ld(i + 3u)));
}
fn ldb_nk(n: u32, k: u32) -> f32 { return f32(b_ld(n * p.k + k)); }
fn ldb4_kn(k: u32, j: u32) -> vec4<f32> {
    let i = k * p.n;
    let c = 4u * j;
    let last = p.n - 1u;
    return vec4<f32>(f32(b_ld(i + c)), f32(b_ld(i + min(c + 1u, last))),
        f32(b_ld(i + min(c + 2u, last))), f32(b_ld(i + min(c + 3u, last))));
}
";

/// bf16 B four elements (two words) a load, widened by shifts: `[N, K]`
/// with K a multiple of 4, or `[K, N]` with N one. Element 2w is word w's
/// low half (little-endian, as checkpoints store it).
pub(super) const B_VEC4_BF16: &str = "alias BV = vec2<u32>;
fn wide4(v: vec2<u32>) -> vec4<f32> {
    return vec4<f32>(bitcast<f32>(v.x << 16u), bitcast<f32>(v.x & 0xffff0000u),
        bitcast<f32>(v.y << 16u), bitcast<f32>(v.y & 0xffff0000u));
}
fn ldb4_nk(n: u32, q: u32) -> vec4<f32> { return wide4(b_ld(n * (p.k / 4u) + q)); }
fn ldb_nk(n: u32, k: u32) -> f32 {
    let i = n * p.k + k;
    let w = b_ld(i / 4u)[(i / 2u) % 2u];
    return bitcast<f32>(select(w << 16u, w & 0xffff0000u, (i & 1u) == 1u));
}
fn ldb4_kn(k: u32, j: u32) -> vec4<f32> { return wide4(b_ld(k * (p.n / 4u) + j)); }
";

/// bf16 B element by element (columns past N read the last one).
pub(super) const B_SCALAR_BF16: &str = "alias BV = u32;
fn bf(i: u32) -> f32 {
    let w = b_ld(i / 2u);
    return bitcast<f32>(select(w << 16u, w & 0xffff0000u, (i & 1u) == 1u));
}
fn ldb4_nk(n: u32, q: u32) -> vec4<f32> {
    let i = n * p.k + 4u * q;
    return vec4<f32>(bf(i), bf(i + 1u), bf(i + 2u), bf(i + 3u));
}
fn ldb_nk(n: u32, k: u32) -> f32 { return bf(n * p.k + k); }
fn ldb4_kn(k: u32, j: u32) -> vec4<f32> {
    let i = k * p.n;
    let c = 4u * j;
    let last = p.n - 1u;
    return vec4<f32>(bf(i + c), bf(i + min(c + 1u, last)), bf(i + min(c + 2u, last)),
        bf(i + min(c + 3u, last)));
}
";

/// bf16 B `[N, K]` with K a multiple of 8, eight elements (four words) a
/// load, and the entry `gemv_nk8` stepping K by 8: half the loads per
/// product of the four-wide path (lavapipe loads storage lane by lane, a
/// load at a time), with the same sums in the same order, so the same bits.
pub(super) const B_VEC8_BF16: &str = "alias BV = vec4<u32>;
fn wide4(v: vec2<u32>) -> vec4<f32> {
    return vec4<f32>(bitcast<f32>(v.x << 16u), bitcast<f32>(v.x & 0xffff0000u),
        bitcast<f32>(v.y << 16u), bitcast<f32>(v.y & 0xffff0000u));
}
fn half8(v: vec4<u32>, hi: bool) -> vec4<f32> { return wide4(select(v.xy, v.zw, hi)); }
// The split entry's chunk: one 16-byte load per eight elements.
fn ldb8_nk(n: u32, c: u32) -> mat2x4<f32> {
    let v = b_ld(n * (p.k / 8u) + c);
    return mat2x4<f32>(wide4(v.xy), wide4(v.zw));
}
// K is a multiple of 8, so n·K/4 is even: q's parity picks the half.
fn ldb4_nk(n: u32, q: u32) -> vec4<f32> {
    return half8(b_ld((n * (p.k / 4u) + q) / 2u), (q & 1u) == 1u);
}
fn ldb_nk(n: u32, k: u32) -> f32 {
    let i = n * p.k + k;
    let w = b_ld(i / 8u)[(i / 2u) % 4u];
    return bitcast<f32>(select(w << 16u, w & 0xffff0000u, (i & 1u) == 1u));
}
fn ldb4_kn(k: u32, j: u32) -> vec4<f32> {
    let i = k * (p.n / 4u) + j;
    return half8(b_ld(i / 2u), (i & 1u) == 1u);
}

@compute @workgroup_size(WG)
fn gemv_nk8(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    nk8(wg.y * nwg.x + wg.x, li);
}

// gemv_nk8's work for linear workgroup w (also the grouped entry's).
fn nk8(w: u32, li: u32) {
    let g = w * WG + li;
    let n0 = 4u * g;
    if (n0 >= p.n) {
        return;
    }
    let last = p.n - 1u;
    let k8 = p.k / 8u;
    let r0 = n0 * k8;
    let r1 = min(n0 + 1u, last) * k8;
    let r2 = min(n0 + 2u, last) * k8;
    let r3 = min(n0 + 3u, last) * k8;
    var s: array<vec4<f32>, 8>;
    for (var q = 0u; q < k8; q++) {
        let b0 = b_ld(r0 + q);
        let b1 = b_ld(r1 + q);
        let b2 = b_ld(r2 + q);
        let b3 = b_ld(r3 + q);
        let lo = mat4x4<f32>(wide4(b0.xy), wide4(b1.xy), wide4(b2.xy), wide4(b3.xy));
        let hi = mat4x4<f32>(wide4(b0.zw), wide4(b1.zw), wide4(b2.zw), wide4(b3.zw));
        for (var m = 0u; m < ROWS; m++) {
            let x0 = lda4(m, 2u * q);
            let x1 = lda4(m, 2u * q + 1u);
            s[m] += vec4<f32>(dot(x0, lo[0]), dot(x0, lo[1]), dot(x0, lo[2]), dot(x0, lo[3]));
            s[m] += vec4<f32>(dot(x1, hi[0]), dot(x1, hi[1]), dot(x1, hi[2]), dot(x1, hi[3]));
        }
    }
    for (var m = 0u; m < ROWS; m++) {
        store4(m, n0, s[m]);
    }
}
";

/// The split entry's eight-element chunk as two four-wide loads (every
/// binding but `B_VEC8_BF16`, which loads it as one vec4 of words).
pub(super) const B8_FROM_4: &str = "fn ldb8_nk(n: u32, c: u32) -> mat2x4<f32> {
    return mat2x4<f32>(ldb4_nk(n, 2u * c), ldb4_nk(n, 2u * c + 1u));
}
";
