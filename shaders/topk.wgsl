// Candidates for the k largest logits of one row of a vocab shard, as
// (value bits, global id) pairs: greedy decoding (k = 1) and top-k
// sampling choose on the device, so only a few candidates per rank cross
// to the host, not the vocab. Order is Rust's f32::total_cmp, descending
// (NaN and -0.0 have their places), ties by the lower id: the host
// sampler's order exactly.
//
// Invocation i scans columns [i·span, (i+1)·span) on its own (no
// workgroup memory, no barriers: lavapipe runs barriers as coroutine
// switches) and writes its k best, best first, to out[2·i·k ..]; the host
// merges every invocation's candidates as it merges the ranks'. Pass j
// finds the best entry strictly after pass j-1's pick in that order (no
// state but the last pick). Passes past the columns write id -1.

struct Params {
    rows: u32,
    cols: u32,
    row: u32,
    k: u32,
    // Global id of the shard's column 0.
    offset: u32,
    // Columns per invocation, and invocations in all.
    span: u32,
    chunks: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<i32>;

const WG: u32 = 64u;
// An id no column has: "nothing found".
const NONE: u32 = 0xffffffffu;

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
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let i = (wg.y * nwg.x + wg.x) * WG + li;
    if (i >= p.chunks) {
        return;
    }
    let base = p.row * p.cols;
    let first = i * p.span;
    let end = min(first + p.span, p.cols);
    let o = 2u * i * p.k;
    var last_key = 0;
    var last_id = NONE;
    for (var j = 0u; j < p.k; j++) {
        var bk = -2147483647 - 1;
        var bi = NONE;
        for (var c = first; c < end; c++) {
            let key = total_key(x[base + c]);
            // Only entries after the last pick (none on the first pass).
            if ((j == 0u || before(last_key, last_id, key, c)) && before(key, c, bk, bi)) {
                bk = key;
                bi = c;
            }
        }
        if (bi == NONE) {
            out[o + 2u * j] = 0;
            out[o + 2u * j + 1u] = -1;
        } else {
            out[o + 2u * j] = bitcast<i32>(x[base + bi]);
            out[o + 2u * j + 1u] = i32(p.offset + bi);
        }
        last_key = bk;
        last_id = bi;
    }
}
