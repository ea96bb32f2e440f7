// Q5_1: f16 scale d and minimum m, 32 nibbles and a word of fifth bits;
// w = q·d + m.
const BL: u32 = 32u;
const MAIN_VEC4S: u32 = 1u;
const EXTRA_WORDS: u32 = 1u;

fn chunk(blk: u32, h: u32) -> mat4x4<f32> {
    let q = nib(wv(blk), 4u * h);
    let qh = wword(q_xo() + blk);
    let one = vec4<u32>(1u);
    let sh = vec4<u32>(0u, 1u, 2u, 3u) + vec4<u32>(16u * h);
    let dm = half2(blk);
    let m = vec4<f32>(dm.y);
    let o = vec4<u32>(4u);
    return mat4x4<f32>(
        (q[0] + vec4<f32>(((vec4<u32>(qh) >> sh) & one) << o)) * dm.x + m,
        (q[1] + vec4<f32>(((vec4<u32>(qh) >> (sh + vec4<u32>(4u))) & one) << o)) * dm.x + m,
        (q[2] + vec4<f32>(((vec4<u32>(qh) >> (sh + vec4<u32>(8u))) & one) << o)) * dm.x + m,
        (q[3] + vec4<f32>(((vec4<u32>(qh) >> (sh + vec4<u32>(12u))) & one) << o)) * dm.x + m,
    );
}

// The products' split of chunk: w = dm.x·raw − dm.y (scale after the dot).
fn chunk_raw(blk: u32, h: u32) -> mat4x4<f32> {
    let q = nib(wv(blk), 4u * h);
    let qh = wword(q_xo() + blk);
    let one = vec4<u32>(1u);
    let sh = vec4<u32>(0u, 1u, 2u, 3u) + vec4<u32>(16u * h);
    let o = vec4<u32>(4u);
    return mat4x4<f32>(
        q[0] + vec4<f32>(((vec4<u32>(qh) >> sh) & one) << o),
        q[1] + vec4<f32>(((vec4<u32>(qh) >> (sh + vec4<u32>(4u))) & one) << o),
        q[2] + vec4<f32>(((vec4<u32>(qh) >> (sh + vec4<u32>(8u))) & one) << o),
        q[3] + vec4<f32>(((vec4<u32>(qh) >> (sh + vec4<u32>(12u))) & one) << o),
    );
}

fn chunk_dm(blk: u32, h: u32) -> vec2<f32> {
    let dm = half2(blk);
    return vec2<f32>(dm.x, -dm.y);
}

// chunk_dm(blk, 2j) = chunk_dm(blk, 2j + 1): the products fetch it once a pair.
const DM_PAIRS: bool = true;
