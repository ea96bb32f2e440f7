// Optimiser steps, updating parameters and state in place.
// sgd:   g' = g + wd·p;  buf = μ·buf + g' (if μ ≠ 0, buf starts as g'); p -= lr·buf (or lr·g')
// adamw: p -= lr·wd·p;  m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²;
//        p -= lr · (m / (1−β1^t)) / (sqrt(v / (1−β2^t)) + ε)
// One invocation per vec4 of elements, buffers bound in whole vec4s
// (KernelSpec::in_vec4s; see elementwise.wgsl): the last vec4 may update
// the pad past n, which nothing reads.

struct Params {
    n: u32,
    first_step: u32,   // sgd: momentum buffer not yet initialised
    lr: f32,
    weight_decay: f32,
    momentum: f32,     // sgd μ; adamw β1
    beta2: f32,
    eps: f32,
    bias_c1: f32,      // adamw 1 − β1^t
    bias_c2: f32,      // adamw 1 − β2^t
    _pad0: f32,
    _pad1: f32,
    _pad2: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> grad: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> param: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> state1: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> state2: array<vec4<f32>>;

@compute @workgroup_size(WG)
fn sgd(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
       @builtin(local_invocation_index) li: u32) {
    let i = linear_id(wg, nwg, li);
    if (i >= (p.n + 3u) / 4u) { return; }
    let w = param[i];
    var g = grad[i] + p.weight_decay * w;
    if (p.momentum != 0.0) {
        var b = g;
        if (p.first_step == 0u) {
            b = p.momentum * state1[i] + g;
        }
        state1[i] = b;
        g = b;
    }
    param[i] = w - p.lr * g;
}

@compute @workgroup_size(WG)
fn adamw(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) li: u32) {
    let i = linear_id(wg, nwg, li);
    if (i >= (p.n + 3u) / 4u) { return; }
    let g = grad[i];
    var w = param[i] * (1.0 - p.lr * p.weight_decay);
    let m = p.momentum * state1[i] + (1.0 - p.momentum) * g;
    let v = p.beta2 * state2[i] + (1.0 - p.beta2) * g * g;
    state1[i] = m;
    state2[i] = v;
    let mh = m / p.bias_c1;
    let vh = v / p.bias_c2;
    param[i] = w - p.lr * mh / (sqrt(vh) + p.eps);
}
