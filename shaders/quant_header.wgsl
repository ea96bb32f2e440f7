// What every quantized format's decoder (shaders/quant/*.wgsl) reads a
// weight buffer with. The buffer is bound as vec4<u32>s; the includer
// defines wv(i) (vec4 i of the buffer) and q_xo() / q_ho(), the word
// offsets of the extra (4-byte fields) and halves (f16 scales) regions
// (src/quant/layout.rs). Each format then defines BL (weights a block) and
// chunk(blk, h): weights 16h..16h+16 of block blk, column j holding
// weights 16h+4j..16h+4j+4, dequantized as ggml does in f32.

// Word i of the buffer.
fn wword(i: u32) -> u32 {
    return wv(i >> 2u)[i & 3u];
}

// Block blk's scale, for formats with one f16 a block.
fn half1(blk: u32) -> f32 {
    let v = unpack2x16float(wword(q_ho() + blk / 2u));
    return select(v.x, v.y, (blk & 1u) == 1u);
}

// Block blk's two f16 (scale, minimum) for formats with two a block.
fn half2(blk: u32) -> vec2<f32> {
    return unpack2x16float(wword(q_ho() + blk));
}

// Nibbles at bit s (0 low, 4 high) of the 16 bytes of v, as the 16
// weights of a chunk (byte 4j+t of v gives column j's element t).
fn nib(v: vec4<u32>, s: u32) -> mat4x4<f32> {
    let sh = vec4<u32>(0u, 8u, 16u, 24u) + vec4<u32>(s);
    let m = vec4<u32>(15u);
    return mat4x4<f32>(
        vec4<f32>((vec4<u32>(v.x) >> sh) & m),
        vec4<f32>((vec4<u32>(v.y) >> sh) & m),
        vec4<f32>((vec4<u32>(v.z) >> sh) & m),
        vec4<f32>((vec4<u32>(v.w) >> sh) & m),
    );
}

// `bits` bits at bit s of each byte of word x, shifted up by `up`.
fn bits4(x: u32, s: u32, mask: u32, up: u32) -> vec4<u32> {
    return ((vec4<u32>(x) >> (vec4<u32>(0u, 8u, 16u, 24u) + vec4<u32>(s))) & vec4<u32>(mask)) << vec4<u32>(up);
}

// The four signed bytes of x.
fn i8x4(x: u32) -> vec4<f32> {
    let v = vec4<i32>(bitcast<i32>(x));
    return vec4<f32>((v << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u));
}

// Byte i of the extra region's words from word `at`.
fn xbyte(at: u32, i: u32) -> u32 {
    return (wword(q_xo() + at + i / 4u) >> (8u * (i % 4u))) & 255u;
}
