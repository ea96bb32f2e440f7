//! The paired program's WGSL (`pair.rs`), composed as the grouped one is
//! (`group_source.rs`): the loads, the header and the pair body copied
//! once per pair, each copy reading its pair's bindings and sizes.

use super::group_source::compose;
use super::loads::{A_VEC4, B_VEC4, B_VEC8_BF16};
use crate::kernels::member_source::{function_names, items};

/// The paired program's source for f32 (`nk_pair`) or bf16 (`nk8_pair`)
/// weights, and its entry's name.
pub(super) fn source(bf16: bool) -> (String, &'static str) {
    let (b, ty, body, entry) = if bf16 {
        (B_VEC8_BF16, "u32", "nk8_pair", "gemv_nk8_pair")
    } else {
        (B_VEC4, "f32", "nk_pair", "gemv_nk_pair")
    };
    let one = format!(
        "{A_VEC4}{b}{}{}",
        include_str!("../../../shaders/gemv_header.wgsl"),
        include_str!("../../../shaders/gemv_pair_body.wgsl")
    );
    // The other dtype's body and the one-product bodies are never called.
    let skip = |name: &str| ["nk", "nk8", "nk_pair", "nk8_pair"].contains(&name) && name != body;
    let items: Vec<(String, bool)> = items(&one)
        .into_iter()
        .filter(|item| {
            !function_names(std::slice::from_ref(item))
                .iter()
                .any(|n| skip(n))
        })
        .collect();
    let accessors = ["a_ld", "b_ld", "d_ld", "bias_at", "acc_at", "put", "put2"];
    let mut names: Vec<String> = accessors.iter().map(|s| s.to_string()).collect();
    names.extend(function_names(&items));
    let prelude = format!(
        "alias AIn = f32;\nalias BIn = {ty};\nalias COut = f32;\n{}{}",
        include_str!("../../../shaders/gemv_members.wgsl"),
        include_str!("../../../shaders/gemv_pair.wgsl")
    );
    // No pair has a bias or an accumulator: the header's reads of them are
    // never taken.
    let accessors = |g: usize| {
        format!(
            "fn a_ld_{g}(i: u32) -> AV {{ return a{g}[i]; }}
fn b_ld_{g}(i: u32) -> BV {{ return b{g}[i]; }}
fn d_ld_{g}(i: u32) -> BV {{ return d{g}[i]; }}
fn bias_at_{g}(n: u32) -> f32 {{ return 0.0; }}
fn acc_at_{g}(i: u32) -> f32 {{ return 0.0; }}
fn put_{g}(i: u32, v: COut) {{ c{g}[i] = v; }}
fn put2_{g}(i: u32, v: COut) {{ e{g}[i] = v; }}
"
        )
    };
    (
        compose(prelude, &items, &names, accessors, (entry, body)),
        entry,
    )
}
