//! What one file of `src/` says for the layout test: its `use`
//! declarations (grouped and nested forms as leaves), the `a::b` paths in
//! its code, its `mod child;` declarations and the names it mentions.

use std::collections::BTreeSet;

use super::lex::{Tok, lex};

/// One name a `use` brings in: its path and the name it is bound to (`None`
/// for a glob).
#[derive(Clone, Debug)]
pub(super) struct UseLeaf {
    pub(super) path: Vec<String>,
    pub(super) name: Option<String>,
}

/// The leaves of the use tree starting at `toks[*i]`, ending before `;`.
fn use_tree(toks: &[Tok], i: &mut usize, prefix: &[String], out: &mut Vec<UseLeaf>) {
    let mut path = prefix.to_vec();
    loop {
        match toks.get(*i) {
            Some(Tok::Ident(w)) if w == "as" => {
                *i += 1;
                if let Some(Tok::Ident(alias)) = toks.get(*i) {
                    *i += 1;
                    let name = (alias != "_").then(|| alias.clone());
                    out.push(UseLeaf { path, name });
                }
                return;
            }
            Some(Tok::Ident(w)) => {
                path.push(w.clone());
                *i += 1;
            }
            Some(Tok::Sep) => *i += 1,
            Some(Tok::Punct('*')) => {
                *i += 1;
                out.push(UseLeaf { path, name: None });
                return;
            }
            Some(Tok::Punct('{')) => {
                *i += 1;
                loop {
                    match toks.get(*i) {
                        Some(Tok::Punct('}')) => {
                            *i += 1;
                            return;
                        }
                        Some(Tok::Punct(',')) => *i += 1,
                        None => return,
                        _ => use_tree(toks, i, &path, out),
                    }
                }
            }
            _ => {
                // `self` in a group names the prefix itself.
                if path.last().is_some_and(|l| l == "self") {
                    path.pop();
                }
                if let Some(last) = path.last().cloned() {
                    out.push(UseLeaf {
                        path,
                        name: Some(last),
                    });
                }
                return;
            }
        }
    }
}

/// A `use` declaration of a file: its leaves, whether it is `pub` (in any
/// form), and the module (inline modules included) it sits in.
pub(super) struct UseDecl {
    pub(super) leaves: Vec<UseLeaf>,
    pub(super) public: bool,
    pub(super) module: Vec<String>,
}

/// What one file says: its `use` declarations, the paths in its code (with
/// the module each sits in), its `mod child;` declarations, and every
/// identifier its code (outside `use`) mentions.
#[derive(Default)]
pub(super) struct Parsed {
    pub(super) uses: Vec<UseDecl>,
    pub(super) paths: Vec<(Vec<String>, Vec<String>)>,
    pub(super) children: BTreeSet<String>,
    pub(super) mentioned: BTreeSet<String>,
}

/// Whether the tokens before an item end with `#[cfg(test)]`.
fn cfg_test(before: &[Tok]) -> bool {
    let want = [
        Tok::Punct('#'),
        Tok::Punct('['),
        Tok::Ident("cfg".into()),
        Tok::Punct('('),
        Tok::Ident("test".into()),
        Tok::Punct(')'),
        Tok::Punct(']'),
    ];
    before.ends_with(&want)
}

/// The index past the block whose `{` is at `open`.
fn past_block(toks: &[Tok], open: usize) -> usize {
    let mut depth = 0;
    for (j, t) in toks.iter().enumerate().skip(open) {
        match t {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
    }
    toks.len()
}

/// What a file imports and declares. Unit tests (`#[cfg(test)] mod … { }`)
/// are left out: they drive a file through the crate's public entry points,
/// which sit above it, and no library code depends on them.
pub(super) fn parse(src: &str, module: &[String]) -> Parsed {
    let toks = lex(src);
    let mut p = Parsed::default();
    // Inline modules open at a brace depth: (depth, name).
    let mut inline: Vec<(usize, String)> = Vec::new();
    let mut depth = 0usize;
    let here = |inline: &[(usize, String)]| {
        let mut m = module.to_vec();
        m.extend(inline.iter().map(|(_, n)| n.clone()));
        m
    };
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(d, _)| *d == depth) {
                    inline.pop();
                }
            }
            Tok::Ident(w) if w == "mod" => {
                if let Some(Tok::Ident(name)) = toks.get(i + 1) {
                    match toks.get(i + 2) {
                        Some(Tok::Punct(';')) if inline.is_empty() => {
                            p.children.insert(name.clone());
                        }
                        Some(Tok::Punct('{')) if cfg_test(&toks[..i]) => {
                            i = past_block(&toks, i + 2);
                            continue;
                        }
                        Some(Tok::Punct('{')) => {
                            inline.push((depth, name.clone()));
                            depth += 1;
                            i += 3;
                            continue;
                        }
                        _ => {}
                    }
                }
            }
            Tok::Ident(w) if w == "use" && toks.get(i + 1) != Some(&Tok::Punct('<')) => {
                let public = match i.checked_sub(1).map(|j| &toks[j]) {
                    Some(Tok::Ident(v)) if v == "pub" => true,
                    Some(Tok::Punct(')')) => (0..i)
                        .rev()
                        .take(6)
                        .any(|j| toks[j] == Tok::Ident("pub".into())),
                    _ => false,
                };
                let mut j = i + 1;
                let mut leaves = Vec::new();
                use_tree(&toks, &mut j, &[], &mut leaves);
                while j < toks.len() && toks[j] != Tok::Punct(';') {
                    j += 1;
                }
                p.uses.push(UseDecl {
                    leaves,
                    public,
                    module: here(&inline),
                });
                i = j + 1;
                continue;
            }
            Tok::Ident(w) => {
                p.mentioned.insert(w.clone());
                let starts = i == 0 || toks[i - 1] != Tok::Sep;
                if starts && toks.get(i + 1) == Some(&Tok::Sep) {
                    let mut seg = vec![w.clone()];
                    let mut j = i + 1;
                    while toks.get(j) == Some(&Tok::Sep) {
                        match toks.get(j + 1) {
                            Some(Tok::Ident(s)) => {
                                seg.push(s.clone());
                                j += 2;
                            }
                            _ => break,
                        }
                    }
                    p.paths.push((seg, here(&inline)));
                }
            }
            _ => {}
        }
        i += 1;
    }
    p
}
