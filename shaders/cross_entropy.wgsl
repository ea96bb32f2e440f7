// Vocab-parallel softmax cross-entropy, one rank's pieces. The logits shard z
// is [rows, cols] holding global vocab columns [start, start + cols); columns
// with global index >= valid_vocab are padding, i.e. -inf: the host passes
// valid_cols = clamp(valid_vocab - start, 0, cols) and only columns j <
// valid_cols take part. A target t is owned when start <= t < start +
// valid_cols. Row pieces run one invocation per row looping over columns in
// order (deterministic, and barrier-free, which CPU adapters need), or on
// GPUs (the `_tree` entries) a workgroup per row: WG invocations stride
// over the columns and meet in a tree; the gradient runs one invocation per
// element.
// Grid: workgroups folded into x/y (fold_workgroups in src/device/dispatch.rs).

struct Params {
    rows: u32,
    cols: u32,
    valid_cols: u32,
    start: u32,
    // 1 when ignore_index is set.
    has_ignore: u32,
    ignore_index: i32,
    // Label smoothing alpha, and 1 / K with K = valid_vocab (global classes).
    alpha: f32,
    inv_k: f32,
}

// One layout for every entry; unused slots get any read-only input.
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> z: array<f32>;
@group(0) @binding(2) var<storage, read> row_max: array<f32>;
@group(0) @binding(3) var<storage, read> row_sexp: array<f32>;
// ce_loss: target logit; ce_grad: row scale (incoming loss gradient).
@group(0) @binding(4) var<storage, read> row_aux: array<f32>;
// ce_loss: sum of logits (label smoothing).
@group(0) @binding(5) var<storage, read> row_zsum: array<f32>;
@group(0) @binding(6) var<storage, read> targets: array<i32>;
@group(0) @binding(7) var<storage, read_write> out: array<f32>;

// Max of a row with no valid column: finite, so later `z - m` stays finite.
const NEG_BIG: f32 = -3.4e38;

fn row_id(wg: vec3<u32>, nwg: vec3<u32>, li: u32) -> u32 {
    return (wg.y * nwg.x + wg.x) * 64u + li;
}

// Local column of target t, or -1 when not owned (padding and negative
// targets included; compare before subtracting so nothing wraps).
fn owned_col(t: i32) -> i32 {
    if (t < 0) { return -1; }
    let u = u32(t);
    if (u < p.start) { return -1; }
    let j = u - p.start;
    if (j >= p.valid_cols) { return -1; }
    return i32(j);
}

fn ignored(t: i32) -> bool {
    return p.has_ignore != 0u && t == p.ignore_index;
}

// out[r] = max_j z[r, j] over valid columns (NEG_BIG if none).
@compute @workgroup_size(64)
fn max_rows(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) li: u32) {
    let r = row_id(wg, nwg, li);
    if (r >= p.rows) { return; }
    let base = r * p.cols;
    var m = NEG_BIG;
    for (var j = 0u; j < p.valid_cols; j++) {
        m = max(m, z[base + j]);
    }
    out[r] = m;
}

// out[r] = sum_j exp(z[r, j] - row_max[r]) over valid columns.
@compute @workgroup_size(64)
fn sum_exp_rows(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) li: u32) {
    let r = row_id(wg, nwg, li);
    if (r >= p.rows) { return; }
    let base = r * p.cols;
    let m = row_max[r];
    var s = 0.0;
    for (var j = 0u; j < p.valid_cols; j++) {
        s += exp(z[base + j] - m);
    }
    out[r] = s;
}

// out[r] = sum_j z[r, j] over valid columns.
@compute @workgroup_size(64)
fn sum_rows(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) li: u32) {
    let r = row_id(wg, nwg, li);
    if (r >= p.rows) { return; }
    let base = r * p.cols;
    var s = 0.0;
    for (var j = 0u; j < p.valid_cols; j++) {
        s += z[base + j];
    }
    out[r] = s;
}

// The `_tree` entries: a workgroup of WG (a power of two) per row r.
var<workgroup> red: array<f32, WG>;

// Row of a `_tree` workgroup (the grid folded into x/y).
fn tree_row(wg: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wg.y * nwg.x + wg.x;
}

// The workgroup's max (is_max) or sum of v, for invocation 0. Halving
// strides keep neighbouring invocations on neighbouring words.
fn tree(li: u32, v: f32, is_max: bool) -> f32 {
    red[li] = v;
    workgroupBarrier();
    for (var h = WG / 2u; h > 0u; h /= 2u) {
        if (li < h) {
            let o = red[li + h];
            red[li] = select(red[li] + o, max(red[li], o), is_max);
        }
        workgroupBarrier();
    }
    return red[0];
}

// max_rows on a workgroup per row: the same value (max is exact in any order).
@compute @workgroup_size(WG)
fn max_rows_tree(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) li: u32) {
    let r = tree_row(wg, nwg);
    if (r >= p.rows) { return; }
    let base = r * p.cols;
    var m = NEG_BIG;
    for (var j = li; j < p.valid_cols; j += WG) {
        m = max(m, z[base + j]);
    }
    let t = tree(li, m, true);
    if (li == 0u) { out[r] = t; }
}

