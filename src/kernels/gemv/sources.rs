//! The small-M GEMM's buffer programs: one WGSL source per (A, B, C
//! dtypes, binding) combination, composed from the loads (`loads.rs`), the
//! header and the entries.

use super::knobs::Binding;
use super::loads::{
    A_SCALAR, A_VEC4, B_SCALAR, B_SCALAR_BF16, B_VEC4, B_VEC4_BF16, B_VEC8_BF16, B8_FROM_4,
};
use crate::element::DType;

/// The (family, source) of one (A, B, C dtypes, binding) combination,
/// composed once per process: pipeline specs take `&'static str`.
pub(super) fn program(
    (input, weight, output): (DType, DType, DType),
    binding: Binding,
) -> (&'static str, &'static str) {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    type Key = (DType, DType, DType, Binding);
    static CACHE: OnceLock<Mutex<HashMap<Key, (&'static str, &'static str)>>> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    *cache
        .entry((input, weight, output, binding))
        .or_insert_with(|| {
            let bf16 = weight == DType::BF16;
            let (a, b, tag) = match binding {
                Binding::BothVec4 => (A_VEC4, if bf16 { B_VEC4_BF16 } else { B_VEC4 }, "_ab4"),
                Binding::BVec4 => (A_SCALAR, if bf16 { B_VEC4_BF16 } else { B_VEC4 }, "_b4"),
                Binding::Scalar => (A_SCALAR, if bf16 { B_SCALAR_BF16 } else { B_SCALAR }, ""),
                Binding::Bf16Vec8 => (A_VEC4, B_VEC8_BF16, "_ab8"),
            };
            let f16 = [input, weight, output].contains(&DType::F16);
            // Bf16Vec8 loads the split entry's chunk itself.
            let b8 = if binding == Binding::Bf16Vec8 {
                ""
            } else {
                B8_FROM_4
            };
            let source = format!(
                "{}alias AIn = {input};\nalias BIn = {};\nalias COut = {output};\n{}{a}{b}{b8}{}{}{}{}",
                if f16 { "enable f16;\n" } else { "" },
                if bf16 {
                    "u32".to_string()
                } else {
                    weight.to_string()
                },
                include_str!("../../../shaders/gemv_ab.wgsl"),
                include_str!("../../../shaders/gemv_params.wgsl"),
                include_str!("../../../shaders/gemv_header.wgsl"),
                include_str!("../../../shaders/gemv.wgsl"),
                include_str!("../../../shaders/gemv_split.wgsl")
            );
            let w = if weight == input {
                String::new()
            } else {
                format!("_w{weight}")
            };
            let family = format!("gemv_{input}{w}_to_{output}{tag}");
            (
                Box::leak(family.into_boxed_str()) as &'static str,
                Box::leak(source.into_boxed_str()) as &'static str,
            )
        })
}

/// Every composed GEMV source, as (name, source): for validation tests.
pub(crate) fn gemv_sources() -> Vec<(&'static str, &'static str)> {
    use DType::{BF16, F16, F32};
    let dtypes = [
        (F32, F32, F32),
        (F16, F16, F16),
        (F16, F16, F32),
        (F32, F32, F16),
        (F32, BF16, F32),
        (F32, F16, F32),
    ];
    let bindings = [Binding::BothVec4, Binding::BVec4, Binding::Scalar];
    let mut out: Vec<_> = dtypes
        .iter()
        .flat_map(|&d| bindings.iter().map(move |&b| program(d, b)))
        .collect();
    out.push(program((F32, BF16, F32), Binding::Bf16Vec8));
    out.extend([super::group::program(false), super::group::program(true)]);
    out.extend([false, true].map(|bf16| {
        let (family, source, _) = super::pair::program(bf16);
        (family, source)
    }));
    out.extend(super::texture::texture_sources());
    out
}
