// Q4_0: an f16 scale d and 32 nibbles (weights 0..16 low, 16..32 high);
// w = (q − 8)·d.
const BL: u32 = 32u;
const MAIN_VEC4S: u32 = 1u;
const EXTRA_WORDS: u32 = 0u;

fn chunk(blk: u32, h: u32) -> mat4x4<f32> {
    let q = nib(wv(blk), 4u * h);
    let d = half1(blk);
    let o = vec4<f32>(8.0);
    return mat4x4<f32>((q[0] - o) * d, (q[1] - o) * d, (q[2] - o) * d, (q[3] - o) * d);
}

// The products' split of chunk: w = dm.x·raw − dm.y (scale after the dot).
fn chunk_raw(blk: u32, h: u32) -> mat4x4<f32> {
    return nib(wv(blk), 4u * h);
}

fn chunk_dm(blk: u32, h: u32) -> vec2<f32> {
    let d = half1(blk);
    return vec2<f32>(d, 8.0 * d);
}

// chunk_dm(blk, 2j) = chunk_dm(blk, 2j + 1): the products fetch it once a pair.
const DM_PAIRS: bool = true;
