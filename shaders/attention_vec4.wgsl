// masked_dots and mix of attention.wgsl reading and writing whole vec4s, for
// problems where head_dim, the key count and every view's base and strides
// are multiples of 4 (src/kernels/attention/launch.rs picks them).
// attention_header.wgsl comes first in the module, then the operands' loads
// ld_a, ld_b, ld_m: attention_buffers.wgsl or attention_textures.wgsl.
//
// Why: CPU adapters pay far more for a load than for a multiply-add. These
// entries load a vec4 where the scalar ones load a float, and a workgroup's
// rows of the shared operand are the same for every lane. Each accumulator
// adds the same products in the same order as the scalar entries, so the
// results are theirs bit for bit (mix adds a few more products of exact
// zeros, where the score matrix is masked, which leave a sum unchanged).

@group(0) @binding(4) var<storage, read_write> out4: array<vec4<f32>>;

// Row i of a score tile: columns j0..j0+4 (all below tk), scale * v where
// unmasked, 0 where masked.
fn store_scores4(row: u32, i: u32, j0: u32, v: vec4<f32>) {
    if (i >= p.tq) { return; }
    let seen = vec4<bool>(visible(i, j0), visible(i, j0 + 1u), visible(i, j0 + 2u), visible(i, j0 + 3u));
    out4[(row + j0) / 4u] = select(vec4<f32>(0.0), p.scale * v, seen);
}

// attention.wgsl's masked_dots; tk is a multiple of 4. A workgroup takes
// four query rows (from its id alone, so their loads are the same address
// on every lane: one load, broadcast) against 64 tiles of 4 keys, a lane's.
@compute @workgroup_size(64)
fn masked_dots(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) li: u32) {
    let w = wg.y * nwg.x + wg.x;
    let nj = p.tk / 4u;
    let blocks = (nj + 63u) / 64u;
    let ni = (p.tq + 3u) / 4u;
    if (w >= p.n) { return; }
    let jt = (w % blocks) * 64u + li;
    if (jt >= nj) { return; }
    let j0 = jt * 4u;
    let i0 = ((w / blocks) % ni) * 4u;
    let bh = w / (blocks * ni);
    let h = bh % p.heads;
    let b = bh / p.heads;
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    let i_last = min(i0 + 3u, p.tq - 1u);
    if (j0 <= p.past + i_last && j0 + 4u > first_key(i0)) {
        let ia0 = a_at(b, h, min(i0, p.tq - 1u)) / 4u;
        let ia1 = a_at(b, h, min(i0 + 1u, p.tq - 1u)) / 4u;
        let ia2 = a_at(b, h, min(i0 + 2u, p.tq - 1u)) / 4u;
        let ia3 = a_at(b, h, min(i0 + 3u, p.tq - 1u)) / 4u;
        let c = kvh(h);
        let jb0 = b_at(b, c, j0) / 4u;
        let jb1 = b_at(b, c, j0 + 1u) / 4u;
        let jb2 = b_at(b, c, j0 + 2u) / 4u;
        let jb3 = b_at(b, c, j0 + 3u) / 4u;
        for (var e = 0u; e < p.d / 4u; e++) {
            let k0 = ld_b(jb0 + e);
            let k1 = ld_b(jb1 + e);
            let k2 = ld_b(jb2 + e);
            let k3 = ld_b(jb3 + e);
            let q0 = ld_a(ia0 + e);
            let q1 = ld_a(ia1 + e);
            let q2 = ld_a(ia2 + e);
            let q3 = ld_a(ia3 + e);
            // Elements 4e.. in order, each against the four keys.
            let kx = vec4<f32>(k0.x, k1.x, k2.x, k3.x);
            acc0 += q0.x * kx;
            acc1 += q1.x * kx;
            acc2 += q2.x * kx;
            acc3 += q3.x * kx;
            let ky = vec4<f32>(k0.y, k1.y, k2.y, k3.y);
            acc0 += q0.y * ky;
            acc1 += q1.y * ky;
            acc2 += q2.y * ky;
            acc3 += q3.y * ky;
            let kz = vec4<f32>(k0.z, k1.z, k2.z, k3.z);
            acc0 += q0.z * kz;
            acc1 += q1.z * kz;
            acc2 += q2.z * kz;
            acc3 += q3.z * kz;
            let kw = vec4<f32>(k0.w, k1.w, k2.w, k3.w);
            acc0 += q0.w * kw;
            acc1 += q1.w * kw;
            acc2 += q2.w * kw;
            acc3 += q3.w * kw;
        }
    }
    let row0 = (bh * p.tq + i0) * p.tk;
    store_scores4(row0, i0, j0, acc0);
    store_scores4(row0 + p.tk, i0 + 1u, j0, acc1);
    store_scores4(row0 + 2u * p.tk, i0 + 2u, j0, acc2);
    store_scores4(row0 + 3u * p.tk, i0 + 3u, j0, acc3);
}

