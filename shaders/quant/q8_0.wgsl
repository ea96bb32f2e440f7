// Q8_0: an f16 scale d and 32 signed bytes; w = q·d.
const BL: u32 = 32u;
const MAIN_VEC4S: u32 = 2u;
const EXTRA_WORDS: u32 = 0u;

fn chunk(blk: u32, h: u32) -> mat4x4<f32> {
    let v = wv(2u * blk + h);
    let d = half1(blk);
    return mat4x4<f32>(i8x4(v.x) * d, i8x4(v.y) * d, i8x4(v.z) * d, i8x4(v.w) * d);
}

// The products' split of chunk: w = dm.x·raw − dm.y (scale after the dot).
fn chunk_raw(blk: u32, h: u32) -> mat4x4<f32> {
    let v = wv(2u * blk + h);
    return mat4x4<f32>(i8x4(v.x), i8x4(v.y), i8x4(v.z), i8x4(v.w));
}

fn chunk_dm(blk: u32, h: u32) -> vec2<f32> {
    return vec2<f32>(half1(blk), 0.0);
}

// chunk_dm(blk, 2j) = chunk_dm(blk, 2j + 1): the products fetch it once a pair.
const DM_PAIRS: bool = true;
