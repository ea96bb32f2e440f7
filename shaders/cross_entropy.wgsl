// Vocab-parallel softmax cross-entropy, one rank's pieces. The logits shard z
// is [rows, cols] holding global vocab columns [start, start + cols); columns
// with global index >= valid_vocab are padding, i.e. -inf: the host passes
// valid_cols = clamp(valid_vocab - start, 0, cols) and only columns j <
// valid_cols take part. A target t is owned when start <= t < start +
// valid_cols. Row pieces run one invocation per four rows, each row's
// columns in a fixed order (deterministic, and barrier-free, which CPU
// adapters need); the gradient runs one invocation per four elements.
// Every buffer is an array of vec4s, bound in whole vec4s
// (KernelSpec::in_vec4s): lavapipe loads storage lane by lane, so a vec4 per
// load is up to 4x fewer loads. Outputs' last vec4 may run into the pad.
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
@group(0) @binding(1) var<storage, read> z: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> row_max: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> row_sexp: array<vec4<f32>>;
// ce_loss: target logit; ce_grad: row scale (incoming loss gradient).
@group(0) @binding(4) var<storage, read> row_aux: array<vec4<f32>>;
// ce_loss: sum of logits (label smoothing).
@group(0) @binding(5) var<storage, read> row_zsum: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read> targets: array<vec4<i32>>;
@group(0) @binding(7) var<storage, read_write> out: array<vec4<f32>>;

// Max of a row with no valid column: finite, so later `z - m` stays finite.
const NEG_BIG: f32 = -3.4e38;

fn row_id(wg: vec3<u32>, nwg: vec3<u32>, li: u32) -> u32 {
    return (wg.y * nwg.x + wg.x) * 64u + li;
}

// Element e of z, and per-row values of row r (reads only, so indexing a
// vector component is fine everywhere).
fn z_at(e: u32) -> f32 { return z[e / 4u][e % 4u]; }
fn max_at(r: u32) -> f32 { return row_max[r / 4u][r % 4u]; }
fn sexp_at(r: u32) -> f32 { return row_sexp[r / 4u][r % 4u]; }
fn aux_at(r: u32) -> f32 { return row_aux[r / 4u][r % 4u]; }
fn zsum_at(r: u32) -> f32 { return row_zsum[r / 4u][r % 4u]; }
fn target_at(r: u32) -> i32 { return targets[r / 4u][r % 4u]; }

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

// Whole vec4s of row r's valid columns: rows start on a vec4 when cols is a
// multiple of 4, else none (every column goes through z_at).
fn whole_vec4s() -> u32 {
    return select(0u, p.valid_cols / 4u, p.cols % 4u == 0u);
}

// max_j z[r, j] over valid columns (NEG_BIG if none or r past the rows).
fn max_of(r: u32) -> f32 {
    var m = NEG_BIG;
    if (r >= p.rows) { return m; }
    let base = r * p.cols;
    let w = whole_vec4s();
    for (var q = 0u; q < w; q++) {
        let v = z[base / 4u + q];
        m = max(m, max(max(v.x, v.y), max(v.z, v.w)));
    }
    for (var j = 4u * w; j < p.valid_cols; j++) {
        m = max(m, z_at(base + j));
    }
    return m;
}

// sum_j exp(z[r, j] - row_max[r]) over valid columns.
fn sum_exp_of(r: u32) -> f32 {
    var s = 0.0;
    if (r >= p.rows) { return s; }
    let base = r * p.cols;
    let m = max_at(r);
    let w = whole_vec4s();
    for (var q = 0u; q < w; q++) {
        let e = exp(z[base / 4u + q] - m);
        s += (e.x + e.y) + (e.z + e.w);
    }
    for (var j = 4u * w; j < p.valid_cols; j++) {
        s += exp(z_at(base + j) - m);
    }
    return s;
}

// sum_j z[r, j] over valid columns.
fn sum_of(r: u32) -> f32 {
    var s = 0.0;
    if (r >= p.rows) { return s; }
    let base = r * p.cols;
    let w = whole_vec4s();
    for (var q = 0u; q < w; q++) {
        let v = z[base / 4u + q];
        s += (v.x + v.y) + (v.z + v.w);
    }
    for (var j = 4u * w; j < p.valid_cols; j++) {
        s += z_at(base + j);
    }
    return s;
}

// z[r, t_r - start] if owned, else 0.
fn target_logit_of(r: u32) -> f32 {
    if (r >= p.rows) { return 0.0; }
    let j = owned_col(target_at(r));
    if (j < 0) { return 0.0; }
    return z_at(r * p.cols + u32(j));
}

