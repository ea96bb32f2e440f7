// Transpose / pack: out[i, j] = op(x)[i, j] for i < op(x)'s rows and j < its
// columns, 0 elsewhere in the [out_rows, ld] output (padding for the GEMM's
// aligned vec4 loads). x is [rows, cols] row-major; op = transpose when
// p.trans != 0 (a runtime flag, so one pipeline serves both).
//
// With p.block = B > 0 the output is instead op(x) in blocks of B rows for
// the GEMM's shared-rows kernel: texel L (4 elements) = row blk·B + r,
// columns 4q..4q+4, where L = (blk·Q + q)·B + r and Q = op(x)'s columns / 4
// rounded up; so the texels a kernel reads for one step of K are adjacent
// rather than one per row, a row apart. Its [out_rows, ld] is only storage
// for the texels.
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
    // Rows per block of the blocked layout, or 0 for row-major
    // (pack_column_blocks4: texels per step of K in a block of columns).
    block: u32,
    // pack_column_blocks4: texels a lane reads per k (the tile's TNV).
    lane_texels: u32,
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
    if (q / w >= p.out_rows) {
        return;
    }
    // Output column jo of row q / w; source element (i, j).
    let jo = (q % w) * 4u;
    let o = (q / w) * p.ld + jo;
    var i = q / w;
    var j = jo;
    if (p.block != 0u) {
        // q is the texel's index L; p.ld is a multiple of 4.
        let cols = select(p.cols, p.rows, p.trans != 0u);
        let per_block = (cols + 3u) / 4u * p.block;
        i = q / per_block * p.block + q % p.block;
        j = q % per_block / p.block * 4u;
    }
    out[o] = at(i, j);
    if (jo + 1u < p.ld) {
        out[o + 1u] = at(i, j + 1u);
    }
    if (jo + 2u < p.ld) {
        out[o + 2u] = at(i, j + 2u);
    }
    if (jo + 3u < p.ld) {
        out[o + 3u] = at(i, j + 3u);
    }
}

// The blocked layout of a non-transposed x whose rows are a whole number of
// vec4s (p.cols % 4 == 0): invocation i moves row i = blk·block + r one vec4
// texel at a time, q = 0, 1, …, to texel (blk·Q + q)·block + r. `pack`
// evaluates `at` four times per texel and finds each texel's row and column
// by dividing by runtime values, which lavapipe does lane by lane; this loop
// divides once per row, so it runs several times as fast. The last block's
// rows past x are left unwritten: the GEMM reads them only into rows (A) or
// columns (B) of C that it does not store. The same bindings viewed as
// vec4s; p.groups counts workgroups of rows.
@group(0) @binding(1) var<storage, read> x4: array<vec4<Elem>>;
@group(0) @binding(2) var<storage, read_write> out4: array<vec4<Elem>>;

@compute @workgroup_size(64)
fn pack_blocks4(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let g = wg.y * nwg.x + wg.x;
    if (g >= p.groups) {
        return;
    }
    let i = g * 64u + lid;
    let quads = p.cols / 4u;
    if (i >= p.rows) {
        return;
    }
    // Texel (blk·Q + q)·block + r for q = 0, then steps of block texels.
    let blk = i / p.block;
    var o = blk * quads * p.block + (i - blk * p.block);
    var s = i * quads;
    for (var q = 0u; q < quads; q++) {
        out4[o] = x4[s];
        o += p.block;
        s += 1u;
    }
}

// B stored [K, N] (p.rows = K, p.cols = N, both multiples of 4) in blocks of
// the GEMM workgroup's columns, for its shared-rows kernel: in a block of
// p.block / 4 column texels, lane l reads p.lane_texels of them at each k,
// and for one step of K (4 k) its 4·p.lane_texels texels are adjacent:
// source texel (k, c) goes to (blk·Q + k/4)·p.block + l·4·TNV + (k%4)·TNV + j
// with c = blk·(p.block/4) + l·TNV + j, TNV = p.lane_texels, Q = K/4. A texel
// is already four columns at one k, so nothing is transposed; as in
// pack_blocks4, invocation k walks its row and texels past N in the last
// block are left unwritten (columns of C that are not stored).
@compute @workgroup_size(64)
fn pack_column_blocks4(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                       @builtin(local_invocation_index) lid: u32) {
    let g = wg.y * nwg.x + wg.x;
    if (g >= p.groups) {
        return;
    }
    let k = g * 64u + lid;
    if (k >= p.rows) {
        return;
    }
    let quads = p.cols / 4u;
    let tnv = p.lane_texels;
    let per_lane = 4u * tnv;
    let lanes = p.block / per_lane;
    let block_stride = (p.rows / 4u) * p.block;
    // Texel of column texel 0 (block 0, lane 0, j 0) for this k.
    let row_base = (k / 4u) * p.block + (k % 4u) * tnv;
    var o = row_base;
    var lane = 0u;
    var j = 0u;
    var s = k * quads;
    for (var c = 0u; c < quads; c++) {
        out4[o + j] = x4[s];
        s += 1u;
        j += 1u;
        if (j == tnv) {
            j = 0u;
            lane += 1u;
            o += per_lane;
            if (lane == lanes) {
                lane = 0u;
                o += block_stride - lanes * per_lane;
            }
        }
    }
}
