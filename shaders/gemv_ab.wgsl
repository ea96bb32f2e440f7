// One small-M product's a (binding 1) and b (binding 2), read by the loads
// (src/kernels/gemv/loads.rs) through a_ld and b_ld; gemv_group.wgsl
// defines them over several products' bindings instead.

@group(0) @binding(1) var<storage, read> a: array<AV>;
@group(0) @binding(2) var<storage, read> b: array<BV>;

fn a_ld(i: u32) -> AV { return a[i]; }
fn b_ld(i: u32) -> BV { return b[i]; }
