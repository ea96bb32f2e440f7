// One pair's work (gemv_pair.wgsl), copied per pair with its accessors
// a_ld, b_ld, d_ld, put (c) and put2 (e). nk_pair is gemv.wgsl's nk and
// nk8_pair loads.rs's nk8 over two weights and two columns of each: the
// same loads and sums a column.

// c(m, n..n+2) and e(m, n..n+2).
fn store_pair(m: u32, n: u32, s: vec2<f32>, t: vec2<f32>) {
    for (var i = 0u; i < 2u; i++) {
        if (m < p.m && n + i < p.n) {
            let idx = m * p.n + n + i;
            if ((p.flags & 32u) != 0u) {
                put(idx, COut(activate(s[i], (p.flags >> 2u) & 3u) * t[i]));
            } else {
                store1(m, n + i, s[i]);
                put2(idx, COut(t[i]));
            }
        }
    }
}

// f32 weights, K a multiple of 4: two columns of both products an
// invocation (four weight rows, as many streams as nk's four columns).
fn nk_pair(w: u32, li: u32) {
    let g = w * WG + li;
    let n0 = 2u * g;
    if (n0 >= p.n) {
        return;
    }
    let last = p.n - 1u;
    let k4 = p.k / 4u;
    let r0 = n0 * k4;
    let r1 = min(n0 + 1u, last) * k4;
    var s: array<vec2<f32>, 8>;
    var t: array<vec2<f32>, 8>;
    for (var q = 0u; q < k4; q++) {
        let b0 = vec4<f32>(b_ld(r0 + q));
        let b1 = vec4<f32>(b_ld(r1 + q));
        let d0 = vec4<f32>(d_ld(r0 + q));
        let d1 = vec4<f32>(d_ld(r1 + q));
        for (var m = 0u; m < ROWS; m++) {
            let x = lda4(m, q);
            s[m] += vec2<f32>(dot(x, b0), dot(x, b1));
            t[m] += vec2<f32>(dot(x, d0), dot(x, d1));
        }
    }
    for (var m = 0u; m < ROWS; m++) {
        store_pair(m, n0, s[m], t[m]);
    }
}

// bf16 weights, K a multiple of 8: eight elements (four words) a load,
// two columns of both products an invocation.
fn nk8_pair(w: u32, li: u32) {
    let g = w * WG + li;
    let n0 = 2u * g;
    if (n0 >= p.n) {
        return;
    }
    let last = p.n - 1u;
    let k8 = p.k / 8u;
    let r0 = n0 * k8;
    let r1 = min(n0 + 1u, last) * k8;
    var s: array<vec2<f32>, 8>;
    var t: array<vec2<f32>, 8>;
    for (var q = 0u; q < k8; q++) {
        let b0 = b_ld(r0 + q);
        let b1 = b_ld(r1 + q);
        let d0 = d_ld(r0 + q);
        let d1 = d_ld(r1 + q);
        let lo = mat2x4<f32>(wide4(b0.xy), wide4(b1.xy));
        let hi = mat2x4<f32>(wide4(b0.zw), wide4(b1.zw));
        let dlo = mat2x4<f32>(wide4(d0.xy), wide4(d1.xy));
        let dhi = mat2x4<f32>(wide4(d0.zw), wide4(d1.zw));
        for (var m = 0u; m < ROWS; m++) {
            let x0 = lda4(m, 2u * q);
            let x1 = lda4(m, 2u * q + 1u);
            s[m] += vec2<f32>(dot(x0, lo[0]), dot(x0, lo[1]));
            s[m] += vec2<f32>(dot(x1, hi[0]), dot(x1, hi[1]));
            t[m] += vec2<f32>(dot(x0, dlo[0]), dot(x0, dlo[1]));
            t[m] += vec2<f32>(dot(x1, dhi[0]), dot(x1, dhi[1]));
        }
    }
    for (var m = 0u; m < ROWS; m++) {
        store_pair(m, n0, s[m], t[m]);
    }
}
