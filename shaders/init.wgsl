// Random initialisation on the device: element g of the logical tensor (its
// row-major index in the whole, unsharded tensor) gets a value drawn from
// Philox words of the counter (g, attempt, 0, 0) under the tensor's key, so
// every sharding of one logical tensor holds the same values and no rank
// needs the whole tensor on the host. src/kernels/random.rs draws the same
// values on the host (in f64) for tests and host masters.
//
// This rank's tensor, viewed as [outer, local, inner] around the split
// dimension, holds `local / per` sections of `per` indices each; section s
// starts at logical index s·section + first ([outer, total, inner]). A block
// of row-blocked storage starts at local element `offset`.
// Grid: one invocation per element of the block (grid.wgsl).

struct Params {
    n: u32,
    offset: u32,
    inner: u32,
    local: u32,
    per: u32,
    section: u32,
    first: u32,
    total: u32,
    kind: u32,
    key_lo: u32,
    key_hi: u32,
    a: f32,
    b: f32,
    lo: f32,
    hi: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;

const KIND_CONSTANT: u32 = 0u;
const KIND_NORMAL: u32 = 1u;
const KIND_UNIFORM: u32 = 2u;
const KIND_TRUNC_NORMAL: u32 = 3u;
// Redraws before a truncated normal or a half-open uniform gives up.
const ATTEMPTS: u32 = 32u;
const TWO_PI: f32 = 6.283185307179586;

// Uniform in [0, 1): the top 24 bits of a word.
fn unit(w: u32) -> f32 {
    return f32(w >> 8u) * 5.9604644775390625e-8;
}

// Standard normal by Box-Muller from two words; the angle is taken in
// [-π, π), where WGSL bounds cos's error.
fn standard_normal(w: vec4<u32>) -> f32 {
    let u1 = f32((w.x >> 8u) + 1u) * 5.9604644775390625e-8;
    let r = sqrt(-2.0 * log(u1));
    return -r * cos(TWO_PI * (unit(w.y) - 0.5));
}

fn draw(g: u32) -> f32 {
    let key = vec2<u32>(p.key_lo, p.key_hi);
    if (p.kind == KIND_CONSTANT) {
        return p.a;
    }
    if (p.kind == KIND_NORMAL) {
        return p.a + p.b * standard_normal(philox(vec4<u32>(g, 0u, 0u, 0u), key));
    }
    var v = p.lo;
    for (var attempt = 0u; attempt < ATTEMPTS; attempt++) {
        let w = philox(vec4<u32>(g, attempt, 0u, 0u), key);
        if (p.kind == KIND_UNIFORM) {
            v = p.a + (p.b - p.a) * unit(w.x);
            if (v < p.b) { return v; }
            v = p.a;
        } else {
            v = p.a + p.b * standard_normal(w);
            if (v >= p.lo && v <= p.hi) { return v; }
            v = clamp(v, p.lo, p.hi);
        }
    }
    return v;
}

@compute @workgroup_size(WG)
fn init(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = linear_id(wg, nwg, li);
    if (i >= p.n) { return; }
    let e = p.offset + i;
    let k = e % p.inner;
    let t = e / p.inner;
    let j = t % p.local;
    let o = t / p.local;
    let d = (j / p.per) * p.section + p.first + j % p.per;
    let g = (o * p.total + d) * p.inner + k;
    out[i] = draw(g);
}