// sum_exp_rows on a workgroup per row: other bits than the serial sum
// (another order), within f32 rounding.
@compute @workgroup_size(WG)
fn sum_exp_rows_tree(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) li: u32) {
    let r = tree_row(wg, nwg);
    if (r >= p.rows) { return; }
    let base = r * p.cols;
    let m = row_max[r];
    var s = 0.0;
    for (var j = li; j < p.valid_cols; j += WG) {
        s += exp(z[base + j] - m);
    }
    let t = tree(li, s, false);
    if (li == 0u) { out[r] = t; }
}

// sum_rows on a workgroup per row (as sum_exp_rows_tree).
@compute @workgroup_size(WG)
fn sum_rows_tree(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) li: u32) {
    let r = tree_row(wg, nwg);
    if (r >= p.rows) { return; }
    let base = r * p.cols;
    var s = 0.0;
    for (var j = li; j < p.valid_cols; j += WG) {
        s += z[base + j];
    }
    let t = tree(li, s, false);
    if (li == 0u) { out[r] = t; }
}

// out[r] = z[r, t_r - start] if owned, else 0.
@compute @workgroup_size(64)
fn target_logit(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) li: u32) {
    let r = row_id(wg, nwg, li);
    if (r >= p.rows) { return; }
    let j = owned_col(targets[r]);
    var v = 0.0;
    if (j >= 0) { v = z[r * p.cols + u32(j)]; }
    out[r] = v;
}

// out[r] = (1-a)(ln S + m - z_t) + a(ln S + m - zsum/K), 0 for ignored rows.
// m - z_t first: both are near each other when the loss is small, and their
// difference is exact there, where ln S + m would round m away.
@compute @workgroup_size(64)
fn loss(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let r = row_id(wg, nwg, li);
    if (r >= p.rows) { return; }
    if (ignored(targets[r])) {
        out[r] = 0.0;
        return;
    }
    let ln_s = log(row_sexp[r]);
    let m = row_max[r];
    var l = ln_s + (m - row_aux[r]);
    if (p.alpha != 0.0) {
        l = (1.0 - p.alpha) * l + p.alpha * (ln_s + (m - row_zsum[r] * p.inv_k));
    }
    out[r] = l;
}

// out[r, j] = scale[r] (exp(z - m)/S - (1-a) onehot(t - start) - a/K) on valid
// columns; 0 on padding columns and on ignored rows.
@compute @workgroup_size(WG)
fn grad(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let idx = linear_id(wg, nwg, li);
    if (idx >= p.rows * p.cols) { return; }
    let r = idx / p.cols;
    let j = idx - r * p.cols;
    let t = targets[r];
    if (j >= p.valid_cols || ignored(t)) {
        out[idx] = 0.0;
        return;
    }
    var g = exp(z[idx] - row_max[r]) / row_sexp[r] - p.alpha * p.inv_k;
    if (i32(j) == owned_col(t)) {
        g -= 1.0 - p.alpha;
    }
    out[idx] = row_aux[r] * g;
}

// `grad` on four consecutive elements per invocation (cols >= 4, so the four
// lie in at most two rows): the rows' statistics and targets are loaded once
// per four elements and z and out move as vec4s (lavapipe loads storage lane
// by lane). The same bindings viewed as vec4s, bound in whole vec4s
// (KernelSpec::in_vec4s): the last four may run into the pad, written 0.
// The same operations per element as `grad`, so the same bits.
@group(0) @binding(1) var<storage, read> z4: array<vec4<f32>>;
@group(0) @binding(7) var<storage, read_write> out4: array<vec4<f32>>;

@compute @workgroup_size(WG)
fn grad4(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) li: u32) {
    let idx = linear_id(wg, nwg, li);
    if (idx >= (p.rows * p.cols + 3u) / 4u) { return; }
    let e = vec4<u32>(4u * idx) + vec4<u32>(0u, 1u, 2u, 3u);
    let r0 = (4u * idx) / p.cols;
    let r1 = min(r0 + 1u, p.rows - 1u);
    // Elements past row r0's end are row r1's (or the pad's, past the last).
    // Per-element choices are f32 selects and products: GLSL's integer and
    // boolean mix needs an extension.
    let second = e >= vec4<u32>((r0 + 1u) * p.cols);
    let j = e - (vec4<u32>(r0) + vec4<u32>(second) * (r1 - r0)) * p.cols;
    let t0 = targets[r0];
    let t1 = targets[r1];
    let ig = select(vec4<f32>(f32(ignored(t0))), vec4<f32>(f32(ignored(t1))), second);
    let keep = select(vec4<f32>(), vec4<f32>(1.0) - ig, j < vec4<u32>(p.valid_cols));
    let m = select(vec4<f32>(row_max[r0]), vec4<f32>(row_max[r1]), second);
    let s = select(vec4<f32>(row_sexp[r0]), vec4<f32>(row_sexp[r1]), second);
    let a = select(vec4<f32>(row_aux[r0]), vec4<f32>(row_aux[r1]), second);
    // 1 at the target's column (owned_col is -1 where it is not owned).
    let hit0 = vec4<f32>(vec4<i32>(j) == vec4<i32>(owned_col(t0)));
    let hit1 = vec4<f32>(vec4<i32>(j) == vec4<i32>(owned_col(t1)));
    var g = exp(z4[idx] - m) / s - p.alpha * p.inv_k;
    // g - 0 is g: the bits of `grad`, which subtracts only at the target.
    g -= select(hit0, hit1, second) * (1.0 - p.alpha);
    out4[idx] = select(vec4<f32>(), a * g, keep > vec4<f32>(0.5));
}
