// Q5_K: Q4_K's scales and nibbles plus a fifth bit per weight (qh, 32
// bytes, first in the block's quants): bit 2c + s of qh[l] for weight l
// of sub-block 2c + s. w = (d·sc)·q − dmin·mn.
const BL: u32 = 256u;
const MAIN_VEC4S: u32 = 10u;
const EXTRA_WORDS: u32 = 3u;

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
    let q = nib(wv(10u * blk + 2u + 2u * c + h % 2u), 4u * sub);
    let qh = wv(10u * blk + h % 2u);
    let b = 2u * c + sub;
    let dm = half2(blk);
    let sm = scale_min(blk, b);
    let d = dm.x * sm.x;
    let m = vec4<f32>(dm.y * sm.y);
    return mat4x4<f32>(
        d * (q[0] + vec4<f32>(bits4(qh.x, b, 1u, 4u))) - m,
        d * (q[1] + vec4<f32>(bits4(qh.y, b, 1u, 4u))) - m,
        d * (q[2] + vec4<f32>(bits4(qh.z, b, 1u, 4u))) - m,
        d * (q[3] + vec4<f32>(bits4(qh.w, b, 1u, 4u))) - m,
    );
}

// The products' split of chunk: w = dm.x·raw − dm.y (scale after the dot).
fn chunk_raw(blk: u32, h: u32) -> mat4x4<f32> {
    let c = h / 4u;
    let sub = (h / 2u) % 2u;
    let q = nib(wv(10u * blk + 2u + 2u * c + h % 2u), 4u * sub);
    let qh = wv(10u * blk + h % 2u);
    let b = 2u * c + sub;
    return mat4x4<f32>(
        q[0] + vec4<f32>(bits4(qh.x, b, 1u, 4u)),
        q[1] + vec4<f32>(bits4(qh.y, b, 1u, 4u)),
        q[2] + vec4<f32>(bits4(qh.z, b, 1u, 4u)),
        q[3] + vec4<f32>(bits4(qh.w, b, 1u, 4u)),
    );
}

fn chunk_dm(blk: u32, h: u32) -> vec2<f32> {
    let dm = half2(blk);
    let sm = scale_min(blk, 2u * (h / 4u) + (h / 2u) % 2u);
    return vec2<f32>(dm.x * sm.x, dm.y * sm.y);
}

// chunk_dm(blk, 2j) = chunk_dm(blk, 2j + 1): the products fetch it once a pair.
const DM_PAIRS: bool = true;
