// The scalar entries of the attention kernels; attention_header.wgsl (the
// parameters and index helpers) comes first in the module.

// One layout for every entry; unused slots get any read-only input.
// write_kv: the new keys (view a).
@group(0) @binding(1) var<storage, read> a_src: array<f32>;
// write_kv: unused.
@group(0) @binding(2) var<storage, read> b_src: array<f32>;
// A score-shaped matrix: P or dS (mix), P (grad_softmax_rows); write_kv:
// the new values (view b).
@group(0) @binding(3) var<storage, read> mat: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

// Row i of a score tile into out (row-major, tk wide from `row`): columns
// j0..j0+4 that exist, scale * v where unmasked, 0 where masked.
fn store_scores(row: u32, i: u32, j0: u32, v: vec4<f32>) {
    if (i >= p.tq) { return; }
    for (var c = 0u; c < 4u; c++) {
        let j = j0 + c;
        if (j < p.tk) {
            out[row + j] = select(0.0, p.scale * v[c], visible(i, j));
        }
    }
}

// out[b, h, i, j] = scale * (a_i . b_j) where query i sees key j, else 0,
// over [batch, heads, tq, tk]: S = q kᵀ / sqrt(d) (a = q, b = k) or
// dP = dO vᵀ (a = dO, b = v, scale 1); a per query head, b per key/value
// head kvh(h). One invocation per 4 x 4 tile of (i, j).
@compute @workgroup_size(64)
fn masked_dots(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) li: u32) {
    let id = invocation(wg, nwg, li);
    if (id >= p.n) { return; }
    let nj = (p.tk + 3u) / 4u;
    let ni = (p.tq + 3u) / 4u;
    let j0 = (id % nj) * 4u;
    let i0 = ((id / nj) % ni) * 4u;
    let bh = id / (nj * ni);
    let h = bh % p.heads;
    let b = bh / p.heads;
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    // Skip tiles wholly above the diagonal or before the window (they
    // store zeros).
    let i_last = min(i0 + 3u, p.tq - 1u);
    if (j0 <= p.past + i_last && j0 + 4u > first_key(i0)) {
        let ia0 = a_at(b, h, min(i0, p.tq - 1u));
        let ia1 = a_at(b, h, min(i0 + 1u, p.tq - 1u));
        let ia2 = a_at(b, h, min(i0 + 2u, p.tq - 1u));
        let ia3 = a_at(b, h, min(i0 + 3u, p.tq - 1u));
        let c = kvh(h);
        let jb0 = b_at(b, c, min(j0, p.tk - 1u));
        let jb1 = b_at(b, c, min(j0 + 1u, p.tk - 1u));
        let jb2 = b_at(b, c, min(j0 + 2u, p.tk - 1u));
        let jb3 = b_at(b, c, min(j0 + 3u, p.tk - 1u));
        for (var e = 0u; e < p.d; e++) {
            let kv = vec4<f32>(b_src[jb0 + e], b_src[jb1 + e], b_src[jb2 + e], b_src[jb3 + e]);
            acc0 += a_src[ia0 + e] * kv;
            acc1 += a_src[ia1 + e] * kv;
            acc2 += a_src[ia2 + e] * kv;
            acc3 += a_src[ia3 + e] * kv;
        }
    }
    let row0 = (bh * p.tq + i0) * p.tk;
    store_scores(row0, i0, j0, acc0);
    store_scores(row0 + p.tk, i0 + 1u, j0, acc1);
    store_scores(row0 + 2u * p.tk, i0 + 2u, j0, acc2);
    store_scores(row0 + 3u * p.tk, i0 + 3u, j0, acc3);
}

// In place on out = the scores from masked_dots: each row becomes
// softmax_j(S[i, j]) over first_key(i) <= j < keys_of(i), zeros elsewhere.
@compute @workgroup_size(64)
fn softmax_rows(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) li: u32) {
    let r = invocation(wg, nwg, li);
    if (r >= p.n) { return; }
    let base = r * p.tk;
    let keys = keys_of(r % p.tq);
    let first = first_key(r % p.tq);
    var m = NEG_BIG;
    for (var j = first; j < keys; j++) {
        m = max(m, out[base + j]);
    }
    var sum = 0.0;
    for (var j = first; j < keys; j++) {
        let x = exp(out[base + j] - m);
        out[base + j] = x;
        sum += x;
    }
    // sum >= 1 whenever a key is visible (the max contributes exp(0));
    // guarded so that nothing divides by 0.
    let inv = select(0.0, 1.0 / sum, sum > 0.0);
    for (var j = first; j < keys; j++) {
        out[base + j] *= inv;
    }
    for (var j = 0u; j < first; j++) {
        out[base + j] = 0.0;
    }
    for (var j = keys; j < p.tk; j++) {
        out[base + j] = 0.0;
    }
}

// In place on out = dP from masked_dots, with mat = P:
// dS[i, j] = P[i, j] (dP[i, j] - sum_l P[i, l] dP[i, l]), 0 where masked.
@compute @workgroup_size(64)
fn grad_softmax_rows(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) li: u32) {
    let r = invocation(wg, nwg, li);
    if (r >= p.n) { return; }
    let base = r * p.tk;
    let keys = keys_of(r % p.tq);
    let first = first_key(r % p.tq);
    var dot = 0.0;
    for (var j = first; j < keys; j++) {
        dot += mat[base + j] * out[base + j];
    }
    for (var j = first; j < keys; j++) {
        out[base + j] = mat[base + j] * (out[base + j] - dot);
    }
    for (var j = 0u; j < first; j++) {
        out[base + j] = 0.0;
    }
    for (var j = keys; j < p.tk; j++) {
        out[base + j] = 0.0;
    }
}

