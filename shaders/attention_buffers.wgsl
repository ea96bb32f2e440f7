// attention_vec4.wgsl's operands as storage buffers of vec4s: ld_a, ld_b
// and ld_m return vec4 i of views a and b and of the score matrix.

@group(0) @binding(1) var<storage, read> a4: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> b4: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> mat4: array<vec4<f32>>;

fn ld_a(i: u32) -> vec4<f32> { return a4[i]; }
fn ld_b(i: u32) -> vec4<f32> { return b4[i]; }
fn ld_m(i: u32) -> vec4<f32> { return mat4[i]; }
