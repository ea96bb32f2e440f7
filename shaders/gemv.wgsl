// Small-M GEMM ("GEMV"): c[M,N] = act(a·op(b) (+ bias[n]) (+ acc[m,n])),
// or act(a·op(b) (+ bias[n])) ⊙ acc[m,n] (SwiGLU's gate times up), for
// M ≤ 8 rows, reading b (a weight) where it is stored: [N, K] (entry
// gemv_nk, the layers' x·Wᵀ) or [K, N] (gemv_kn). No pack: one token's
// GEMMs are bound by streaming the weight once, and a pack would stream it
// twice more (a weight read again and again may be kept as a texture:
// gemv_texture.wgsl). a is [M, K] row-major.
//
// Each invocation owns four adjacent columns of c and every row (ROWS ≥ M,
// an override: 1, 2, 4 or 8), so each weight element is loaded once for all
// rows. src/kernels/gemv/sources.rs composes in front: `enable f16;` where needed,
// the aliases AIn / COut (element types of a, b and of c), AV / BV (how a
// and b are bound: AIn or vec4<AIn>) and the loads
//   lda4(m, q) -> vec4<f32>: a[m, 4q..4q+4]     (4q + 3 < K)
//   lda(m, k) -> f32:        a[m, k]
//   ldb4_nk(n, q) -> vec4<f32>: b[n, 4q..4q+4]  (b [N, K], 4q + 3 < K)
//   ldb_nk(n, k) -> f32:     b[n, k]
//   ldb4_kn(k, j) -> vec4<f32>: b[k, 4j..4j+4], zero past N (b [K, N])
// each reading vec4s where the row length allows (bindings AV / BV).
// Grid: p.groups workgroups folded into x/y; linear id = wg.y * nwg.x + wg.x.

// Composed in front (src/kernels/gemv/sources.rs): gemv_ab.wgsl or
// gemv_group.wgsl's bindings (a_ld, b_ld), the loads, gemv_params.wgsl
// (one product's p, bias_at, acc_at, put) or the grouped ones, and
// gemv_header.wgsl (ROWS, WG, arow, store1, store4).

// b [N, K]: columns 4g..4g+4 of c are rows of b, each walked along K.
@compute @workgroup_size(WG)
fn gemv_nk(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    nk(wg.y * nwg.x + wg.x, li);
}

// gemv_nk's work for linear workgroup w (also the grouped entry's).
fn nk(w: u32, li: u32) {
    let g = w * WG + li;
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