// (1-a)(ln S + m - z_t) + a(ln S + m - zsum/K), 0 for ignored rows.
// m - z_t first: both are near each other when the loss is small, and their
// difference is exact there, where ln S + m would round m away.
fn loss_of(r: u32) -> f32 {
    if (r >= p.rows || ignored(target_at(r))) { return 0.0; }
    let ln_s = log(sexp_at(r));
    let m = max_at(r);
    var l = ln_s + (m - aux_at(r));
    if (p.alpha != 0.0) {
        l = (1.0 - p.alpha) * l + p.alpha * (ln_s + (m - zsum_at(r) * p.inv_k));
    }
    return l;
}

// Row kernels: invocation q writes rows 4q..4q+3 as one vec4.
fn rows_past_end(q: u32) -> bool {
    return q >= (p.rows + 3u) / 4u;
}

@compute @workgroup_size(64)
fn max_rows(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) li: u32) {
    let q = row_id(wg, nwg, li);
    if (rows_past_end(q)) { return; }
    let r = 4u * q;
    out[q] = vec4<f32>(max_of(r), max_of(r + 1u), max_of(r + 2u), max_of(r + 3u));
}

@compute @workgroup_size(64)
fn sum_exp_rows(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) li: u32) {
    let q = row_id(wg, nwg, li);
    if (rows_past_end(q)) { return; }
    let r = 4u * q;
    out[q] = vec4<f32>(sum_exp_of(r), sum_exp_of(r + 1u), sum_exp_of(r + 2u), sum_exp_of(r + 3u));
}

@compute @workgroup_size(64)
fn sum_rows(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) li: u32) {
    let q = row_id(wg, nwg, li);
    if (rows_past_end(q)) { return; }
    let r = 4u * q;
    out[q] = vec4<f32>(sum_of(r), sum_of(r + 1u), sum_of(r + 2u), sum_of(r + 3u));
}

@compute @workgroup_size(64)
fn target_logit(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) li: u32) {
    let q = row_id(wg, nwg, li);
    if (rows_past_end(q)) { return; }
    let r = 4u * q;
    out[q] = vec4<f32>(target_logit_of(r), target_logit_of(r + 1u), target_logit_of(r + 2u),
                       target_logit_of(r + 3u));
}

@compute @workgroup_size(64)
fn loss(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let q = row_id(wg, nwg, li);
    if (rows_past_end(q)) { return; }
    let r = 4u * q;
    out[q] = vec4<f32>(loss_of(r), loss_of(r + 1u), loss_of(r + 2u), loss_of(r + 3u));
}

// dz at element e = (r, j): scale[r] (exp(z - m)/S - (1-a) onehot(t - start) - a/K) on
// valid columns; 0 on padding columns, ignored rows and past the last row.
fn grad_of(e: u32) -> f32 {
    let r = e / p.cols;
    let j = e - r * p.cols;
    if (r >= p.rows) { return 0.0; }
    let t = target_at(r);
    if (j >= p.valid_cols || ignored(t)) { return 0.0; }
    var g = exp(z_at(e) - max_at(r)) / sexp_at(r) - p.alpha * p.inv_k;
    if (i32(j) == owned_col(t)) {
        g -= 1.0 - p.alpha;
    }
    return aux_at(r) * g;
}

// Elements 4i..4i+3 of the gradient. When cols is a multiple of 4 they share
// a row, whose values are read once.
@compute @workgroup_size(WG)
fn grad(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = linear_id(wg, nwg, li);
    if (i >= (p.rows * p.cols + 3u) / 4u) { return; }
    let e = 4u * i;
    if (p.cols % 4u != 0u) {
        out[i] = vec4<f32>(grad_of(e), grad_of(e + 1u), grad_of(e + 2u), grad_of(e + 3u));
        return;
    }
    let r = e / p.cols;
    let t = target_at(r);
    if (ignored(t)) {
        out[i] = vec4<f32>(0.0);
        return;
    }
    let j = vec4<u32>(e - r * p.cols) + vec4<u32>(0u, 1u, 2u, 3u);
    var g = exp(z[i] - max_at(r)) / sexp_at(r) - p.alpha * p.inv_k;
    g -= select(vec4<f32>(0.0), vec4<f32>(1.0 - p.alpha), vec4<i32>(j) == vec4<i32>(owned_col(t)));
    out[i] = select(vec4<f32>(0.0), aux_at(r) * g, j < vec4<u32>(p.valid_cols));
}
