// Casts between f32 and bf16. bf16 tensors are two per 32-bit word (element
// 2w in the low half of word w, little-endian as checkpoints store them), so
// both sides are bound as words. Narrowing rounds to nearest, ties to even
// (NaN stays a quiet NaN), as half::bf16::from_f32 does on the host, so host
// and device narrowing agree bit for bit; widening is exact (a shift).
// Composed after the grid prefix (src/kernels/cast.rs).

struct Params {
    // Elements.
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

fn round_bf16(b: u32) -> u32 {
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return (b >> 16u) | 0x40u;
    }
    return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}

// One invocation per output word: elements 2w and 2w + 1 (zero past n).
@compute @workgroup_size(WG)
fn to_bf16(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) li: u32) {
    let w = linear_id(wg, nwg, li);
    let i = 2u * w;
    if (i >= p.n) { return; }
    var hi = 0u;
    if (i + 1u < p.n) {
        hi = round_bf16(x[i + 1u]);
    }
    out[w] = round_bf16(x[i]) | (hi << 16u);
}

// One invocation per element.
@compute @workgroup_size(WG)
fn from_bf16(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) li: u32) {
    let i = linear_id(wg, nwg, li);
    if (i >= p.n) { return; }
    let w = x[i / 2u];
    out[i] = select(w << 16u, w & 0xffff0000u, (i & 1u) == 1u);
}
