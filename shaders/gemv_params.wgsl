// The small-M GEMM's parameters and epilogue bindings for one product
// (gemv_group.wgsl has several products' own), read by gemv_header.wgsl
// through bias_at, acc_at and put. The entries' modules declare a (binding
// 1) and b (binding 2).

struct Params {
    m: u32,
    n: u32,
    k: u32,
    // bit 0: add bias; bit 1: add acc; bits 2-3: then the activation
    // (0 none, 1 GELU, 2 SiLU, 3 ReLU), as elementwise.wgsl computes it;
    // bit 4: then multiply by acc (bit 1 clear), as its `mul` does.
    flags: u32,
    groups: u32,
    // The texture entries' texels a row, as a shift (2^shift).
    shift: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read> acc_in: array<f32>;
@group(0) @binding(5) var<storage, read_write> c: array<COut>;

fn bias_at(n: u32) -> f32 { return bias[n]; }
fn acc_at(i: u32) -> f32 { return acc_in[i]; }
fn put(i: u32, v: COut) { c[i] = v; }
