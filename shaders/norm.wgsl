// LayerNorm and RMSNorm over the last dimension of x [rows, cols], row-major f32.
// One layout for every entry (a, b, c, d read, out written; unused slots get
// any read-only input). Per-row statistics are stats[r] = (mean, rstd): for
// LayerNorm mean = Σx/H and rstd = 1/√(Σ(x − mean)²/H + eps); for RMSNorm
// mean = 0 and rstd = 1/√(Σx²/H + eps). Then x̂ = (x − mean)·rstd for both.
// Row and column loops run in index order in one invocation (deterministic,
// barrier-free); element kernels use the shared grid (grid.wgsl).

struct Params {
    rows: u32,
    cols: u32,
    eps: f32,
    // bit 0: centre (LayerNorm: subtract the mean); bit 1: bias (dβ lanes, + β).
    flags: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read> c: array<f32>;
@group(0) @binding(4) var<storage, read> d: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

const CENTRE: u32 = 1u;
const BIAS: u32 = 2u;

fn lane_id(wg: vec3<u32>, nwg: vec3<u32>, li: u32) -> u32 {
    return (wg.y * nwg.x + wg.x) * 64u + li;
}

// a = x; out = stats [rows, 2]. One invocation per row.
@compute @workgroup_size(64)
fn row_stats(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) li: u32) {
    let r = lane_id(wg, nwg, li);
    if (r >= p.rows) { return; }
    let base = r * p.cols;
    let h = f32(p.cols);
    var mean = 0.0;
    if ((p.flags & CENTRE) != 0u) {
        var s = 0.0;
        for (var j = 0u; j < p.cols; j++) { s += a[base + j]; }
        mean = s / h;
    }
    var q = 0.0;
    for (var j = 0u; j < p.cols; j++) {
        let v = a[base + j] - mean;
        q += v * v;
    }
    out[2u * r] = mean;
    out[2u * r + 1u] = 1.0 / sqrt(q / h + p.eps);
}

// a = x, b = γ, c = β (γ again without a bias), d = stats; out = y. One
// invocation per element: y = x̂·γ (+ β).
@compute @workgroup_size(WG)
fn forward(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) li: u32) {
    let i = linear_id(wg, nwg, li);
    if (i >= p.rows * p.cols) { return; }
    let r = i / p.cols;
    let j = i % p.cols;
    var y = (a[i] - d[2u * r]) * d[2u * r + 1u] * b[j];
    if ((p.flags & BIAS) != 0u) { y += c[j]; }
    out[i] = y;
}

// a = x, b = γ, c = dy, d = stats; out = dx. One invocation per row, with
// ĝ = dy·γ: dx = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)), without the mean(ĝ)
// term for RMSNorm.
@compute @workgroup_size(64)
fn backward_dx(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) li: u32) {
    let r = lane_id(wg, nwg, li);
    if (r >= p.rows) { return; }
    let base = r * p.cols;
    let h = f32(p.cols);
    let mean = d[2u * r];
    let rstd = d[2u * r + 1u];
    var sg = 0.0;
    var sgx = 0.0;
    for (var j = 0u; j < p.cols; j++) {
        let g = c[base + j] * b[j];
        sg += g;
        sgx += g * (a[base + j] - mean) * rstd;
    }
    var mg = 0.0;
    if ((p.flags & CENTRE) != 0u) { mg = sg / h; }
    let mgx = sgx / h;
    for (var j = 0u; j < p.cols; j++) {
        let g = c[base + j] * b[j];
        let xh = (a[base + j] - mean) * rstd;
        out[base + j] = rstd * (g - mg - xh * mgx);
    }
}

// a = x, b = dy, c = stats; out = [dγ; dβ] ([2, cols] with a bias, else
// [1, cols]). One invocation per output column, summing rows in order:
// dγ[j] = Σ_r dy[r, j]·x̂[r, j], dβ[j] = Σ_r dy[r, j]. Zero rows give zeros.
@compute @workgroup_size(64)
fn param_grads(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) li: u32) {
    let l = lane_id(wg, nwg, li);
    var lanes = p.cols;
    if ((p.flags & BIAS) != 0u) { lanes = 2u * p.cols; }
    if (l >= lanes) { return; }
    let j = l % p.cols;
    var s = 0.0;
    if (l < p.cols) {
        for (var r = 0u; r < p.rows; r++) {
            let i = r * p.cols + j;
            s += b[i] * (a[i] - c[2u * r]) * c[2u * r + 1u];
        }
    } else {
        for (var r = 0u; r < p.rows; r++) { s += b[r * p.cols + j]; }
    }
    out[l] = s;
}
