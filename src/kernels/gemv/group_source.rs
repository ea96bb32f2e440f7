//! The grouped program's WGSL (`group.rs`): the one-product program's
//! functions copied once per member, each copy reading its member's
//! bindings and sizes, and an entry that enters its workgroup's member
//! once. The copies are the one-product code, so the same bits. A member's
//! bias and its multiplier (`acc_at`) share its third binding. A switch
//! on the member at every load instead made lavapipe's loads a third
//! slower than the product alone (BENCHMARKS.md, round 31).

use super::GROUP_OF;
use super::loads::{A_VEC4, B_VEC4, B_VEC8_BF16};

/// Top-level items of WGSL `src`, comments dropped: (text, is a plain
/// function). Entry points (`@compute` ...) are dropped too; the rest
/// (aliases, overrides) are kept once.
fn items(src: &str) -> Vec<(String, bool)> {
    // Without comments, braces and semicolons are the code's own.
    let code: String = src
        .lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = Vec::new();
    let mut rest = code.as_str();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            return out;
        }
        let entry = rest.starts_with("@compute");
        let braced = entry || rest.starts_with("fn ") || rest.starts_with("struct ");
        let end = if braced {
            let open = rest.find('{').unwrap_or(rest.len());
            let mut depth = 0usize;
            let mut end = rest.len();
            for (i, ch) in rest[open..].char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = open + i + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            end
        } else {
            rest.find(';').map_or(rest.len(), |i| i + 1)
        };
        if !entry {
            out.push((rest[..end].to_string(), rest.starts_with("fn ")));
        }
        rest = &rest[end..];
    }
}

/// `src` with every call or definition of a function in `names` suffixed
/// `_g`, and `p.n`, `p.k` (one product's sizes) read as member g's.
fn specialise(src: &str, names: &[String], g: usize) -> String {
    // Bytes: comments inside functions may hold any UTF-8, and only ASCII
    // is inserted.
    let mut out: Vec<u8> = Vec::with_capacity(src.len() + 64);
    let b = src.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < b.len() {
        if !ident(b[i]) || (i > 0 && (ident(b[i - 1]) || b[i - 1] == b'.')) {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && ident(b[i]) {
            i += 1;
        }
        let word = &src[start..i];
        let after = src[i..].trim_start();
        let size = |f: &str| {
            after
                .strip_prefix(f)
                .is_some_and(|r| !r.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_'))
        };
        if word == "p" && (size(".n") || size(".k")) {
            let field = if size(".n") { "ns" } else { "ks" };
            out.extend_from_slice(format!("p.{field}[{g}]").as_bytes());
            i = src.len() - after.len() + 2;
        } else if after.starts_with('(') && names.iter().any(|n| n == word) {
            out.extend_from_slice(format!("{word}_{g}").as_bytes());
        } else {
            out.extend_from_slice(word.as_bytes());
        }
    }
    String::from_utf8(out).unwrap_or_default()
}

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
    for (text, _) in items.iter().filter(|(_, f)| *f) {
        let name = text[3..].split('(').next().unwrap_or("").trim();
        names.push(name.to_string());
    }
    let mut src = format!(
        "alias AIn = f32;\nalias BIn = {ty};\nalias COut = f32;\n{}",
        include_str!("../../../shaders/gemv_group.wgsl")
    );
    for (text, _) in items.iter().filter(|(_, f)| !*f) {
        src.push_str(text);
        src.push('\n');
    }
    for g in 0..GROUP_OF {
        src.push_str(&format!(
            "fn a_ld_{g}(i: u32) -> AV {{ return a{g}[i]; }}
fn b_ld_{g}(i: u32) -> BV {{ return b{g}[i]; }}
fn bias_at_{g}(n: u32) -> f32 {{ return bias{g}[n]; }}
fn acc_at_{g}(i: u32) -> f32 {{ return bias{g}[i]; }}
fn put_{g}(i: u32, v: COut) {{ c{g}[i] = v; }}
"
        ));
        for (text, _) in items.iter().filter(|(_, f)| *f) {
            src.push_str(&specialise(text, &names, g));
            src.push('\n');
        }
    }
    let calls: String = (0..GROUP_OF)
        .map(|g| {
            let label = if g + 1 == GROUP_OF {
                "default".to_string()
            } else {
                format!("case {g}u")
            };
            format!("        {label}: {{ {body}_{g}(w - p.starts[g], li); }}\n")
        })
        .collect();
    src.push_str(&format!(
        "
@compute @workgroup_size(WG)
fn gemv_{body}_group(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32) {{
    let w = wg.y * nwg.x + wg.x;
    // The member whose workgroups hold w: the same for every invocation.
    var g = 0u;
    for (var i = 1u; i < p.count; i++) {{
        if (w >= p.starts[i]) {{
            g = i;
        }}
    }}
    switch g {{
{calls}    }}
}}
"
    ));
    src
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_are_copied_per_member_and_entries_dropped() {
        let src = "alias AV = f32;\n// note {\nfn f(x: u32) -> u32 { return g(p.n) + p.k; } // }\n\
                   @compute @workgroup_size(1)\nfn e() { f(1u); }\nfn g(y: u32) -> u32 { return y; }\n";
        let it = items(src);
        assert_eq!(it.len(), 3, "{it:?}");
        assert_eq!(it[0], ("alias AV = f32;".to_string(), false));
        let names = vec!["f".to_string(), "g".to_string()];
        assert_eq!(
            specialise(&it[1].0, &names, 2),
            "fn f_2(x: u32) -> u32 { return g_2(p.ns[2]) + p.ks[2]; }"
        );
        // Not a call, a field or a longer name: unchanged.
        assert_eq!(
            specialise("let f = q.g + fg(p.nn);", &names, 1),
            "let f = q.g + fg(p.nn);"
        );
    }
}
