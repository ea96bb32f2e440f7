// Transpose / pack: out[i, j] = op(x)[i, j] for i < op(x)'s rows and j < its
// columns, 0 elsewhere in the [out_rows, ld] output (padding for the GEMM's
// aligned vec4 loads). x is [rows, cols] row-major; op = transpose when
// p.trans != 0 (a runtime flag, so one pipeline serves both).
//
// Each invocation writes 4 consecutive elements of one output row; element
// stores stay scalar so any `ld` works. Grid: p.groups workgroups folded into
// x/y; linear id = wg.y * nwg.x + wg.x. The element type Elem (f32 or f16)
// is an alias src/kernels/transpose.rs composes in front.

struct Params {
    rows: u32,
    cols: u32,
    // Output rows and row length (ld ≥ op(x)'s columns).
    out_rows: u32,
    ld: u32,
    trans: u32,
    groups: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<Elem>;
@group(0) @binding(2) var<storage, read_write> out: array<Elem>;

// op(x)[i, j], or 0 outside op(x).
fn at(i: u32, j: u32) -> Elem {
    if (p.trans != 0u) {
        if (i >= p.cols || j >= p.rows) {
            return Elem(0.0);
        }
        return x[j * p.cols + i];
    }
    if (i >= p.rows || j >= p.cols) {
        return Elem(0.0);
    }
    return x[i * p.cols + j];
}

@compute @workgroup_size(64)
fn pack(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let g = wg.y * nwg.x + wg.x;
    if (g >= p.groups) {
        return;
    }
    let w = (p.ld + 3u) / 4u;
    let q = g * 64u + lid;
    let i = q / w;
    if (i >= p.out_rows) {
        return;
    }
    let j = (q % w) * 4u;
    let o = i * p.ld + j;
    out[o] = at(i, j);
    if (j + 1u < p.ld) {
        out[o + 1u] = at(i, j + 1u);
    }
    if (j + 2u < p.ld) {
        out[o + 2u] = at(i, j + 2u);
    }
    if (j + 3u < p.ld) {
        out[o + 3u] = at(i, j + 3u);
    }
}
