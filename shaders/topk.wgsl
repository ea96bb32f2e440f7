// The k largest logits of one row of a vocab shard, in order, as (value
// bits, global id) pairs: greedy decoding (k = 1) and top-k sampling choose
// on the device, so only k pairs per rank cross to the host, not the
// vocab. Order is Rust's f32::total_cmp, descending (NaN and -0.0 have
// their places), ties by the lower id: the host sampler's order exactly.
//
// Workgroup w takes columns [w·span, (w+1)·span) and writes its k best
// to out[w·k ..]: the host merges the groups' candidates as it merges the
// ranks'. Pass j scans the columns for the best entry strictly after pass
// j-1's pick in that order (no state but the last pick), reducing each
// invocation's best in workgroup memory. Passes past the columns write id
// -1.

struct Params {
    rows: u32,
    cols: u32,
    row: u32,
    k: u32,
    // Global id of the shard's column 0.
    offset: u32,
    // Columns per workgroup.
    span: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<i32>;

// 128: the most invocations every adapter (GLES 3.1 included) allows.
const WG: u32 = 128u;
// An id no column has: "nothing found".
const NONE: u32 = 0xffffffffu;

var<workgroup> keys: array<i32, WG>;
var<workgroup> ids: array<u32, WG>;

// f32 bits as an i32 that orders like f32::total_cmp.
fn total_key(v: f32) -> i32 {
    let b = bitcast<i32>(v);
    return b ^ bitcast<i32>(bitcast<u32>(b >> 31u) >> 1u);
}

// Whether (ka, ia) comes before (kb, ib): larger value, or equal and lower id.
fn before(ka: i32, ia: u32, kb: i32, ib: u32) -> bool {
    return ka > kb || (ka == kb && ia < ib);
}

@compute @workgroup_size(WG)
fn top_k(
    @builtin(local_invocation_index) li: u32,
    @builtin(workgroup_id) wg: vec3<u32>,
) {
    let base = p.row * p.cols;
    let first = wg.x * p.span;
    let end = min(first + p.span, p.cols);
    let o = 2u * wg.x * p.k;
    var last_key = 0;
    var last_id = NONE;
    for (var j = 0u; j < p.k; j++) {
        var bk = -2147483647 - 1;
        var bi = NONE;
        for (var c = first + li; c < end; c += WG) {
            let key = total_key(x[base + c]);
            // Only entries after the last pick (none on the first pass).
            if ((j == 0u || before(last_key, last_id, key, c)) && before(key, c, bk, bi)) {
                bk = key;
                bi = c;
            }
        }
        keys[li] = bk;
        ids[li] = bi;
        workgroupBarrier();
        for (var s = WG / 2u; s > 0u; s >>= 1u) {
            if (li < s && before(keys[li + s], ids[li + s], keys[li], ids[li])) {
                keys[li] = keys[li + s];
                ids[li] = ids[li + s];
            }
            workgroupBarrier();
        }
        last_key = keys[0];
        last_id = ids[0];
        if (li == 0u) {
            if (last_id == NONE) {
                out[o + 2u * j] = 0;
                out[o + 2u * j + 1u] = -1;
            } else {
                out[o + 2u * j] = bitcast<i32>(x[base + last_id]);
                out[o + 2u * j + 1u] = i32(p.offset + last_id);
            }
        }
        workgroupBarrier();
    }
}
