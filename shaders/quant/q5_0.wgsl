// Q5_0: an f16 scale d, 32 nibbles and a word of fifth bits (bit j for
// weight j); w = (q − 16)·d.
const BL: u32 = 32u;
const MAIN_VEC4S: u32 = 1u;
const EXTRA_WORDS: u32 = 1u;

fn chunk5(blk: u32, h: u32) -> mat4x4<f32> {
    let q = nib(wv(blk), 4u * h);
    let qh = wword(q_xo() + blk);
    let one = vec4<u32>(1u);
    let sh = vec4<u32>(0u, 1u, 2u, 3u) + vec4<u32>(16u * h);
    return mat4x4<f32>(
        q[0] + vec4<f32>(((vec4<u32>(qh) >> sh) & one) << vec4<u32>(4u)),
        q[1] + vec4<f32>(((vec4<u32>(qh) >> (sh + vec4<u32>(4u))) & one) << vec4<u32>(4u)),
        q[2] + vec4<f32>(((vec4<u32>(qh) >> (sh + vec4<u32>(8u))) & one) << vec4<u32>(4u)),
        q[3] + vec4<f32>(((vec4<u32>(qh) >> (sh + vec4<u32>(12u))) & one) << vec4<u32>(4u)),
    );
}

fn chunk(blk: u32, h: u32) -> mat4x4<f32> {
    let q = chunk5(blk, h);
    let d = half1(blk);
    let o = vec4<f32>(16.0);
    return mat4x4<f32>((q[0] - o) * d, (q[1] - o) * d, (q[2] - o) * d, (q[3] - o) * d);
}

// The products' split of chunk: w = dm.x·raw − dm.y (scale after the dot).
fn chunk_raw(blk: u32, h: u32) -> mat4x4<f32> {
    return chunk5(blk, h);
}

fn chunk_dm(blk: u32, h: u32) -> vec2<f32> {
    let d = half1(blk);
    return vec2<f32>(d, 16.0 * d);
}

// chunk_dm(blk, 2j) = chunk_dm(blk, 2j + 1): the products fetch it once a pair.
const DM_PAIRS: bool = true;
