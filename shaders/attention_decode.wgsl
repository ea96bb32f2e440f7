// Cached decoding of one new position per sequence (tq = 1) in one dispatch:
// attention.wgsl's write_kv, masked_dots, softmax_rows and mix for that
// case, each sum in their order, so the output and the cache are theirs bit
// for bit. attention_header.wgsl comes first in the module. Views: a = the
// new queries, b = the new keys, o = the new values (each at t = 0); the
// output is [B, H·D] (heads contiguous), the cache [tk, 2, B, KV, D] and
// `scores` [B, H, 1, tk] (scratch). head_dim and every view's base and
// strides are multiples of 4, head_dim at most 256
// (src/kernels/attention/decode_one.rs). With p.rotate the new queries and
// keys are first rotated as rope.wgsl's rotary_pair does it (cos, sin [1,
// D/2]; head_dim a multiple of 8), so the cache holds rotated keys.
//
// Why: decoding ran those four as four dispatches of a workgroup or two per
// rank and layer, and a CPU adapter's fixed cost per dispatch (waking its
// threads) exceeded their work.
//
// One workgroup per (sequence, query head). The new position's key and value
// are read from their views, not from the cache, so no workgroup waits for
// another's append; workgroup h appends key/value heads h, h + heads, ...

@group(0) @binding(1) var<storage, read> q4: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> k4: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> v4: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> cache4: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> scores: array<f32>;
@group(0) @binding(6) var<storage, read_write> out4: array<vec4<f32>>;
// The rotation's tables (any read-only input without p.rotate).
@group(0) @binding(7) var<storage, read> cos4: array<vec4<f32>>;
@group(0) @binding(8) var<storage, read> sin4: array<vec4<f32>>;

// Each lane's largest score, then the row's max and 1 / sum.
var<workgroup> part: array<f32, 64>;
var<workgroup> row_max: f32;
var<workgroup> row_inv: f32;
// The workgroup's query, rotated where p.rotate says.
var<workgroup> qr: array<vec4<f32>, 64>;

// Vec4 e of a head (half = h4 vec4s) rotated from it and its partner in
// the other half, with rope.wgsl's operations (sign 1): x1 cos - x2 sin in
// the first half, x2 cos + x1 sin in the second.
fn rope4(x: vec4<f32>, partner: vec4<f32>, e: u32, h4: u32) -> vec4<f32> {
    if (e < h4) {
        return x * cos4[e] - partner * sin4[e];
    }
    return x * cos4[e - h4] + partner * sin4[e - h4];
}

// The vec4 a head's vec4 e rotates with.
fn partner(e: u32, h4: u32) -> u32 {
    return select(e - h4, e + h4, e < h4);
}

// Vec4 e of the new key of key/value head c of sequence b, rotated where
// p.rotate says.
fn new_key(b: u32, c: u32, e: u32) -> vec4<f32> {
    let kb = b_at(b, c, 0u) / 4u;
    if (p.rotate == 0u) {
        return k4[kb + e];
    }
    let h4 = p.d / 8u;
    return rope4(k4[kb + e], k4[kb + partner(e, h4)], e, h4);
}

// Vec4 0 of position j's key (s = 0) or value (s = 1) of key/value head c
// of sequence b in the cache.
fn cache_at(s: u32, b: u32, c: u32, j: u32) -> u32 {
    return ((((j * 2u + s) * p.batch + b) * p.kv_heads + c) * p.d) / 4u;
}

// The masked_dots sum of q . k over vec4 e: its four products in order.
fn dot_step(acc: f32, q: vec4<f32>, k: vec4<f32>) -> f32 {
    var a = acc;
    a += q.x * k.x;
    a += q.y * k.y;
    a += q.z * k.z;
    a += q.w * k.w;
    return a;
}

@compute @workgroup_size(64)
fn attend_one(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) li: u32) {
    attend(wg.y * nwg.x + wg.x, li);
}

// Workgroup w's step (src/kernels/attention/decode_group.rs copies it once
// per member of a group).
fn attend(w: u32, li: u32) {
    if (w >= p.n) { return; }
    let h = w % p.heads;
    let b = w / p.heads;
    let d4 = p.d / 4u;
    let past = p.past;
    // Append this workgroup's key/value heads at position past.
    for (var c = h; c < p.kv_heads; c += p.heads) {
        for (var e = li; e < d4; e += 64u) {
            cache4[cache_at(0u, b, c, past) + e] = new_key(b, c, e);
            cache4[cache_at(1u, b, c, past) + e] = v4[o_at(b, c, 0u) / 4u + e];
        }
    }
    // The query, rotated where p.rotate says.
    let qa = a_at(b, h, 0u) / 4u;
    for (var e = li; e < d4; e += 64u) {
        var x = q4[qa + e];
        if (p.rotate != 0u) {
            x = rope4(x, q4[qa + partner(e, d4 / 2u)], e, d4 / 2u);
        }
        qr[e] = x;
    }
    workgroupBarrier();
    // Scores of the visible keys, a lane's every 64th: cached keys from the
    // cache, the new one from its view.
    let c = kvh(h);
    let first = first_key(0u);
    let row = w * p.tk;
    var m = NEG_BIG;
    for (var j = first + li; j <= past; j += 64u) {
        var acc = 0.0;
        if (j < past) {
            let kb = cache_at(0u, b, c, j);
            for (var e = 0u; e < d4; e++) {
                acc = dot_step(acc, qr[e], cache4[kb + e]);
            }
        } else {
            for (var e = 0u; e < d4; e++) {
                acc = dot_step(acc, qr[e], new_key(b, c, e));
            }
        }
        let s = p.scale * acc;
        scores[row + j] = s;
        m = max(m, s);
    }
    part[li] = m;
    workgroupBarrier();
    if (li == 0u) {
        var mm = NEG_BIG;
        for (var i = 0u; i < 64u; i++) {
            mm = max(mm, part[i]);
        }
        row_max = mm;
    }
    workgroupBarrier();
    let mx = row_max;
    for (var j = first + li; j <= past; j += 64u) {
        scores[row + j] = exp(scores[row + j] - mx);
    }
    storageBarrier();
    // softmax_rows' sum, in its order.
    if (li == 0u) {
        var sum = 0.0;
        for (var j = first; j <= past; j++) {
            sum += scores[row + j];
        }
        row_inv = select(0.0, 1.0 / sum, sum > 0.0);
    }
    workgroupBarrier();
    let inv = row_inv;
    // mix: P v over the visible keys in order, a lane's vec4 of elements.
    let o = (b * p.heads + h) * d4;
    for (var e = li; e < d4; e += 64u) {
        var acc = vec4<f32>(0.0);
        for (var j = first; j < past; j++) {
            acc += (scores[row + j] * inv) * cache4[cache_at(1u, b, c, j) + e];
        }
        acc += (scores[row + past] * inv) * v4[o_at(b, c, 0u) / 4u + e];
        out4[o + e] = acc;
    }
}