// Row r of an output tile: columns e0..e0+4 that exist, scale * v.
fn store_row(b: u32, h: u32, r: u32, rows: u32, e0: u32, v: vec4<f32>) {
    if (r >= rows) { return; }
    let o = o_at(b, h, r) + e0;
    for (var c = 0u; c < 4u; c++) {
        if (e0 + c < p.d) {
            out[o + c] = p.scale * v[c];
        }
    }
}

// A score-shaped mat M [batch, heads, tq, tk] times view a (X), into view o:
//   trans = 0: o[h, i, e] = scale * sum_j M[h, i, j] X[kvh(h), j, e]
//              (O = P v, dQ = dS k / sqrt(d); o per query head)
//   trans = 1: o[c, j, e] = scale * sum_{h: kvh(h) = c} sum_i M[h, i, j] X[h, i, e]
//              (dK = dSᵀ q / sqrt(d), dV = Pᵀ dO; o per key/value head c,
//              summed over the group's query heads of this rank in order)
// M is 0 where masked, so each sum may run over whole tiles of the unmasked
// range. One invocation per 4 x 4 tile of (output row, e).
@compute @workgroup_size(64)
fn mix(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
       @builtin(local_invocation_index) li: u32) {
    let id = invocation(wg, nwg, li);
    if (id >= p.n) { return; }
    let trans = p.trans != 0u;
    let rows = select(p.tq, p.tk, trans);
    let hs = select(p.heads, p.kv_heads, trans);
    let ne = (p.d + 3u) / 4u;
    let nr = (rows + 3u) / 4u;
    let e0 = (id % ne) * 4u;
    let r0 = ((id / ne) % nr) * 4u;
    let bh = id / (ne * nr);
    // A query head (trans = 0) or a key/value head (trans = 1).
    let h = bh % hs;
    let b = bh / hs;
    let ec = min(vec4<u32>(e0, e0 + 1u, e0 + 2u, e0 + 3u), vec4<u32>(p.d - 1u));
    let last = rows - 1u;
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    if (!trans) {
        // Rows i0..i0+4 of M, summed over the keys the tile's rows see.
        let mbase = (b * p.heads + h) * p.tq * p.tk;
        let m0 = mbase + min(r0, last) * p.tk;
        let m1 = mbase + min(r0 + 1u, last) * p.tk;
        let m2 = mbase + min(r0 + 2u, last) * p.tk;
        let m3 = mbase + min(r0 + 3u, last) * p.tk;
        let keys = keys_of(min(r0 + 3u, last));
        let c = kvh(h);
        for (var j = first_key(min(r0, last)); j < keys; j++) {
            let xr = a_at(b, c, j);
            let x = vec4<f32>(a_src[xr + ec.x], a_src[xr + ec.y], a_src[xr + ec.z], a_src[xr + ec.w]);
            acc0 += mat[m0 + j] * x;
            acc1 += mat[m1 + j] * x;
            acc2 += mat[m2 + j] * x;
            acc3 += mat[m3 + j] * x;
        }
    } else {
        // Columns j0..j0+4 of M, summed over the queries that see them, of
        // every query head of this rank that reads key/value head h.
        let c0 = min(r0, last);
        let c1 = min(r0 + 1u, last);
        let c2 = min(r0 + 2u, last);
        let c3 = min(r0 + 3u, last);
        let first = select(0u, r0 - p.past, r0 > p.past);
        // Query i sees key j only while past + i < j + window.
        var end = p.tq;
        if (p.window > 0u) {
            let reach = c3 + p.window;
            end = min(p.tq, select(0u, reach - p.past, reach > p.past));
        }
        let g0 = (p.kv0 + h) * p.group;
        let h_lo = select(0u, g0 - p.q0, g0 > p.q0);
        let h_hi = min(p.heads, select(0u, g0 + p.group - p.q0, g0 + p.group > p.q0));
        for (var qh = h_lo; qh < h_hi; qh++) {
            let mbase = (b * p.heads + qh) * p.tq * p.tk;
            for (var i = first; i < end; i++) {
                let xr = a_at(b, qh, i);
                let x = vec4<f32>(a_src[xr + ec.x], a_src[xr + ec.y], a_src[xr + ec.z], a_src[xr + ec.w]);
                let mr = mbase + i * p.tk;
                acc0 += mat[mr + c0] * x;
                acc1 += mat[mr + c1] * x;
                acc2 += mat[mr + c2] * x;
                acc3 += mat[mr + c3] * x;
            }
        }
    }
    store_row(b, h, r0, rows, e0, acc0);
    store_row(b, h, r0 + 1u, rows, e0, acc1);
    store_row(b, h, r0 + 2u, rows, e0, acc2);
    store_row(b, h, r0 + 3u, rows, e0, acc3);
}

// The new rows' keys (a_src, view a) and values (mat, view b), tq per
// sequence, written into the key/value cache out [tk, 2, batch, kv_heads, d]
// (positions outermost) at positions past.. (from o_base = past · 2 · batch
// · kv_heads · d); the earlier positions are not touched, so a cache grows
// in place. One invocation per new element, in the cache's order.
@compute @workgroup_size(64)
fn write_kv(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) li: u32) {
    let idx = invocation(wg, nwg, li);
    if (idx >= p.n) { return; }
    let e = idx % p.d;
    let h = (idx / p.d) % p.kv_heads;
    let b = (idx / (p.d * p.kv_heads)) % p.batch;
    let s = (idx / (p.d * p.kv_heads * p.batch)) % 2u;
    let t = idx / (2u * p.d * p.kv_heads * p.batch);
    if (s == 0u) {
        out[p.o_base + idx] = a_src[a_at(b, h, t) + e];
    } else {
        out[p.o_base + idx] = mat[b_at(b, h, t) + e];
    }
}
