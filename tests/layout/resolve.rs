//! The layout test's graph: each file of `src/` as a module, and each path
//! it imports resolved to the files that define what it names (through a
//! parent's re-exports and imports).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use super::parse::{Parsed, parse};

/// File → the files it imports.
pub(super) type Graph = BTreeMap<usize, BTreeSet<usize>>;

/// The crate's files, modules and what they import.
pub(super) struct Crate {
    files: Vec<PathBuf>,
    parsed: Vec<Parsed>,
    /// Module path (`a::b`) → the files that define it (more than one where
    /// `#[path]` picks between them by feature).
    modules: HashMap<Vec<String>, Vec<usize>>,
    /// Per file, the module it is.
    module_of: Vec<Vec<String>>,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module a file under `src` is by its place (`a/b.rs`, `a/b/mod.rs`:
/// `a::b`; `lib.rs`: the root).
fn module_by_place(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts
}

impl Crate {
    pub(super) fn read(src: &Path) -> Crate {
        let mut files = Vec::new();
        rust_files(src, &mut files);
        files.sort();
        let texts: Vec<String> = files
            .iter()
            .map(|f| std::fs::read_to_string(f).unwrap())
            .collect();
        let mut module_of: Vec<Vec<String>> = files
            .iter()
            .map(|f| module_by_place(f.strip_prefix(src).unwrap()))
            .collect();
        // `#[path = "x.rs"] mod m;`: x.rs is module m of the declaring file.
        for (d, text) in texts.iter().enumerate() {
            for (at, _) in text.match_indices("#[path = \"") {
                let rest = &text[at + 10..];
                let Some(end) = rest.find('"') else { continue };
                let target = files[d].parent().unwrap().join(&rest[..end]);
                let after = &rest[end..];
                let Some(m) = after.find("mod ") else {
                    continue;
                };
                let name: String = after[m + 4..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if let Some(t) = files.iter().position(|f| *f == target) {
                    let mut module = module_of[d].clone();
                    module.push(name);
                    module_of[t] = module;
                }
            }
        }
        let parsed = texts
            .iter()
            .zip(&module_of)
            .map(|(t, m)| parse(t, m))
            .collect();
        let mut modules: HashMap<Vec<String>, Vec<usize>> = HashMap::new();
        for (i, m) in module_of.iter().enumerate() {
            modules.entry(m.clone()).or_default().push(i);
        }
        Crate {
            files,
            parsed,
            modules,
            module_of,
        }
    }

    /// `seg` written in module `at` as an absolute module path, or `None`
    /// for another crate's (`std::…`, `wgpu::…`).
    fn absolute(&self, seg: &[String], at: &[String]) -> Option<Vec<String>> {
        let first = seg.first()?;
        let (mut base, mut rest) = match first.as_str() {
            "crate" | "$crate" => (vec![], &seg[1..]),
            "self" => (at.to_vec(), &seg[1..]),
            "super" => (at.to_vec(), seg),
            _ => {
                let mut child = at.to_vec();
                child.push(first.clone());
                if !self.modules.contains_key(&child) {
                    return None;
                }
                (at.to_vec(), seg)
            }
        };
        while rest.first().is_some_and(|s| s == "super") {
            base.pop()?;
            rest = &rest[1..];
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The files an absolute path names: the module it ends in, or the file
    /// defining the item it ends with (through re-exports).
    fn files_of(&self, path: &[String], depth: usize) -> Vec<usize> {
        let mut m: Vec<String> = Vec::new();
        for (k, s) in path.iter().enumerate() {
            let mut child = m.clone();
            child.push(s.clone());
            if self.modules.contains_key(&child) {
                m = child;
                continue;
            }
            // `s` is an item of module `m` (`path[k + 1..]` its members).
            let Some(files) = self.modules.get(&m) else {
                return vec![];
            };
            if depth < 16 {
                let mut through = Vec::new();
                for &f in files {
                    // A parent's imports are its children's too: a name
                    // reached through one is the defining file's.
                    for u in self.parsed[f].uses.iter().filter(|u| u.module == m) {
                        for leaf in &u.leaves {
                            if leaf.name.as_deref() == Some(s.as_str())
                                && let Some(abs) = self.absolute(&leaf.path, &u.module)
                            {
                                through.extend(self.files_of(&abs, depth + 1));
                            }
                        }
                    }
                }
                if !through.is_empty() {
                    let _ = k;
                    return through;
                }
            }
            return files.clone();
        }
        self.modules.get(&m).cloned().unwrap_or_default()
    }

    /// Whether module `m` has child modules (a parent whose `pub use` lines
    /// re-export rather than use).
    fn is_parent(&self, f: usize) -> bool {
        let m = &self.module_of[f];
        self.modules
            .keys()
            .any(|k| k.len() == m.len() + 1 && k.starts_with(m))
    }

    /// Edges file → files it imports, with the first path that made each.
    pub(super) fn graph(&self) -> (Graph, HashMap<(usize, usize), String>) {
        let mut g: Graph = BTreeMap::new();
        let mut why: HashMap<(usize, usize), String> = HashMap::new();
        for (f, p) in self.parsed.iter().enumerate() {
            let edges = g.entry(f).or_default();
            let mut add = |to: Vec<usize>, path: &[String]| {
                for t in to {
                    edges.insert(t);
                    why.entry((f, t)).or_insert_with(|| path.join("::"));
                }
            };
            // Names bound by `use` in this file: name → absolute path.
            let mut bound: HashMap<String, Vec<String>> = HashMap::new();
            for u in &p.uses {
                for leaf in &u.leaves {
                    let Some(abs) = self.absolute(&leaf.path, &u.module) else {
                        continue;
                    };
                    if let Some(name) = &leaf.name {
                        bound.insert(name.clone(), abs.clone());
                    }
                    // A parent's re-export is no use of its own unless its
                    // code names it; a module brought in by name is used
                    // through its paths (below).
                    let names_module = self.modules.contains_key(&abs);
                    let reexport = u.public
                        && self.is_parent(f)
                        && !leaf.name.as_ref().is_some_and(|n| p.mentioned.contains(n));
                    if reexport || (names_module && leaf.name.is_some()) {
                        continue;
                    }
                    add(self.files_of(&abs, 0), &leaf.path);
                }
            }
            for (seg, at) in &p.paths {
                let abs = match bound.get(&seg[0]) {
                    Some(b) if !matches!(seg[0].as_str(), "crate" | "self" | "super") => {
                        let mut full = b.clone();
                        full.extend(seg[1..].iter().cloned());
                        Some(full)
                    }
                    _ => self.absolute(seg, at),
                };
                if let Some(abs) = abs {
                    add(self.files_of(&abs, 0), seg);
                }
            }
            g.get_mut(&f).unwrap().remove(&f);
        }
        (g, why)
    }

    pub(super) fn name(&self, f: usize) -> String {
        let s = self.files[f].to_string_lossy();
        s[s.find("src/").unwrap_or(0)..].to_string()
    }
}
