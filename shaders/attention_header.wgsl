// Causal softmax attention, one rank's heads (src/kernels/attention/).
// Per sequence b and query head h, with queries at positions past + i
// (i < tq) and keys/values at positions j < tk of key/value head kvh(h):
//   S[i, j] = q_i . k_j * scale, masked to j <= past + i (and, with a
//     window w > 0, to past + i < j + w: Mistral's sliding window),
//   P = softmax over each row of S (max subtracted), exactly 0 where masked,
//   O[i] = sum_j P[i, j] v_j.
// Grouped-query attention: query head h (local, global q0 + h) reads
// key/value head kvh(h) = (q0 + h) / group - kv0 of the key/value views; with
// group 1 and q0 = kv0 that is h itself (multi-head attention).
// Element e of head h at position t of sequence b of a view lives at
//   src[base + b*sb + h*sh + t*st + e]
// (the fused QKV layout, the output layout and the KV-cache layout are all
// such views), so one set of kernels serves training and cached decoding.
// Score-shaped matrices (P, dS) are [batch, heads, tq, tk], row-major.
//
// Why tiles: lavapipe/llvmpipe turn every storage-buffer load into a loop
// over the SIMD lanes (see src/device/texture.rs), so a load costs far more than an
// FMA. masked_dots and mix give each invocation a 4 x 4 tile of outputs and
// do 16 FMAs per 8 scalar loads; tile edges clamp their loads and skip their
// stores. Row kernels run one invocation per (b, h, i) row, in order
// (deterministic), and nothing uses barriers or workgroup memory.

struct Params {
    batch: u32,
    heads: u32,
    // Query positions per sequence.
    tq: u32,
    // Key positions per sequence (= past + tq).
    tk: u32,
    // head_dim.
    d: u32,
    // Positions before the first query (a cache's length); 0 in training.
    past: u32,
    // Factor on every result of masked_dots and mix.
    scale: f32,
    // mix: 1 sums over the rows of the score matrix (Mᵀ X), 0 over its
    // columns (M X).
    trans: u32,
    // View a (a_src): masked_dots' left rows, mix's X.
    a_base: u32,
    a_sb: u32,
    a_sh: u32,
    a_st: u32,
    // View b (b_src): masked_dots' right rows.
    b_base: u32,
    b_sb: u32,
    b_sh: u32,
    b_st: u32,
    // View o (out): mix's output.
    o_base: u32,
    o_sb: u32,
    o_sh: u32,
    o_st: u32,
    // Invocations with work: tiles or rows.
    n: u32,
    // Query heads per key/value head.
    group: u32,
    // Global index of this rank's first query head, and of the first
    // key/value head its key/value views hold.
    q0: u32,
    kv0: u32,
    // Sliding window (0: none).
    window: u32,
    // Key/value heads of the views (mix with trans = 1 and write_kv run
    // over these).
    kv_heads: u32,
    // attention_textures.wgsl: texels a texture row, as a power of 2.
    shift: u32,
    // attention_decode.wgsl: 1 rotates the new queries and keys first.
    rotate: u32,
}

// One layout for every entry of every module: the uniform here, the
// operands at bindings 1..=3 and the output at 4 in attention.wgsl
// (scalars) and attention_vec4.wgsl (vec4s, its operands from
// attention_buffers.wgsl or attention_textures.wgsl).
@group(0) @binding(0) var<uniform> p: Params;

// Start of a row's max: finite, so a row whose scores are all -inf gives
// exp(-inf - NEG_BIG) = 0 rather than NaN.
const NEG_BIG: f32 = -3.4e38;

fn invocation(wg: vec3<u32>, nwg: vec3<u32>, li: u32) -> u32 {
    return (wg.y * nwg.x + wg.x) * 64u + li;
}

fn a_at(b: u32, h: u32, t: u32) -> u32 {
    return p.a_base + b * p.a_sb + h * p.a_sh + t * p.a_st;
}

fn b_at(b: u32, h: u32, t: u32) -> u32 {
    return p.b_base + b * p.b_sb + h * p.b_sh + t * p.b_st;
}

fn o_at(b: u32, h: u32, t: u32) -> u32 {
    return p.o_base + b * p.o_sb + h * p.o_sh + t * p.o_st;
}

// The key/value head query head h (local) reads.
fn kvh(h: u32) -> u32 {
    return (p.q0 + h) / p.group - p.kv0;
}

// Keys query i sees: j < past + i + 1 (and j < tk).
fn keys_of(i: u32) -> u32 {
    return min(p.past + i + 1u, p.tk);
}

// First key query i sees: past + i + 1 - window (0 without a window).
fn first_key(i: u32) -> u32 {
    let end = p.past + i + 1u;
    return select(0u, end - p.window, p.window > 0u && end > p.window);
}

// Whether query i sees key j.
fn visible(i: u32, j: u32) -> bool {
    return j <= p.past + i && (p.window == 0u || p.past + i < j + p.window);
}