// Row r of an output tile: elements e0..e0+4 (all below d), scale * v.
fn store_row4(b: u32, h: u32, r: u32, rows: u32, e0: u32, v: vec4<f32>) {
    if (r >= rows) { return; }
    out4[(o_at(b, h, r) + e0) / 4u] = p.scale * v;
}

// attention.wgsl's mix; d and tk are multiples of 4. A workgroup takes four
// output rows (from its id alone, so the score matrix's loads are the same
// address on every lane: one load, broadcast) and 16 tiles of 4 elements,
// a lane's.
@compute @workgroup_size(16)
fn mix(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
       @builtin(local_invocation_index) li: u32) {
    let w = wg.y * nwg.x + wg.x;
    if (w >= p.n) { return; }
    let trans = p.trans != 0u;
    let rows = select(p.tq, p.tk, trans);
    let hs = select(p.heads, p.kv_heads, trans);
    let ne = p.d / 4u;
    let blocks = (ne + 15u) / 16u;
    let nr = (rows + 3u) / 4u;
    let et = (w % blocks) * 16u + li;
    if (et >= ne) { return; }
    let e0 = et * 4u;
    let r0 = ((w / blocks) % nr) * 4u;
    let bh = w / (blocks * nr);
    let h = bh % hs;
    let b = bh / hs;
    let last = rows - 1u;
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    if (!trans) {
        // Four keys a step, from the tile's first visible key rounded down
        // to the last rounded up: M is 0 at the keys the scalar entry skips.
        let mbase = (b * p.heads + h) * p.tq * p.tk;
        let m0 = (mbase + min(r0, last) * p.tk) / 4u;
        let m1 = (mbase + min(r0 + 1u, last) * p.tk) / 4u;
        let m2 = (mbase + min(r0 + 2u, last) * p.tk) / 4u;
        let m3 = (mbase + min(r0 + 3u, last) * p.tk) / 4u;
        let hi = (keys_of(min(r0 + 3u, last)) + 3u) / 4u;
        let c = kvh(h);
        for (var j4 = first_key(min(r0, last)) / 4u; j4 < hi; j4++) {
            let w0 = ld_m(m0 + j4);
            let w1 = ld_m(m1 + j4);
            let w2 = ld_m(m2 + j4);
            let w3 = ld_m(m3 + j4);
            let j = j4 * 4u;
            let x0 = ld_a((a_at(b, c, j) + e0) / 4u);
            acc0 += w0.x * x0;
            acc1 += w1.x * x0;
            acc2 += w2.x * x0;
            acc3 += w3.x * x0;
            let x1 = ld_a((a_at(b, c, j + 1u) + e0) / 4u);
            acc0 += w0.y * x1;
            acc1 += w1.y * x1;
            acc2 += w2.y * x1;
            acc3 += w3.y * x1;
            let x2 = ld_a((a_at(b, c, j + 2u) + e0) / 4u);
            acc0 += w0.z * x2;
            acc1 += w1.z * x2;
            acc2 += w2.z * x2;
            acc3 += w3.z * x2;
            let x3 = ld_a((a_at(b, c, j + 3u) + e0) / 4u);
            acc0 += w0.w * x3;
            acc1 += w1.w * x3;
            acc2 += w2.w * x3;
            acc3 += w3.w * x3;
        }
    } else {
        // Columns r0..r0+4 of M (all below tk), one vec4 of each row i.
        let first = select(0u, r0 - p.past, r0 > p.past);
        var end = p.tq;
        if (p.window > 0u) {
            let reach = r0 + 3u + p.window;
            end = min(p.tq, select(0u, reach - p.past, reach > p.past));
        }
        let g0 = (p.kv0 + h) * p.group;
        let h_lo = select(0u, g0 - p.q0, g0 > p.q0);
        let h_hi = min(p.heads, select(0u, g0 + p.group - p.q0, g0 + p.group > p.q0));
        for (var qh = h_lo; qh < h_hi; qh++) {
            let mbase = ((b * p.heads + qh) * p.tq * p.tk + r0) / 4u;
            for (var i = first; i < end; i++) {
                let x = ld_a((a_at(b, qh, i) + e0) / 4u);
                let m = ld_m(mbase + i * (p.tk / 4u));
                acc0 += m.x * x;
                acc1 += m.y * x;
                acc2 += m.z * x;
                acc3 += m.w * x;
            }
        }
    }
    store_row4(b, h, r0, rows, e0, acc0);
    store_row4(b, h, r0 + 1u, rows, e0, acc1);
    store_row4(b, h, r0 + 2u, rows, e0, acc2);
    store_row4(b, h, r0 + 3u, rows, e0, acc3);
}
