// Q4_1: f16 scale d and minimum m, 32 nibbles; w = q·d + m.
const BL: u32 = 32u;
const MAIN_VEC4S: u32 = 1u;
const EXTRA_WORDS: u32 = 0u;

fn chunk(blk: u32, h: u32) -> mat4x4<f32> {
    let q = nib(wv(blk), 4u * h);
    let dm = half2(blk);
    let m = vec4<f32>(dm.y);
    return mat4x4<f32>(q[0] * dm.x + m, q[1] * dm.x + m, q[2] * dm.x + m, q[3] * dm.x + m);
}

// The products' split of chunk: w = dm.x·raw − dm.y (scale after the dot).
fn chunk_raw(blk: u32, h: u32) -> mat4x4<f32> {
    return nib(wv(blk), 4u * h);
}

fn chunk_dm(blk: u32, h: u32) -> vec2<f32> {
    let dm = half2(blk);
    return vec2<f32>(dm.x, -dm.y);
}

// chunk_dm(blk, 2j) = chunk_dm(blk, 2j + 1): the products fetch it once a pair.
const DM_PAIRS: bool = true;
