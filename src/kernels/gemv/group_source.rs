//! The grouped program's WGSL (`group.rs`): the one-product program's
//! functions copied once per member, each copy reading its member's
//! bindings and sizes, and an entry that enters its workgroup's member
//! once. The copies are the one-product code, so the same bits. A member's
//! bias and its multiplier (`acc_at`) share its third binding. A switch
//! on the member at every load instead made lavapipe's loads a third
//! slower than the product alone (BENCHMARKS.md, round 31).

use super::knobs::GROUP_OF;
use super::loads::{A_VEC4, B_VEC4, B_VEC8_BF16};
use crate::kernels::member_source::{function_names, items, member_entry, specialise};

/// The grouped program's source for f32 (`nk`) or bf16 (`nk8`) weights.
pub(super) fn source(bf16: bool) -> String {
    let (b, ty, body) = if bf16 {
        (B_VEC8_BF16, "u32", "nk8")
    } else {
        (B_VEC4, "f32", "nk")
    };
    let one = format!(
        "{A_VEC4}{b}{}{}",
        include_str!("../../../shaders/gemv_header.wgsl"),
        include_str!("../../../shaders/gemv.wgsl")
    );
    let items = items(&one);
    let accessors = ["a_ld", "b_ld", "bias_at", "acc_at", "put"];
    let mut names: Vec<String> = accessors.iter().map(|s| s.to_string()).collect();
    names.extend(function_names(&items));
    let prelude = format!(
        "alias AIn = f32;\nalias BIn = {ty};\nalias COut = f32;\n{}{}",
        include_str!("../../../shaders/gemv_members.wgsl"),
        include_str!("../../../shaders/gemv_group.wgsl")
    );
    let accessors = |g: usize| {
        format!(
            "fn a_ld_{g}(i: u32) -> AV {{ return a{g}[i]; }}
fn b_ld_{g}(i: u32) -> BV {{ return b{g}[i]; }}
fn bias_at_{g}(n: u32) -> f32 {{ return bias{g}[n]; }}
fn acc_at_{g}(i: u32) -> f32 {{ return bias{g}[i]; }}
fn put_{g}(i: u32, v: COut) {{ c{g}[i] = v; }}
"
        )
    };
    let entry = format!("gemv_{body}_group");
    compose(prelude, &items, &names, accessors, (&entry, body))
}

/// `prelude`, then `items`' non-functions once, then for each member `g`
/// its `accessors(g)` and `items`' functions reading member g's bindings
/// (every call of a function in `names` suffixed `_g`) and sizes
/// (`p.ns[g]`, `p.ks[g]`), then entry `name` running `body_g` in each
/// workgroup's member: the grouped and the paired programs.
pub(super) fn compose(
    prelude: String,
    items: &[(String, bool)],
    names: &[String],
    accessors: impl Fn(usize) -> String,
    (name, body): (&str, &str),
) -> String {
    let mut src = prelude;
    for (text, _) in items.iter().filter(|(_, f)| !*f) {
        src.push_str(text);
        src.push('\n');
    }
    for g in 0..GROUP_OF {
        src.push_str(&accessors(g));
        let sizes = |f: &str| match f {
            "n" => Some(format!("p.ns[{g}]")),
            "k" => Some(format!("p.ks[{g}]")),
            _ => None,
        };
        for (text, _) in items.iter().filter(|(_, f)| *f) {
            src.push_str(&specialise(text, names, &[], g, &sizes));
            src.push('\n');
        }
    }
    src.push_str(&member_entry(name, "WG", GROUP_OF, |g| {
        format!("{body}_{g}(w - p.starts[g], li);")
    }));
    src
}
