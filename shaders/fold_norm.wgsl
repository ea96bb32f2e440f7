// An all-reduce's fold, the residual and the next RMSNorm of a few rows in
// one dispatch (src/kernels/fold_norm.rs): one workgroup per row writes
//   x[i] = res[i] + op(op(op(in0[i], in1[i]), in2[i]), in3[i])
// (COUNT inputs; with ACCUMULATE x's old value first), copy_fold.wgsl's
// fold_flat4_add element by element, so its bits; then, after a barrier,
// norm_rows.wgsl's norm_row on x, so forward_rows' bits. Composed after
// norm_rows.wgsl's items without its bindings, which are declared here
// (x read_write: the fold writes it).
//
// Why: a row-parallel branch on ranks sharing a device ended in a fold
// and the next layer's norm, two dispatches of one workgroup each, and a
// CPU adapter's fixed cost per dispatch exceeded their work.

override COUNT: u32 = 4u;
override ACCUMULATE: bool = false;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> in0: array<f32>;
@group(0) @binding(2) var<storage, read> in1: array<f32>;
@group(0) @binding(3) var<storage, read> in2: array<f32>;
@group(0) @binding(4) var<storage, read> in3: array<f32>;
@group(0) @binding(5) var<storage, read> res: array<f32>;
@group(0) @binding(6) var<storage, read_write> x: array<f32>;
@group(0) @binding(7) var<storage, read> gamma: array<f32>;
@group(0) @binding(8) var<storage, read> beta: array<f32>;
@group(0) @binding(9) var<storage, read_write> stats: array<f32>;
@group(0) @binding(10) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn fold_norm_rows(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let r = wg.x;
    for (var j = li; j < p.cols; j += 64u) {
        let i = r * p.cols + j;
        var acc = in0[i];
        if (ACCUMULATE) { acc = x[i] + acc; }
        if (COUNT > 1u) { acc = acc + in1[i]; }
        if (COUNT > 2u) { acc = acc + in2[i]; }
        if (COUNT > 3u) { acc = acc + in3[i]; }
        x[i] = res[i] + acc;
    }
    // The row's x, written by the workgroup, before invocation 0 sums it.
    storageBarrier();
    norm_row(r, li);
}
