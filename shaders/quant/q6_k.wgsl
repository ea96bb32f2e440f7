// Q6_K: 256 weights as low nibbles (ql, 128 bytes) and two high bits (qh,
// 64 bytes), sixteen i8 scales and an f16 d; w = (d·sc)·(q − 32). Chunk h
// is half hh = h/8, quarter qq = (h%8)/2 (outputs +32·qq), bytes
// 16(h%2).. of that half: ql at 32(qq%2), nibble qq/2; qh bits 2qq.
const BL: u32 = 256u;
const MAIN_VEC4S: u32 = 12u;
const EXTRA_WORDS: u32 = 4u;

fn chunk(blk: u32, h: u32) -> mat4x4<f32> {
    let hh = h / 8u;
    let qq = (h % 8u) / 2u;
    let l = h % 2u;
    let lo = nib(wv(12u * blk + 4u * hh + 2u * (qq % 2u) + l), 4u * (qq / 2u));
    let hi = wv(12u * blk + 8u + 2u * hh + l);
    let sc = f32(bitcast<i32>(xbyte(4u * blk, 8u * hh + l + 2u * qq) << 24u) >> 24u);
    let d = half1(blk) * sc;
    let o = vec4<f32>(32.0);
    return mat4x4<f32>(
        d * (lo[0] + vec4<f32>(bits4(hi.x, 2u * qq, 3u, 4u)) - o),
        d * (lo[1] + vec4<f32>(bits4(hi.y, 2u * qq, 3u, 4u)) - o),
        d * (lo[2] + vec4<f32>(bits4(hi.z, 2u * qq, 3u, 4u)) - o),
        d * (lo[3] + vec4<f32>(bits4(hi.w, 2u * qq, 3u, 4u)) - o),
    );
}

// The products' split of chunk: w = dm.x·raw − dm.y (scale after the dot).
fn chunk_raw(blk: u32, h: u32) -> mat4x4<f32> {
    let hh = h / 8u;
    let qq = (h % 8u) / 2u;
    let l = h % 2u;
    let lo = nib(wv(12u * blk + 4u * hh + 2u * (qq % 2u) + l), 4u * (qq / 2u));
    let hi = wv(12u * blk + 8u + 2u * hh + l);
    return mat4x4<f32>(
        lo[0] + vec4<f32>(bits4(hi.x, 2u * qq, 3u, 4u)),
        lo[1] + vec4<f32>(bits4(hi.y, 2u * qq, 3u, 4u)),
        lo[2] + vec4<f32>(bits4(hi.z, 2u * qq, 3u, 4u)),
        lo[3] + vec4<f32>(bits4(hi.w, 2u * qq, 3u, 4u)),
    );
}

fn chunk_dm(blk: u32, h: u32) -> vec2<f32> {
    let hh = h / 8u;
    let qq = (h % 8u) / 2u;
    let sc = f32(bitcast<i32>(xbyte(4u * blk, 8u * hh + h % 2u + 2u * qq) << 24u) >> 24u);
    let d = half1(blk) * sc;
    return vec2<f32>(d, 32.0 * d);
}

// Each 16 weights have their own scale.
const DM_PAIRS: bool = false;
