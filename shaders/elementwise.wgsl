// Element-wise kernels: out = alpha*a + beta*b, activations and their backward.
// Grid: one invocation per vec4 of elements (linear_id, WG: see grid.wgsl):
// lavapipe loads storage lane by lane, so four elements per load made these
// 2.5x as fast there. Buffers are bound in whole vec4s (KernelSpec::in_vec4s),
// so the last vec4 may run past n into the buffer's pad, which nothing reads.

struct Params {
    n: u32,
    cols: u32,     // row length for add_row

    alpha: f32,
    beta: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> b: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> out: array<vec4<f32>>;
// add_row_add's residual (the only entry that binds it).
@group(0) @binding(4) var<storage, read> res: array<vec4<f32>>;

// Whether vec4 i lies wholly past the n elements.
fn past_end(i: u32) -> bool {
    return i >= (p.n + 3u) / 4u;
}

// out = alpha * a + beta * b (add: 1,1; scale: alpha,0 with b = a; axpy: alpha,1).
@compute @workgroup_size(WG)
fn axpby(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) li: u32) {
    let i = linear_id(wg, nwg, li);
    if (past_end(i)) { return; }
    out[i] = p.alpha * a[i] + p.beta * b[i];
}

// out = alpha * out + beta * b: axpby with `out` as `a`, in place (a
// gradient summed into; `a` is bound but not read).
@compute @workgroup_size(WG)
fn axpby_in_place(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) li: u32) {
    let i = linear_id(wg, nwg, li);
    if (past_end(i)) { return; }
    out[i] = p.alpha * out[i] + p.beta * b[i];
}

// out = alpha * a * b (the gated MLP's product, and its backward).
@compute @workgroup_size(WG)
fn mul(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
       @builtin(local_invocation_index) li: u32) {
    let i = linear_id(wg, nwg, li);
    if (past_end(i)) { return; }
    out[i] = p.alpha * a[i] * b[i];
}

// b[j] of a row of `cols` entries (any cols: one vec4 load per entry).
fn bias_at(j: u32) -> f32 {
    return b[j / 4u][j % 4u];
}

// b's entries for the four elements of vec4 i of a row-major [.., cols].
fn row_bias4(i: u32) -> vec4<f32> {
    if (p.cols % 4u == 0u) {
        // The four elements share a row and a vec4 of b.
        return b[i % (p.cols / 4u)];
    }
    let e = 4u * i;
    return vec4<f32>(bias_at(e % p.cols), bias_at((e + 1u) % p.cols),
                     bias_at((e + 2u) % p.cols), bias_at((e + 3u) % p.cols));
}

// out[i, j] = a[i, j] + b[j]  (bias broadcast over rows; b has `cols` entries)
@compute @workgroup_size(WG)
fn add_row(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) li: u32) {
    let i = linear_id(wg, nwg, li);
    if (past_end(i)) { return; }
    out[i] = a[i] + row_bias4(i);
}

// out[i, j] = (a[i, j] + b[j]) + res[i, j]: a row-parallel layer's bias and
// the residual in one pass, summed in add_row-then-add's order (same bits).
@compute @workgroup_size(WG)
fn add_row_add(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) li: u32) {
    let i = linear_id(wg, nwg, li);
    if (past_end(i)) { return; }
    out[i] = (a[i] + row_bias4(i)) + res[i];
}

// tanh approximation of GELU, as in GPT-2 / Megatron.
const SQRT_2_OVER_PI: f32 = 0.7978845608028654;
const GELU_C: f32 = 0.044715;

fn tanh_safe(x: vec4<f32>) -> vec4<f32> {
    // tanh of large |x| overflows exp on some backends; clamp first.
    let c = clamp(x, vec4<f32>(-15.0), vec4<f32>(15.0));
    let e = exp(2.0 * c);
    return (e - 1.0) / (e + 1.0);
}

// out = gelu(a)
@compute @workgroup_size(WG)
fn gelu(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = linear_id(wg, nwg, li);
    if (past_end(i)) { return; }
    let x = a[i];
    let u = SQRT_2_OVER_PI * (x + GELU_C * x * x * x);
    out[i] = 0.5 * x * (1.0 + tanh_safe(u));
}

// out = b * gelu'(a)   (a = pre-activation input, b = upstream gradient)
@compute @workgroup_size(WG)
fn gelu_backward(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) li: u32) {
    let i = linear_id(wg, nwg, li);
    if (past_end(i)) { return; }
    let x = a[i];
    let u = SQRT_2_OVER_PI * (x + GELU_C * x * x * x);
    let t = tanh_safe(u);
    let du = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_C * x * x);
    out[i] = b[i] * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du);
}

// out = max(a, 0)
@compute @workgroup_size(WG)
fn relu(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = linear_id(wg, nwg, li);
    if (past_end(i)) { return; }
    out[i] = max(a[i], vec4<f32>(0.0));
}

// out = b where a > 0, else 0
@compute @workgroup_size(WG)
fn relu_backward(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) li: u32) {
    let i = linear_id(wg, nwg, li);
    if (past_end(i)) { return; }
    out[i] = select(vec4<f32>(0.0), b[i], a[i] > vec4<f32>(0.0));
}

// Logistic sigmoid; exp(-x) overflows to +inf for x < -88, giving 1/inf = 0.
fn sigmoid(x: vec4<f32>) -> vec4<f32> {
    return 1.0 / (1.0 + exp(-clamp(x, vec4<f32>(-80.0), vec4<f32>(80.0))));
}

// out = silu(a) = a * sigmoid(a)
@compute @workgroup_size(WG)
fn silu(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = linear_id(wg, nwg, li);
    if (past_end(i)) { return; }
    let x = a[i];
    out[i] = x * sigmoid(x);
}

// out = b * silu'(a) = b * s * (1 + a * (1 - s)),  s = sigmoid(a)
@compute @workgroup_size(WG)
fn silu_backward(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) li: u32) {
    let i = linear_id(wg, nwg, li);
    if (past_end(i)) { return; }
    let x = a[i];
    let s = sigmoid(x);
    out[i] = b[i] * s * (1.0 + x * (1.0 - s));
}

// out = alpha * tanh(a / alpha): logits soft-capped at ±alpha (Gemma 2).
@compute @workgroup_size(WG)
fn softcap(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) li: u32) {
    let i = linear_id(wg, nwg, li);
    if (past_end(i)) { return; }
    out[i] = p.alpha * tanh_safe(a[i] / p.alpha);
}

// out = b * (1 - t * t), t = tanh(a / alpha): softcap's backward.
@compute @workgroup_size(WG)
fn softcap_backward(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) li: u32) {
    let i = linear_id(wg, nwg, li);
    if (past_end(i)) { return; }
    let t = tanh_safe(a[i] / p.alpha);
    out[i] = b[i] * (1.0 - t * t);
}
