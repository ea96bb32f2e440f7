// GEMM on cooperative matrices (tensor cores), appended to the shared header
// (src/kernels/gemm/precision.rs) with AIn = f16:
// c[M,N] = a·b (+ bias[n]) (+ acc[m,n]), a [M,K] with row stride p.lda, b
// [K,N] with row stride p.ldb (transposed operands are packed first); any
// shape. Products are 16×16×16 f16 × f16 steps accumulated in f32.
//
// A workgroup is 8 subgroups of 32 (the host picks this kernel only where
// subgroups are exactly 32 wide) and computes a 128×128 tile of c: each
// subgroup a 32×64 block as 2×4 accumulators. Where the tile and a 32-deep
// slice of K lie inside a and b, and both row strides are multiples of 8
// halves (the 16-byte alignment VK_KHR_cooperative_matrix asks of a load's
// pointer and stride), each subgroup loads its matrices straight from the
// buffers; elsewhere (edges, ragged shapes) the slices are staged in
// workgroup memory, zero past the edges. The epilogue passes each
// accumulator through a 16×16 scratch per subgroup, so bias, acc, the
// bounds and COut's rounding are the other kernels' store1. Grid: p.groups
// workgroups folded into x/y.

const BT: u32 = 128u;
const BK: u32 = 32u;

@group(0) @binding(1) var<storage, read> a: array<f16>;
@group(0) @binding(2) var<storage, read> b: array<f16>;

// [mm * BK + kk] = a(m0 + mm, k0 + kk); [kk * BT + nn] = b(k0 + kk, n0 + nn).
var<workgroup> sa: array<f16, 4096>;
var<workgroup> sb: array<f16, 4096>;
// One 16×16 f32 tile per subgroup, for the epilogue.
var<workgroup> sc: array<f32, 2048>;

// a(m, k), or 0 outside [M, K].
fn a_at(m: u32, k: u32) -> f16 {
    let ok = m < p.m && k < p.k;
    return select(f16(0.0), a[min(m, p.m - 1u) * p.lda + min(k, p.k - 1u)], ok);
}

// b(k, n), or 0 outside [K, N].
fn b_at(k: u32, n: u32) -> f16 {
    let ok = n < p.n && k < p.k;
    return select(f16(0.0), b[min(k, p.k - 1u) * p.ldb + min(n, p.n - 1u)], ok);
}

// Store one 16×16 accumulator whose top-left is c(m, n): through this
// subgroup's scratch, 8 elements per lane. Every invocation calls it alike
// (barriers); `live` is false for a folded grid's spare groups.
fn flush(t: coop_mat16x16<f32, C>, w: u32, lane: u32, m: u32, n: u32, live: bool) {
    coopStoreT(t, &sc[w * 256u], 16u);
    workgroupBarrier();
    for (var e = 0u; e < 8u; e++) {
        let i = lane + 32u * e;
        let r = m + i / 16u;
        if (live && r < p.m) {
            store1(r, n + i % 16u, sc[w * 256u + i]);
        }
    }
    workgroupBarrier();
}

@compute @workgroup_size(256)
fn gemm_coop(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) li: u32) {
    // No early return: every invocation must reach the barriers.
    let g = wg.y * nwg.x + wg.x;
    let m0 = (g / p.groups_n) * BT;
    let n0 = (g % p.groups_n) * BT;
    let w = li / 32u;
    let lane = li % 32u;
    // This subgroup's block: rows wm..wm+32, columns wn..wn+64 of the tile.
    let wm = (w / 2u) * 32u;
    let wn = (w % 2u) * 64u;
    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c02 = coop_mat16x16<f32, C>();
    var c03 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    var c12 = coop_mat16x16<f32, C>();
    var c13 = coop_mat16x16<f32, C>();
    // Whole tile inside a and b, strides aligned: whole 32-deep slices of K
    // load from the buffers, the rest (all of K elsewhere) is staged.
    // (Cooperative operations need uniform control flow, and naga counts
    // every loaded `var` as non-uniform: the split is a `let` of uniforms.)
    let inside = m0 + BT <= p.m && n0 + BT <= p.n && (p.lda % 8u) == 0u && (p.ldb % 8u) == 0u;
    let k_direct = select(0u, p.k - p.k % BK, inside);
    for (var k0 = 0u; k0 < k_direct; k0 += BK) {
        for (var kk = 0u; kk < BK; kk += 16u) {
            let ia = (m0 + wm) * p.lda + k0 + kk;
            let ib = (k0 + kk) * p.ldb + n0 + wn;
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&a[ia], p.lda);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&a[ia + 16u * p.lda], p.lda);
            let b0 = coopLoadT<coop_mat16x16<f16, B>>(&b[ib], p.ldb);
            let b1 = coopLoadT<coop_mat16x16<f16, B>>(&b[ib + 16u], p.ldb);
            let b2 = coopLoadT<coop_mat16x16<f16, B>>(&b[ib + 32u], p.ldb);
            let b3 = coopLoadT<coop_mat16x16<f16, B>>(&b[ib + 48u], p.ldb);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c02 = coopMultiplyAdd(a0, b2, c02);
            c03 = coopMultiplyAdd(a0, b3, c03);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            c12 = coopMultiplyAdd(a1, b2, c12);
            c13 = coopMultiplyAdd(a1, b3, c13);
        }
    }
    for (var k0 = k_direct; k0 < p.k; k0 += BK) {
        for (var e = 0u; e < 16u; e++) {
            let i = li + 256u * e;
            sa[i] = a_at(m0 + i / BK, k0 + i % BK);
            sb[i] = b_at(k0 + i / BT, n0 + i % BT);
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk += 16u) {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&sa[wm * BK + kk], BK);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&sa[(wm + 16u) * BK + kk], BK);
            let b0 = coopLoadT<coop_mat16x16<f16, B>>(&sb[kk * BT + wn], BT);
            let b1 = coopLoadT<coop_mat16x16<f16, B>>(&sb[kk * BT + wn + 16u], BT);
            let b2 = coopLoadT<coop_mat16x16<f16, B>>(&sb[kk * BT + wn + 32u], BT);
            let b3 = coopLoadT<coop_mat16x16<f16, B>>(&sb[kk * BT + wn + 48u], BT);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c02 = coopMultiplyAdd(a0, b2, c02);
            c03 = coopMultiplyAdd(a0, b3, c03);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            c12 = coopMultiplyAdd(a1, b2, c12);
            c13 = coopMultiplyAdd(a1, b3, c13);
        }
        workgroupBarrier();
    }
    let live = g < p.groups;
    let m = m0 + wm;
    let n = n0 + wn;
    flush(c00, w, lane, m, n, live);
    flush(c01, w, lane, m, n + 16u, live);
    flush(c02, w, lane, m, n + 32u, live);
    flush(c03, w, lane, m, n + 48u, live);
    flush(c10, w, lane, m + 16u, n, live);
    flush(c11, w, lane, m + 16u, n + 16u, live);
    flush(c12, w, lane, m + 16u, n + 32u, live);
    flush(c13, w, lane, m + 16u, n + 48u, live);
}
