// Q4_K: 256 weights in eight sub-blocks of 32, each with a 6-bit scale and
// minimum (12 bytes), under an f16 super-scale d and super-minimum dmin;
// w = (d·sc)·q − dmin·mn. Chunk h is sub-block 2(h/4) + (h/2)%2's half h%2:
// qs bytes 32(h/4) + 16(h%2).., low nibbles for even sub-blocks.
const BL: u32 = 256u;
const MAIN_VEC4S: u32 = 8u;
const EXTRA_WORDS: u32 = 3u;

// ggml's get_scale_min_k4: sub-block j's (scale, minimum).
fn scale_min(blk: u32, j: u32) -> vec2<f32> {
    let at = 3u * blk;
    if (j < 4u) {
        return vec2<f32>(f32(xbyte(at, j) & 63u), f32(xbyte(at, j + 4u) & 63u));
    }
    let sc = (xbyte(at, j + 4u) & 15u) | ((xbyte(at, j - 4u) >> 6u) << 4u);
    let mn = (xbyte(at, j + 4u) >> 4u) | ((xbyte(at, j) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(mn));
}

fn chunk(blk: u32, h: u32) -> mat4x4<f32> {
    let c = h / 4u;
    let sub = (h / 2u) % 2u;
    let q = nib(wv(8u * blk + 2u * c + h % 2u), 4u * sub);
    let dm = half2(blk);
    let sm = scale_min(blk, 2u * c + sub);
    let d = dm.x * sm.x;
    let m = vec4<f32>(dm.y * sm.y);
    return mat4x4<f32>(d * q[0] - m, d * q[1] - m, d * q[2] - m, d * q[3] - m);
}

// The products' split of chunk: w = dm.x·raw − dm.y (scale after the dot).
fn chunk_raw(blk: u32, h: u32) -> mat4x4<f32> {
    return nib(wv(8u * blk + 2u * (h / 4u) + h % 2u), 4u * ((h / 2u) % 2u));
}

fn chunk_dm(blk: u32, h: u32) -> vec2<f32> {
    let dm = half2(blk);
    let sm = scale_min(blk, 2u * (h / 4u) + (h / 2u) % 2u);
    return vec2<f32>(dm.x * sm.x, dm.y * sm.y);
}

// chunk_dm(blk, 2j) = chunk_dm(blk, 2j + 1): the products fetch it once a pair.
const DM_PAIRS: bool = true;
