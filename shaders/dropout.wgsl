// Inverted dropout with a counter-based mask: out = x·scale where the element
// is kept, 0 where dropped (the same entry serves forward, on x, and
// backward, on dy). Element i of this rank's tensor, viewed as [outer, len,
// inner] around the split dimension, is global element
// g = (o·total + start + j)·inner + k of the logical tensor ([outer, total,
// inner]); a replicated tensor has len = total, start = 0. The mask bit of g is
// Philox-4x32-10 (Salmon et al., SC'11; Random123's constants) of the counter
// (g, layer, step_lo, step_hi) under the key (seed_lo, seed_hi): the element
// is kept when the first output word is ≥ threshold = ⌊p·2³²⌋. So the mask
// depends on the logical index only, never on the sharding.
// Grid: one invocation per element (grid.wgsl); Philox from philox.wgsl.

struct Params {
    n: u32,
    len: u32,
    inner: u32,
    total: u32,
    start: u32,
    layer: u32,
    step_lo: u32,
    step_hi: u32,
    seed_lo: u32,
    seed_hi: u32,
    threshold: u32,
    scale: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(WG)
fn dropout(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) li: u32) {
    let i = linear_id(wg, nwg, li);
    if (i >= p.n) { return; }
    let k = i % p.inner;
    let t = i / p.inner;
    let j = t % p.len;
    let o = t / p.len;
    let g = (o * p.total + p.start + j) * p.inner + k;
    let bits = philox(vec4<u32>(g, p.layer, p.step_lo, p.step_hi),
                      vec2<u32>(p.seed_lo, p.seed_hi)).x;
    out[i] = select(0.0, x[i] * p.scale, bits >= p.threshold);
}
