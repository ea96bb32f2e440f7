// attention_vec4.wgsl's operands as textures holding each tensor's bytes in
// order (LocalTensor::to_flat_texture: 16 bytes a texel, rgba32uint,
// 2^p.shift texels a row), for CPU adapters: Mesa's gallivm loads a storage
// buffer lane by lane and component by component, a texel per lane in one
// fetch. Texels are read as words and bitcast: bits in, bits out.

@group(0) @binding(1) var at: texture_storage_2d<rgba32uint, read>;
@group(0) @binding(2) var bt: texture_storage_2d<rgba32uint, read>;
@group(0) @binding(3) var mt: texture_storage_2d<rgba32uint, read>;

fn texel_at(i: u32) -> vec2<i32> {
    return vec2<i32>(i32(i & ((1u << p.shift) - 1u)), i32(i >> p.shift));
}

fn ld_a(i: u32) -> vec4<f32> { return bitcast<vec4<f32>>(textureLoad(at, texel_at(i))); }
fn ld_b(i: u32) -> vec4<f32> { return bitcast<vec4<f32>>(textureLoad(bt, texel_at(i))); }
fn ld_m(i: u32) -> vec4<f32> { return bitcast<vec4<f32>>(textureLoad(mt, texel_at(i))); }
