// Generation's repetition penalty and softmax normaliser on one row of a
// vocab shard, so top-p and penalised sampling still send only candidates
// (and one (max, sum) pair per rank) to the host, never the vocab.
//
// copy_row:     out[c] = x[row·cols + c] (the row, to penalise in place);
// penalize:     one invocation per seen id: where the shard holds it, the
//               entry becomes v / penalty if v ≥ 0 else v · penalty
//               (transformers' RepetitionPenaltyLogitsProcessor);
// partial_sums: invocation i scans columns [i·span, (i+1)·span) of row 0 and
//               writes (m, Σ exp((v − m)·inv_t)) with m its max, no barriers
//               (lavapipe runs barriers as coroutine switches);
// combine:      one invocation folds the partials into the shard's
//               (max, Σ exp((v − max)·inv_t)).

struct Params {
    rows: u32,
    cols: u32,
    row: u32,
    // Global id of the shard's column 0.
    offset: u32,
    n_ids: u32,
    penalty: f32,
    // 1 / temperature.
    inv_t: f32,
    // Columns per partial sum, and partial sums in all.
    span: u32,
    chunks: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> ids: array<i32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

const WG: u32 = 64u;
// The max of no entries: finite, so v − m stays finite.
const LOWEST: f32 = -3.4e38;

fn index(wg: vec3<u32>, nwg: vec3<u32>, li: u32) -> u32 {
    return (wg.y * nwg.x + wg.x) * WG + li;
}

@compute @workgroup_size(WG)
fn copy_row(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let c = index(wg, nwg, li);
    if (c < p.cols) {
        out[c] = x[p.row * p.cols + c];
    }
}

@compute @workgroup_size(WG)
fn penalize(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let i = index(wg, nwg, li);
    if (i >= p.n_ids) {
        return;
    }
    let id = ids[i];
    // Ids of other shards (and negative ones) are skipped.
    if (id < 0 || u32(id) < p.offset || u32(id) - p.offset >= p.cols) {
        return;
    }
    let c = u32(id) - p.offset;
    let v = out[c];
    out[c] = select(v / p.penalty, v * p.penalty, v < 0.0);
}

@compute @workgroup_size(WG)
fn partial_sums(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let i = index(wg, nwg, li);
    if (i >= p.chunks) {
        return;
    }
    let first = i * p.span;
    let end = min(first + p.span, p.cols);
    var m = LOWEST;
    for (var c = first; c < end; c++) {
        m = max(m, x[c]);
    }
    var s = 0.0;
    for (var c = first; c < end; c++) {
        s += exp((x[c] - m) * p.inv_t);
    }
    out[2u * i] = m;
    out[2u * i + 1u] = s;
}

@compute @workgroup_size(WG)
fn combine(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    if (index(wg, nwg, li) != 0u) {
        return;
    }
    var m = LOWEST;
    for (var g = 0u; g < p.chunks; g++) {
        m = max(m, x[2u * g]);
    }
    var s = 0.0;
    for (var g = 0u; g < p.chunks; g++) {
        s += x[2u * g + 1u] * exp((x[2u * g] - m) * p.inv_t);
    }
    out[0] = m;
    out[1] = s;
}
