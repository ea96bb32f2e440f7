//! The crate's files import one another without loops: every `src/**/*.rs`
//! is read, its `use crate::…`, `use super::…`, `use child::…` (grouped
//! `use a::{b, c::d}` forms too) and the `crate::…::`, `super::…::`,
//! `self::…::` and `child::…::` paths in its code are resolved to the files
//! that define what they name, and the graph of files must have no cycle.
//! A parent module declaring `mod child;` is no import; a name a parent
//! re-exports (`pub use child::Item`) counts as an import of the file that
//! defines it. Resolution is approximate but errs towards edges: a loop
//! reported here is a loop to untangle by moving what both files share into
//! a file below them.
//!
//! Files: `lex.rs` (tokens), `parse.rs` (what a file says), `resolve.rs`
//! (modules, paths to files, the graph); this one finds and prints loops.

mod lex;
mod parse;
mod resolve;

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use resolve::{Crate, Graph};

/// The strongly connected components of more than one file (Tarjan).
fn loops(g: &Graph) -> Vec<Vec<usize>> {
    struct T<'a> {
        g: &'a Graph,
        index: HashMap<usize, usize>,
        low: HashMap<usize, usize>,
        stack: Vec<usize>,
        on: BTreeSet<usize>,
        out: Vec<Vec<usize>>,
    }
    fn visit(t: &mut T, v: usize) {
        let i = t.index.len();
        t.index.insert(v, i);
        t.low.insert(v, i);
        t.stack.push(v);
        t.on.insert(v);
        for &w in t.g.get(&v).into_iter().flatten() {
            if !t.index.contains_key(&w) {
                visit(t, w);
                let lw = t.low[&w];
                let lv = t.low.get_mut(&v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(&w) {
                let iw = t.index[&w];
                let lv = t.low.get_mut(&v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[&v] == t.index[&v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(&w);
                comp.push(w);
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for &v in g.keys() {
        if !t.index.contains_key(&v) {
            visit(&mut t, v);
        }
    }
    t.out
}

/// One cycle through `start` inside `comp` (breadth-first, shortest).
fn cycle(g: &Graph, comp: &[usize], start: usize) -> Vec<usize> {
    let inside: BTreeSet<usize> = comp.iter().copied().collect();
    let mut prev: HashMap<usize, usize> = HashMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for &w in &g[&v] {
            if !inside.contains(&w) {
                continue;
            }
            if w == start {
                let mut path = vec![start];
                let mut at = v;
                while at != start {
                    path.push(at);
                    at = prev[&at];
                }
                path.push(start);
                let n = path.len();
                path[1..n - 1].reverse();
                return path;
            }
            if let std::collections::hash_map::Entry::Vacant(e) = prev.entry(w) {
                e.insert(v);
                queue.push_back(w);
            }
        }
    }
    vec![start]
}

/// Every import loop of the files under `src`, each as `a.rs → b.rs → a.rs`.
fn import_loops(src: &Path) -> Vec<String> {
    let krate = Crate::read(src);
    let (g, why) = krate.graph();
    loops(&g)
        .into_iter()
        .map(|comp| {
            let start = *comp.iter().min().unwrap();
            let ring = cycle(&g, &comp, start);
            let mut names = vec![krate.name(ring[0])];
            for w in ring.windows(2) {
                names.push(format!("({}) {}", why[&(w[0], w[1])], krate.name(w[1])));
            }
            let mut all: Vec<String> = comp.iter().map(|&f| krate.name(f)).collect();
            all.sort();
            format!("{} (all of: {})", names.join(" → "), all.join(", "))
        })
        .collect()
}

#[test]
fn no_import_loops_between_files_of_src() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found: Vec<String> = import_loops(&src);
    assert!(
        found.is_empty(),
        "import loops between files of src/ (move what both sides share into a file below \
         them):\n{}",
        found.join("\n")
    );
}

/// The resolver sees the forms loops hide behind: grouped and nested
/// `use`, `super::`, re-exports of a parent, a child module named from its
/// parent, and a path in code.
#[test]
fn the_resolver_finds_loops_in_every_form() {
    let dir = std::env::temp_dir().join(format!("wgpu-tp-layout-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let write = |rel: &str, text: &str| {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write(
        "lib.rs",
        "mod a;\nmod b;\npub use a::{x::{X, Y as Z}, y};\n",
    );
    write("a/mod.rs", "pub mod x;\npub mod y;\npub use x::X;\n");
    // x → y through a parent's re-export, y → x through a path in code.
    write(
        "a/x.rs",
        "use super::{y::{self, Q}};\npub struct X;\npub struct Y;\n",
    );
    write(
        "a/y.rs",
        "// use crate::b::B; (a comment is no import)\npub struct Q;\nfn f() { let s = \"crate::b::B\"; let _ = crate::a::X; }\n",
    );
    write("b.rs", "pub struct B;\nfn g() -> char { '{' }\n");
    let found = import_loops(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("src/a/x.rs") || found[0].contains("a/x.rs"),
        "{found:?}"
    );
    assert!(!found[0].contains("b.rs"), "{found:?}");
}
