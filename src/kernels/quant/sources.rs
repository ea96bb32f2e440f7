//! The WGSL of the quantized-weight kernels, composed once per process per
//! format: the products (`shaders/quant_matmul.wgsl`) and the embedding
//! lookup (`shaders/embedding.wgsl` reading a quantized table), each over
//! `shaders/quant_header.wgsl` and the format's decoder (`shaders/quant/`).

use crate::kernels::gemv::loads::{A_SCALAR, A_VEC4};
use crate::kernels::interned::interned;
use crate::quant::QuantType;

/// The format's decoder: `BL`, `MAIN_VEC4S`, `EXTRA_WORDS` and `chunk`.
fn decoder(q: QuantType) -> &'static str {
    match q {
        QuantType::Q8_0 => include_str!("../../../shaders/quant/q8_0.wgsl"),
        QuantType::Q4_0 => include_str!("../../../shaders/quant/q4_0.wgsl"),
        QuantType::Q4_1 => include_str!("../../../shaders/quant/q4_1.wgsl"),
        QuantType::Q5_0 => include_str!("../../../shaders/quant/q5_0.wgsl"),
        QuantType::Q5_1 => include_str!("../../../shaders/quant/q5_1.wgsl"),
        QuantType::Q4K => include_str!("../../../shaders/quant/q4_k.wgsl"),
        QuantType::Q5K => include_str!("../../../shaders/quant/q5_k.wgsl"),
        QuantType::Q6K => include_str!("../../../shaders/quant/q6_k.wgsl"),
    }
}

/// The products' (family, source) for format `q`, with a read as vec4s
/// (`a_vec4`: K a multiple of 4) or element by element.
pub(super) fn matmul_program(q: QuantType, a_vec4: bool) -> (&'static str, &'static str) {
    let tag = if a_vec4 { "_a4" } else { "" };
    let family = interned(&format!("family {q}{tag}"), || format!("quant_{q}{tag}"));
    let source = interned(&format!("matmul {q}{tag}"), || {
        format!(
            "alias AIn = f32;\nalias COut = f32;\n{}{}{}{}{}",
            if a_vec4 { A_VEC4 } else { A_SCALAR },
            include_str!("../../../shaders/gemv_header.wgsl"),
            include_str!("../../../shaders/quant_header.wgsl"),
            decoder(q),
            include_str!("../../../shaders/quant_matmul.wgsl"),
        )
    });
    (family, source)
}

/// The embedding lookup's (family, source) on a table in format `q`:
/// element i of the table (row i / dim) dequantized from its chunk.
pub(crate) fn lookup_program(q: QuantType) -> (&'static str, &'static str) {
    let family = interned(&format!("family embedding {q}"), || {
        format!("embedding_{q}")
    });
    let source = interned(&format!("embedding {q}"), || {
        format!(
            "alias Src = vec4<u32>;
fn wv(i: u32) -> vec4<u32> {{ return src[i]; }}
fn row_blocks() -> u32 {{ return (p.dim + BL - 1u) / BL; }}
fn q_xo() -> u32 {{ return p.rows * row_blocks() * MAIN_VEC4S * 4u; }}
fn q_ho() -> u32 {{ return q_xo() + p.rows * row_blocks() * EXTRA_WORDS; }}
fn ld_src(i: u32) -> f32 {{
    let r = i / p.dim;
    let c = i - r * p.dim;
    let e = c % BL;
    let w = chunk(r * row_blocks() + c / BL, e / 16u);
    return w[(e % 16u) / 4u][e % 4u];
}}
{}{}{}{}",
            include_str!("../../../shaders/quant_header.wgsl"),
            decoder(q),
            include_str!("../../../shaders/grid.wgsl"),
            include_str!("../../../shaders/embedding.wgsl"),
        )
    });
    (family, source)
}

/// Every composed source, as (name, source): for the validation tests.
pub(crate) fn quant_sources() -> Vec<(&'static str, &'static str)> {
    QuantType::ALL
        .into_iter()
        .flat_map(|q| {
            [
                matmul_program(q, true),
                matmul_program(q, false),
                lookup_program(q),
            ]
        })
        .collect()
}
