// LayerNorm / RMSNorm forward of a few rows (a decoding step's) in one
// dispatch: one workgroup per row. Invocation 0 computes the row's (mean,
// rstd) with exactly row_stats' loops (norm.wgsl), the others wait at a
// barrier, then every invocation normalises columns li, li + 64, ... with
// forward's expression: the same bits as row_stats + forward, one dispatch
// instead of two. Same Params as norm.wgsl.

struct Params {
    rows: u32,
    cols: u32,
    eps: f32,
    // bit 0: centre (LayerNorm); bit 1: + β.
    flags: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> gamma: array<f32>;
@group(0) @binding(3) var<storage, read> beta: array<f32>;
@group(0) @binding(4) var<storage, read_write> stats: array<f32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;

var<workgroup> row_mr: vec2<f32>;

@compute @workgroup_size(64)
fn forward_rows(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    norm_row(wg.x, li);
}

// Row r's statistics and output, by a workgroup of 64 (fold_norm.wgsl
// runs it after a fold that writes x).
fn norm_row(r: u32, li: u32) {
    let base = r * p.cols;
    if (li == 0u) {
        let h = f32(p.cols);
        var mean = 0.0;
        if ((p.flags & 1u) != 0u) {
            var s = 0.0;
            for (var j = 0u; j < p.cols; j++) { s += x[base + j]; }
            mean = s / h;
        }
        var q = 0.0;
        for (var j = 0u; j < p.cols; j++) {
            let v = x[base + j] - mean;
            q += v * v;
        }
        let rstd = 1.0 / sqrt(q / h + p.eps);
        stats[2u * r] = mean;
        stats[2u * r + 1u] = rstd;
        row_mr = vec2<f32>(mean, rstd);
    }
    workgroupBarrier();
    let mr = row_mr;
    for (var j = li; j < p.cols; j += 64u) {
        var v = (x[base + j] - mr.x) * mr.y * gamma[j];
        if ((p.flags & 2u) != 0u) { v += beta[j]; }
        y[base + j] = v;
    }
}

// forward_rows_tree: the same forward for GPUs, where invocation 0's serial
// loops leave 63 idle for the whole row. TREE invocations each sum columns
// li, li + TREE, … then add by a tree in workgroup memory: mean first, then
// Σ(x − μ)² (two passes, as row_stats). Not row_stats' bits (another order
// of sums): f32 rounding apart, the same values.
const TREE: u32 = 256u;

var<workgroup> red: array<f32, TREE>;

// The workgroup's sum of v (every invocation gets it). Halving strides keep
// neighbouring invocations on neighbouring words (no bank conflicts).
fn tree_sum(li: u32, v: f32) -> f32 {
    red[li] = v;
    workgroupBarrier();
    for (var h = TREE / 2u; h > 0u; h /= 2u) {
        if (li < h) {
            red[li] += red[li + h];
        }
        workgroupBarrier();
    }
    let s = red[0];
    // Everyone has read red[0] before a next call overwrites it.
    workgroupBarrier();
    return s;
}

@compute @workgroup_size(TREE)
fn forward_rows_tree(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let r = wg.x;
    let base = r * p.cols;
    let h = f32(p.cols);
    var mean = 0.0;
    if ((p.flags & 1u) != 0u) {
        var s = 0.0;
        for (var j = li; j < p.cols; j += TREE) { s += x[base + j]; }
        mean = tree_sum(li, s) / h;
    }
    var q = 0.0;
    for (var j = li; j < p.cols; j += TREE) {
        let v = x[base + j] - mean;
        q += v * v;
    }
    let rstd = 1.0 / sqrt(tree_sum(li, q) / h + p.eps);
    if (li == 0u) {
        stats[2u * r] = mean;
        stats[2u * r + 1u] = rstd;
    }
    for (var j = li; j < p.cols; j += TREE) {
        var v = (x[base + j] - mean) * rstd * gamma[j];
        if ((p.flags & 2u) != 0u) { v += beta[j]; }
        y[base + j] = v;
    }
}
