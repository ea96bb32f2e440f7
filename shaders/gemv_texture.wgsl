// Small-M GEMM entries reading the weight b [N, K] from a texture that
// holds its bytes in order (LocalTensor::to_flat_texture: 16 bytes a texel,
// rgba32uint, 2^p.shift texels a row) and a from a uniform buffer, for CPU
// adapters: Mesa's gallivm loads storage buffers lane by lane, a texel per
// lane in one fetch, and a uniform read at the same address by every lane
// once. a's rows are whole vec4s (K a multiple of 4, M·K/4 ≤ 4096).
//
// Each invocation owns COLS adjacent columns and every row (ROWS ≥ M), and
// adds each column's four-element dot products in gemv.wgsl's order, so
// the bits are the buffer entries' (gemv_nk, gemv_nk8). Texels are read as
// words and bitcast (f32) or widened (bf16): bits in, bits out. Composed
// after `alias COut = f32;`, gemv_params.wgsl and gemv_header.wgsl
// (src/kernels/gemv/texture.rs).

@group(0) @binding(1) var<uniform> a: array<vec4<f32>, 4096>;
@group(0) @binding(2) var bt: texture_storage_2d<rgba32uint, read>;

// Columns an invocation owns: 1, 2 or 4 (the measured knobs use 2 and 4).
override COLS: u32 = 2u;

// The texel holding 16-byte unit i of b.
fn texel(i: u32) -> vec4<u32> {
    return textureLoad(bt, vec2<i32>(i32(i & ((1u << p.shift) - 1u)), i32(i >> p.shift)));
}

// bf16 pairs (little-endian words) widened by shifts, as loads.rs does.
fn wide(v: vec2<u32>) -> vec4<f32> {
    return vec4<f32>(bitcast<f32>(v.x << 16u), bitcast<f32>(v.x & 0xffff0000u),
        bitcast<f32>(v.y << 16u), bitcast<f32>(v.y & 0xffff0000u));
}

fn store_cols(n0: u32, s: array<array<f32, 4>, 8>) {
    for (var m = 0u; m < ROWS; m++) {
        for (var j = 0u; j < COLS; j++) {
            store1(m, n0 + j, s[m][j]);
        }
    }
}

// f32 b: four elements a texel.
@compute @workgroup_size(WG)
fn gemv_tex(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let n0 = COLS * ((wg.y * nwg.x + wg.x) * WG + li);
    if (n0 >= p.n) {
        return;
    }
    let last = p.n - 1u;
    let k4 = p.k / 4u;
    var s: array<array<f32, 4>, 8>;
    for (var q = 0u; q < k4; q++) {
        // A's rows once for every column.
        var x: array<vec4<f32>, 8>;
        for (var m = 0u; m < ROWS; m++) {
            x[m] = a[arow(m) * k4 + q];
        }
        for (var j = 0u; j < COLS; j++) {
            // Columns past N read the last row (computed, not stored).
            let w = bitcast<vec4<f32>>(texel(min(n0 + j, last) * k4 + q));
            for (var m = 0u; m < ROWS; m++) {
                s[m][j] += dot(x[m], w);
            }
        }
    }
    store_cols(n0, s);
}

// bf16 b: eight elements a texel, two dot products a texel as gemv_nk8.
@compute @workgroup_size(WG)
fn gemv_tex8(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let n0 = COLS * ((wg.y * nwg.x + wg.x) * WG + li);
    if (n0 >= p.n) {
        return;
    }
    let last = p.n - 1u;
    let k4 = p.k / 4u;
    let k8 = p.k / 8u;
    var s: array<array<f32, 4>, 8>;
    for (var q = 0u; q < k8; q++) {
        var x: array<mat2x4<f32>, 8>;
        for (var m = 0u; m < ROWS; m++) {
            let r = arow(m) * k4 + 2u * q;
            x[m] = mat2x4<f32>(a[r], a[r + 1u]);
        }
        for (var j = 0u; j < COLS; j++) {
            let t = texel(min(n0 + j, last) * k8 + q);
            let lo = wide(t.xy);
            let hi = wide(t.zw);
            for (var m = 0u; m < ROWS; m++) {
                s[m][j] += dot(x[m][0], lo);
                s[m][j] += dot(x[m][1], hi);
            }
        }
    }
    store_cols(n0, s);
}
