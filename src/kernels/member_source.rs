//! WGSL for kernels that run several ranks' work in one dispatch (the
//! grouped small-M GEMV, the grouped one-token attention step): a program's
//! top-level items, and its functions copied once per member, each copy
//! reading that member's bindings and parameters. The copies are the one
//! program's code, so they compute its bits.

/// Top-level items of WGSL `src`, comments dropped: (text, is a plain
/// function). Entry points (`@compute` ...) are dropped too; the rest
/// (aliases, overrides) are kept once.
pub(crate) fn items(src: &str) -> Vec<(String, bool)> {
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

/// `src` with every call or definition of a function in `calls`, and
/// every use of a name in `globals`, suffixed `_g`, and each `p.field`
/// replaced by `param(field)` where that gives one.
pub(crate) fn specialise(
    src: &str,
    calls: &[String],
    globals: &[&str],
    g: usize,
    param: &dyn Fn(&str) -> Option<String>,
) -> String {
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
        // `p.field`: the field's name, where one follows.
        let field = after
            .strip_prefix('.')
            .map(|r| &r[..r.bytes().take_while(|&c| ident(c)).count()])
            .filter(|f| !f.is_empty());
        if let (true, Some(f)) = (word == "p", field)
            && let Some(rep) = param(f)
        {
            out.extend_from_slice(rep.as_bytes());
            i = src.len() - after.len() + 1 + f.len();
        } else if (after.starts_with('(') && calls.iter().any(|n| n == word))
            || globals.contains(&word)
        {
            out.extend_from_slice(format!("{word}_{g}").as_bytes());
        } else {
            out.extend_from_slice(word.as_bytes());
        }
    }
    String::from_utf8(out).unwrap_or_default()
}

/// The names of the plain functions among `items`.
pub(crate) fn function_names(items: &[(String, bool)]) -> Vec<String> {
    items
        .iter()
        .filter(|(_, f)| *f)
        .map(|(text, _)| text[3..].split('(').next().unwrap_or("").trim().to_string())
        .collect()
}

/// An entry `name` of `size` invocations a workgroup that finds its
/// workgroup's member `g` (member g's workgroups start at `p.starts[g]`,
/// `p.count` members) and runs `call(g)`, each member's call in a `switch`
/// case (the last one `default`).
pub(crate) fn member_entry(
    name: &str,
    size: &str,
    count: usize,
    call: impl Fn(usize) -> String,
) -> String {
    let cases: String = (0..count)
        .map(|g| {
            let label = if g + 1 == count {
                "default".to_string()
            } else {
                format!("case {g}u")
            };
            format!("        {label}: {{ {} }}\n", call(g))
        })
        .collect();
    format!(
        "
@compute @workgroup_size({size})
fn {name}(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
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
{cases}    }}
}}
"
    )
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
        let names = function_names(&it);
        assert_eq!(names, ["f", "g"]);
        let sizes = |f: &str| match f {
            "n" => Some("p.ns[2]".to_string()),
            "k" => Some("p.ks[2]".to_string()),
            _ => None,
        };
        assert_eq!(
            specialise(&it[1].0, &names, &[], 2, &sizes),
            "fn f_2(x: u32) -> u32 { return g_2(p.ns[2]) + p.ks[2]; }"
        );
        // Not a call, a field or a longer name: unchanged.
        assert_eq!(
            specialise("let f = q.g + fg(p.nn);", &names, &[], 1, &sizes),
            "let f = q.g + fg(p.nn);"
        );
        // Globals at every use (not as a field); every field of p.
        let all = |f: &str| Some(format!("p.m[1].{f}"));
        assert_eq!(
            specialise(
                "q4[i] = s.q4 + p.heads * p.d + p. x;",
                &[],
                &["q4"],
                1,
                &all
            ),
            "q4_1[i] = s.q4 + p.m[1].heads * p.m[1].d + p. x;"
        );
        let entry = member_entry("e", "64", 2, |g| format!("f_{g}(w - p.starts[g], li);"));
        assert!(
            entry.contains("case 0u: { f_0(w - p.starts[g], li); }"),
            "{entry}"
        );
        assert!(
            entry.contains("default: { f_1(w - p.starts[g], li); }"),
            "{entry}"
        );
    }
}
