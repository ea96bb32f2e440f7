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

/// How the products bind and read a.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AFrom {
    /// A storage array read element by element.
    Scalar,
    /// A storage array read as vec4s (K a multiple of 4).
    Vec4,
    /// A uniform of [`A_UNIFORM_VEC4S`] vec4s (K a multiple of 4, M·K up
    /// to 4 Ki vec4s): CPU adapters load a uniform once for all lanes,
    /// a storage buffer lane by lane, so a decoding token's a costs
    /// nothing beside the weight's loads.
    Uniform,
}

/// vec4s of a the uniform binding holds (64 KiB, WebGPU's default limit).
pub(super) const A_UNIFORM_VEC4S: usize = 4096;

/// The products' (family, source) for format `q`, reading a as `from` says.
pub(super) fn matmul_program(q: QuantType, from: AFrom) -> (&'static str, &'static str) {
    let tag = match from {
        AFrom::Scalar => "",
        AFrom::Vec4 => "_a4",
        AFrom::Uniform => "_au",
    };
    let family = interned(&format!("family {q}{tag}"), || format!("quant_{q}{tag}"));
    let source = interned(&format!("matmul {q}{tag}"), || {
        let binding = match from {
            AFrom::Uniform => format!(
                "@group(0) @binding(1) var<uniform> a: array<vec4<f32>, {A_UNIFORM_VEC4S}>;\n"
            ),
            _ => "@group(0) @binding(1) var<storage, read> a: array<AV>;\n".to_string(),
        };
        format!(
            "alias AIn = f32;\nalias COut = f32;\n{}{binding}{}{}{}{}",
            if from == AFrom::Scalar {
                A_SCALAR
            } else {
                A_VEC4
            },
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
                matmul_program(q, AFrom::Vec4),
                matmul_program(q, AFrom::Scalar),
                matmul_program(q, AFrom::Uniform),
                lookup_program(q),
            ]
        })
        .collect()
}
