//! The sandbox around an untrusted chat template, part one: the template
//! is rewritten before minijinja compiles it, so that whatever can make a
//! value grow goes through a size-checked call (`guards.rs`; the bounds are
//! [`ChatLimits`](super::ChatLimits), the checks `limits.rs`).
//!
//! minijinja has no hook on its operators, so the rewrite (through its own
//! parser, whose spans are byte offsets into the text) turns them into
//! calls: `a ~ b ~ c` into `__sandbox_concat(a , b , c)`, and likewise `+`
//! and `*`. Constant folding at compile time goes with them: `'a' * 10**9`
//! is no longer computed by [`ChatTemplate::new`](super::ChatTemplate::new).
//! Slices and function or macro calls get `|__sandbox_made`, which charges
//! what they made; each `{% for %}` tells its iterable how many bytes of
//! literal text one pass of its body writes, charged per item (text written
//! into `{% set %}` blocks and macro bodies has no other hook), and so does
//! a recursive loop's `loop(...)`; and `{% set ns.attr = value %}` stores
//! through `__sandbox_store`, which refuses values nested deeper than
//! `limits::MAX_NESTING` or holding a namespace, so that no namespace can
//! hold itself (comparing or printing it would overflow the stack).
//! Whatever minijinja compares or hashes (the operands of `==`, `<`, `in`
//! and the other comparisons, a test's value and arguments, a computed
//! key or subscript, a method's arguments, a list or map spread into a
//! call with `*` or `**`) becomes `((x)|__sandbox_cmp)`,
//! which charges walking it: minijinja compares lists item by item and
//! strings byte by byte, so two lists sharing their parts (`[a, a]`,
//! sixty times over) compare in 2^60 steps and a long string compared in
//! a loop costs its length each time. Likewise what is indexed or sliced
//! becomes `((x)|__sandbox_indexed)[i]`, which charges a string's bytes
//! (minijinja finds a string's `i`-th character by walking it).
//! `include`, `import` and `extends` are refused (transformers' environment
//! has no loader either).
//!
//! A macro's or `{% call %}`'s body gets `{% do __sandbox_charge(N) %}`
//! right after its opening tag (with that tag's whitespace control), N
//! being the literal text one call writes. Tests wrap their value in
//! `__sandbox_indexed` too (`is lower` reads a string whole).
//!
//! Before parsing, each tag may hold at most [`MAX_OPERATORS`] operators:
//! minijinja's parser and compiler recurse once per operator of a chain,
//! and about 6 000 overflow a 2 MiB thread stack.
//!
//! The rewritten text is parsed again and checked to hold exactly the
//! calls made and none of the operators; a template that fails this is
//! refused rather than run unchecked.

use minijinja::machinery::{self, WhitespaceConfig, ast};
use minijinja::syntax::SyntaxConfig;
use minijinja::{Error, ErrorKind};

/// The filter a rewritten `{% for %}` passes its iterable through
/// (`source.rs` rewrites the loops, this file keeps it when it rewrites
/// the operators).
pub(super) const ITERABLE: &str = "__jinja2_iterable";

/// The most operators one tag may hold (real templates: under 30).
pub(super) const MAX_OPERATORS: usize = 1000;

pub(super) const CONCAT: &str = "__sandbox_concat";
pub(super) const ADD: &str = "__sandbox_add";
pub(super) const MUL: &str = "__sandbox_mul";
pub(super) const MADE: &str = "__sandbox_made";
pub(super) const STORE: &str = "__sandbox_store";
pub(super) const CMP: &str = "__sandbox_cmp";
pub(super) const INDEXED: &str = "__sandbox_indexed";
pub(super) const CHARGE: &str = "__sandbox_charge";
const PREFIX: &str = "__sandbox_";
/// The text the iterable filter names a recursive `loop(...)` call by.
const LOOP_CALL: &str = "loop(...)";

fn refuse(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::SyntaxError, message.into())
}

/// Refuses a tag of more than [`MAX_OPERATORS`] operators, before anything
/// parses the text.
pub(super) fn check_operators(text: &str) -> Result<(), Error> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i + 1 < bytes.len() {
        if bytes[i] == b'{' && matches!(bytes[i + 1], b'{' | b'%') {
            let start = i;
            i += 2;
            let mut count = 0usize;
            let mut quote: Option<u8> = None;
            let mut word = String::new();
            while i < bytes.len() {
                let c = bytes[i];
                if let Some(q) = quote {
                    if c == b'\\' {
                        i += 1;
                    } else if c == q {
                        quote = None;
                    }
                    i += 1;
                    continue;
                }
                if c.is_ascii_alphanumeric() || c == b'_' {
                    word.push(c as char);
                    i += 1;
                    continue;
                }
                if matches!(
                    word.as_str(),
                    "not" | "and" | "or" | "is" | "if" | "else" | "in"
                ) {
                    count += 1;
                }
                word.clear();
                match c {
                    b'\'' | b'"' => quote = Some(c),
                    b'%' | b'}' if bytes.get(i + 1) == Some(&b'}') => break,
                    b'-' | b'+' | b'*' | b'/' | b'%' | b'~' | b'.' | b'|' | b'(' | b'[' | b'{'
                    | b'<' | b'>' | b'=' | b'!' => count += 1,
                    _ => {}
                }
                i += 1;
            }
            if count > MAX_OPERATORS {
                let line = text[..start].matches('\n').count() + 1;
                return Err(refuse(format!(
                    "a tag with more than {MAX_OPERATORS} operators (line {line}); a chain that long would overflow the stack of minijinja's parser"
                )));
            }
        }
        i += 1;
    }
    Ok(())
}

/// Jinja's syntax. A unit struct unless some crate turns on minijinja's
/// `custom_syntax`, when it has fields: `default()` builds it either way.
#[allow(clippy::default_constructed_unit_structs)]
fn syntax() -> SyntaxConfig {
    SyntaxConfig::default()
}

/// The whitespace settings of the environment (`compat::environment`).
fn whitespace() -> WhitespaceConfig {
    WhitespaceConfig {
        keep_trailing_newline: false,
        lstrip_blocks: true,
        trim_blocks: true,
    }
}

/// `text` rewritten as the module doc says, or why it cannot be.
pub(super) fn rewrite(text: &str) -> Result<String, Error> {
    check_operators(text)?;
    let parsed = machinery::parse(text, "chat_template", syntax(), whitespace())?;
    let mut pass = Pass::new(text, true);
    pass.stmt(&parsed);
    if let Some(e) = pass.error.take() {
        return Err(e);
    }
    let expected = pass.stats;
    let mut edits = pass.edits;
    edits.sort_by_key(|e| (e.at, e.class, e.order));
    let mut out = String::with_capacity(text.len() + edits.len() * 16);
    let mut at = 0;
    for edit in &edits {
        out.push_str(&text[at..edit.at]);
        out.push_str(&edit.text);
        at = edit.at + edit.delete;
    }
    out.push_str(&text[at..]);
    // Parse the result and check it is what was meant.
    let unsure = |why: String| {
        refuse(format!(
            "the template could not be rewritten to render within limits ({why}); please report it"
        ))
    };
    let again = machinery::parse(&out, "chat_template", syntax(), whitespace())
        .map_err(|e| unsure(e.to_string()))?;
    let mut check = Pass::new(&out, false);
    check.stmt(&again);
    if let Some(e) = check.error {
        return Err(unsure(e.to_string()));
    }
    if check.stats != expected {
        return Err(unsure(format!(
            "expected {expected:?}, found {:?}",
            check.stats
        )));
    }
    Ok(out)
}

/// One text edit: at byte `at`, delete `delete` bytes and insert `text`.
/// At one offset, closing inserts go first (inner before outer), then
/// opening ones (outer before inner), then the replacement.
struct Edit {
    at: usize,
    class: u8,
    order: i64,
    delete: usize,
    text: String,
}

/// What a pass made (rewriting) or found (checking).
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
struct Stats {
    /// Operator chains turned into calls.
    chains: usize,
    /// Operators `~ + *` left as operators.
    operators: usize,
    /// `|__sandbox_made` filters.
    made: usize,
    /// `__sandbox_store(...)` calls.
    stores: usize,
    /// `{% for %}` iterables charged per item.
    charged_loops: usize,
    /// Recursive `loop(...)` calls charged per item.
    charged_recursions: usize,
    /// Compared or hashed operands behind `|__sandbox_cmp`.
    compared: usize,
    /// Indexed or sliced values behind `|__sandbox_indexed`.
    indexed: usize,
    /// Macro and call-block bodies charged per call.
    charged_macros: usize,
}

struct Pass<'s> {
    src: &'s str,
    rewriting: bool,
    edits: Vec<Edit>,
    stats: Stats,
    /// Literal bytes per pass of each enclosing loop's body; `None` for a
    /// loop that is not recursive.
    loops: Vec<Option<usize>>,
    error: Option<Error>,
}

/// Where an expression sits, for whether `|filter` may follow it.
#[derive(Clone, Copy, PartialEq)]
enum Place {
    /// Anywhere a filter may be appended.
    Free,
    /// Before `.x`, `[i]` or `(args)`: `a[1:]|f.x` would name filter `f.x`.
    Postfixed,
    /// The call of `{% do %}` or `{% call %}`, which must stay a call.
    Statement,
}

fn op_name(op: &ast::BinOpKind) -> Option<(&'static str, u8)> {
    match op {
        ast::BinOpKind::Concat => Some((CONCAT, b'~')),
        ast::BinOpKind::Add => Some((ADD, b'+')),
        ast::BinOpKind::Mul => Some((MUL, b'*')),
        _ => None,
    }
}

/// `==`, `!=`, `<`, `<=`, `>`, `>=` and `in` (minijinja's parser makes a
/// lone comparison a `BinOp`, a chain of them a `Compare`).
fn is_comparison(op: &ast::BinOpKind) -> bool {
    use ast::BinOpKind as K;
    matches!(op, K::Eq | K::Ne | K::Lt | K::Lte | K::Gt | K::Gte | K::In)
}

/// Where `e`'s text starts: minijinja's spans of `a.b`, `a[i]`, `a(x)`
/// and `a|f` start at the `.`, `[`, `(` or `|`.
fn start_of(e: &ast::Expr) -> u32 {
    use ast::Expr as E;
    let inner = match e {
        E::GetAttr(g) => Some(&g.expr),
        E::GetItem(g) => Some(&g.expr),
        E::Slice(s) => Some(&s.expr),
        E::Call(c) => Some(&c.expr),
        E::Filter(f) => f.expr.as_ref(),
        E::Test(t) => Some(&t.expr),
        E::BinOp(b) => Some(&b.left),
        E::Compare(c) => Some(&c.expr),
        E::IfExpr(i) => Some(&i.true_expr),
        _ => None,
    };
    let own = e.span().start_offset;
    inner.map_or(own, |i| own.min(start_of(i)))
}

/// Where the `%}` closing the first tag of `text` starts, outside string
/// literals.
fn source_tag_end(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while i + 1 < bytes.len() {
        match (quote, bytes[i]) {
            (Some(_), b'\\') => i += 1,
            (Some(q), c) if c == q => quote = None,
            (None, b'\'' | b'"') => quote = Some(bytes[i]),
            (None, b'%') if bytes[i + 1] == b'}' => return Some(i),
            _ => {}
        }
        i += 1;
    }
    None
}

fn arg_expr<'a>(a: &'a ast::CallArg<'a>) -> &'a ast::Expr<'a> {
    match a {
        ast::CallArg::Pos(e)
        | ast::CallArg::Kwarg(_, e)
        | ast::CallArg::PosSplat(e)
        | ast::CallArg::KwargSplat(e) => e,
    }
}

fn same_op(a: &ast::BinOpKind, b: &ast::BinOpKind) -> bool {
    op_name(a).map(|x| x.0) == op_name(b).map(|x| x.0)
}

/// Literal text one pass of `body` writes, at most.
fn raw_bytes(body: &[ast::Stmt]) -> usize {
    body.iter().map(raw_bytes_of).sum()
}

fn raw_bytes_of(stmt: &ast::Stmt) -> usize {
    use ast::Stmt as S;
    match stmt {
        S::Template(s) => raw_bytes(&s.children),
        S::EmitRaw(s) => s.raw.len(),
        S::ForLoop(s) => raw_bytes(&s.body) + raw_bytes(&s.else_body),
        S::IfCond(s) => raw_bytes(&s.true_body) + raw_bytes(&s.false_body),
        S::WithBlock(s) => raw_bytes(&s.body),
        S::SetBlock(s) => raw_bytes(&s.body),
        S::AutoEscape(s) => raw_bytes(&s.body),
        S::FilterBlock(s) => raw_bytes(&s.body),
        S::Block(s) => raw_bytes(&s.body),
        S::Macro(s) => raw_bytes(&s.body),
        S::CallBlock(s) => raw_bytes(&s.macro_decl.body),
        _ => 0,
    }
}

fn has_attr_target(target: &ast::Expr) -> bool {
    match target {
        ast::Expr::GetAttr(_) => true,
        ast::Expr::List(l) => l.items.iter().any(has_attr_target),
        _ => false,
    }
}

impl<'s> Pass<'s> {
    fn new(src: &'s str, rewriting: bool) -> Pass<'s> {
        Pass {
            src,
            rewriting,
            edits: Vec::new(),
            stats: Stats::default(),
            loops: Vec::new(),
            error: None,
        }
    }

    fn fail(&mut self, message: String) {
        if self.error.is_none() {
            self.error = Some(refuse(message));
        }
    }

    fn line_of(&self, offset: u32) -> usize {
        self.src[..offset as usize].matches('\n').count() + 1
    }

    fn insert(&mut self, at: u32, class: u8, order: i64, text: impl Into<String>) {
        self.edits.push(Edit {
            at: at as usize,
            class,
            order,
            delete: 0,
            text: text.into(),
        });
    }

    /// The first byte at or after `from` that is not whitespace or `)`.
    fn skip_closers(&self, from: u32) -> usize {
        let bytes = self.src.as_bytes();
        let mut i = from as usize;
        while i < bytes.len() && (bytes[i].is_ascii_whitespace() || bytes[i] == b')') {
            i += 1;
        }
        i
    }

    fn stmts(&mut self, body: &[ast::Stmt]) {
        for s in body {
            self.stmt(s);
        }
    }

    fn stmt(&mut self, stmt: &ast::Stmt) {
        use ast::Stmt as S;
        match stmt {
            S::Template(s) => self.stmts(&s.children),
            S::EmitExpr(s) => self.expr(&s.expr, 0, Place::Free),
            S::EmitRaw(_) | S::Continue(_) | S::Break(_) => {}
            S::ForLoop(s) => {
                if has_attr_target(&s.target) {
                    let line = self.line_of(s.span().start_offset);
                    self.fail(format!("`{{% for %}}` assigns to an attribute (line {line}), which jinja2 does not allow either"));
                }
                self.for_iter(&s.iter, raw_bytes(&s.body));
                if let Some(f) = &s.filter_expr {
                    self.expr(f, 0, Place::Free);
                }
                self.loops.push(s.recursive.then(|| raw_bytes(&s.body)));
                self.stmts(&s.body);
                self.loops.pop();
                self.stmts(&s.else_body);
            }
            S::IfCond(s) => {
                self.expr(&s.expr, 0, Place::Free);
                self.stmts(&s.true_body);
                self.stmts(&s.false_body);
            }
            S::WithBlock(s) => {
                for (target, value) in &s.assignments {
                    if has_attr_target(target) {
                        let line = self.line_of(s.span().start_offset);
                        self.fail(format!("`{{% with %}}` assigns to an attribute (line {line}), which jinja2 does not allow either"));
                    }
                    self.expr(value, 0, Place::Free);
                }
                self.stmts(&s.body);
            }
            S::Set(s) => {
                if has_attr_target(&s.target) {
                    self.store(s);
                }
                self.expr(&s.expr, 1, Place::Free);
            }
            S::SetBlock(s) => {
                if let Some(f) = &s.filter {
                    self.expr(f, 0, Place::Free);
                }
                self.stmts(&s.body);
            }
            S::AutoEscape(s) => {
                self.expr(&s.enabled, 0, Place::Free);
                self.stmts(&s.body);
            }
            S::FilterBlock(s) => {
                self.expr(&s.filter, 0, Place::Free);
                self.stmts(&s.body);
            }
            S::Block(s) => self.stmts(&s.body),
            S::Import(s) => self.no_loader("import", s.span().start_offset),
            S::FromImport(s) => self.no_loader("from ... import", s.span().start_offset),
            S::Extends(s) => self.no_loader("extends", s.span().start_offset),
            S::Include(s) => self.no_loader("include", s.span().start_offset),
            S::Macro(s) => {
                for e in s.args.iter().chain(&s.defaults) {
                    self.expr(e, 0, Place::Free);
                }
                self.charge_body(s.span().start_offset, &s.body);
                // A macro's body runs when called, not in the enclosing loop.
                let loops = std::mem::take(&mut self.loops);
                self.stmts(&s.body);
                self.loops = loops;
            }
            S::CallBlock(s) => {
                self.call(&s.call, s.call.span(), 0, Place::Statement);
                for e in s.macro_decl.args.iter().chain(&s.macro_decl.defaults) {
                    self.expr(e, 0, Place::Free);
                }
                self.charge_body(s.span().start_offset, &s.macro_decl.body);
                let loops = std::mem::take(&mut self.loops);
                self.stmts(&s.macro_decl.body);
                self.loops = loops;
            }
            S::Do(s) => self.call(&s.call, s.call.span(), 0, Place::Statement),
        }
    }

    /// A macro's or `{% call %}`'s body writes its literal text on every
    /// call (into a `{% set %}` block, say, which has no other hook): a
    /// `{% do __sandbox_charge(N) %}` right after the opening tag (which
    /// starts at or after `from`) charges it. The tag keeps the opening
    /// tag's whitespace control, so the output is unchanged.
    fn charge_body(&mut self, from: u32, body: &[ast::Stmt]) {
        let raw = raw_bytes(body);
        if !self.rewriting || raw == 0 {
            return;
        }
        let Some(end) = source_tag_end(&self.src[from as usize..]) else {
            let line = self.line_of(from);
            self.fail(format!("could not find the end of the tag on line {line}"));
            return;
        };
        let close = from as usize + end;
        let trim = match self.src.as_bytes()[close - 1] {
            b'-' => "-",
            b'+' => "+",
            _ => "",
        };
        let dash = if trim == "-" { "-" } else { "" };
        self.insert(
            (close + 2) as u32,
            1,
            i64::MIN,
            format!("{{%{dash} do {CHARGE}({raw}) {trim}%}}"),
        );
        self.stats.charged_macros += 1;
    }

    fn no_loader(&mut self, what: &str, at: u32) {
        let line = self.line_of(at);
        self.fail(format!(
            "`{{% {what} %}}` (line {line}) needs other templates, and chat templates have none (transformers' environment has no loader either)"
        ));
    }

    /// `{% set ns.attr = value %}`: `value` becomes `__sandbox_store(value)`.
    fn store(&mut self, s: &ast::Spanned<ast::Set>) {
        if !self.rewriting {
            return;
        }
        let bytes = self.src.as_bytes();
        let mut i = s.target.span().end_offset as usize;
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if bytes.get(i) != Some(&b'=') {
            let line = self.line_of(s.span().start_offset);
            self.fail(format!(
                "could not find the `=` of a `{{% set %}}` (line {line})"
            ));
            return;
        }
        i += 1;
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let end = s.span().end_offset;
        self.insert(i as u32, 1, 0, format!("{STORE}("));
        self.insert(end, 0, 0, ")");
        self.stats.stores += 1;
    }

    /// A `{% for %}`'s iterable, `(EXPR)|__jinja2_iterable("EXPR")` after
    /// `source::rewrite`: given the body's literal bytes as a second argument.
    fn for_iter(&mut self, iter: &ast::Expr, raw: usize) {
        let ast::Expr::Filter(f) = iter else {
            let line = self.line_of(iter.span().start_offset);
            self.fail(format!(
                "a `{{% for %}}` whose iterable could not be read (line {line})"
            ));
            return;
        };
        if f.name != ITERABLE || f.expr.is_none() {
            let line = self.line_of(iter.span().start_offset);
            self.fail(format!(
                "a `{{% for %}}` whose iterable could not be read (line {line})"
            ));
            return;
        }
        if let Some(e) = &f.expr {
            self.expr(e, 1, Place::Free);
        }
        if self.rewriting {
            if raw > 0 {
                let close = f.span().end_offset.saturating_sub(1);
                if self.src.as_bytes().get(close as usize) != Some(&b')') {
                    let line = self.line_of(iter.span().start_offset);
                    self.fail(format!(
                        "a `{{% for %}}` whose iterable could not be read (line {line})"
                    ));
                    return;
                }
                self.insert(close, 0, i64::MIN, format!(", {raw}"));
                self.stats.charged_loops += 1;
            }
        } else if f.args.len() == 2 {
            self.stats.charged_loops += 1;
        }
    }

    fn args(&mut self, args: &[ast::CallArg], depth: i64) {
        for a in args {
            match a {
                // `f(*l)` copies all of `l` into the call: charged as a walk.
                ast::CallArg::PosSplat(e) | ast::CallArg::KwargSplat(e) => self.operand(e, depth),
                _ => self.expr(arg_expr(a), depth, Place::Free),
            }
        }
    }

    /// Appends `|__sandbox_made` after the expression ending at `end`.
    fn made(&mut self, end: u32, depth: i64) {
        if self.rewriting {
            self.insert(end, 0, -depth, format!("|{MADE}"));
            self.stats.made += 1;
        }
    }

    fn call(&mut self, c: &ast::Call, span: machinery::Span, depth: i64, place: Place) {
        if let ast::Expr::Var(v) = &c.expr {
            if self.rewriting && v.id.starts_with(PREFIX) {
                let line = self.line_of(v.span().start_offset);
                self.fail(format!(
                    "`{}` (line {line}) is a name the sandbox keeps for itself",
                    v.id
                ));
            }
            if !self.rewriting && [CONCAT, ADD, MUL].contains(&v.id) {
                self.stats.chains += 1;
                self.args(&c.args, depth + 1);
                return;
            }
            if !self.rewriting && v.id == STORE {
                self.stats.stores += 1;
            }
            if !self.rewriting && v.id == CHARGE {
                self.stats.charged_macros += 1;
            }
            if v.id == "loop"
                && let Some(Some(raw)) = self.loops.last().copied()
                && raw > 0
            {
                self.recursion(c, span, raw);
            }
            if place == Place::Free && !v.id.starts_with(PREFIX) && v.id != "raise_exception" {
                self.made(span.end_offset, depth);
            }
        } else {
            // A method (`loop.changed(x)`, `l.count(x)`, `d.get(k)`) may
            // compare or hash its arguments.
            self.expr(&c.expr, depth + 1, Place::Postfixed);
            for a in &c.args {
                self.operand(arg_expr(a), depth + 1);
            }
            return;
        }
        self.args(&c.args, depth + 1);
    }

    /// An expression minijinja compares or hashes, as `((e)|__sandbox_cmp)`
    /// (constants are left as they are).
    fn operand(&mut self, e: &ast::Expr, depth: i64) {
        if !matches!(e, ast::Expr::Const(_)) {
            self.wrap(e, depth, CMP);
        } else if !self.rewriting {
            self.expr(e, depth + 1, Place::Free);
        }
    }

    /// `e` as `((e)|FILTER)`; when checking, counts `e` if it is so.
    fn wrap(&mut self, e: &ast::Expr, depth: i64, filter: &'static str) {
        if !self.rewriting {
            match e {
                ast::Expr::Filter(f)
                    if f.name == filter && f.args.is_empty() && f.expr.is_some() =>
                {
                    self.count(filter);
                    if let Some(inner) = &f.expr {
                        self.expr(inner, depth + 2, Place::Free);
                    }
                }
                _ => self.expr(e, depth + 1, Place::Postfixed),
            }
            return;
        }
        self.insert(start_of(e), 1, depth + 1, "((");
        self.insert(e.span().end_offset, 0, -(depth + 1), format!(")|{filter})"));
        self.count(filter);
        self.expr(e, depth + 2, Place::Free);
    }

    fn count(&mut self, filter: &str) {
        if filter == CMP {
            self.stats.compared += 1;
        } else {
            self.stats.indexed += 1;
        }
    }

    /// `loop(x)` in a recursive loop: `loop((x)|__jinja2_iterable("loop(...)", N))`.
    fn recursion(&mut self, c: &ast::Call, span: machinery::Span, raw: usize) {
        if !self.rewriting {
            return;
        }
        let [ast::CallArg::Pos(_)] = c.args.as_slice() else {
            return;
        };
        let bytes = self.src.as_bytes();
        let open = self.skip_whitespace(c.expr.span().end_offset as usize);
        let close = span.end_offset as usize - 1;
        if bytes.get(open) != Some(&b'(') || bytes.get(close) != Some(&b')') {
            self.fail("could not read a `loop(...)` call".into());
            return;
        }
        let mut end = close;
        while end > open && bytes[end - 1].is_ascii_whitespace() {
            end -= 1;
        }
        if bytes[end - 1] == b',' {
            end -= 1;
        }
        self.insert(open as u32 + 1, 1, i64::MIN, "(");
        self.insert(
            end as u32,
            0,
            i64::MAX,
            format!(")|{ITERABLE}(\"{LOOP_CALL}\", {raw})"),
        );
        self.stats.charged_recursions += 1;
    }

    fn skip_whitespace(&self, from: usize) -> usize {
        let bytes = self.src.as_bytes();
        let mut i = from;
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    }

    fn expr(&mut self, e: &ast::Expr, depth: i64, place: Place) {
        use ast::Expr as E;
        match e {
            E::Var(v) => {
                if self.rewriting && v.id.starts_with(PREFIX) {
                    let line = self.line_of(v.span().start_offset);
                    self.fail(format!(
                        "`{}` (line {line}) is a name the sandbox keeps for itself",
                        v.id
                    ));
                }
            }
            E::Const(_) => {}
            E::Slice(s) => {
                self.wrap(&s.expr, depth + 1, INDEXED);
                for part in [&s.start, &s.stop, &s.step].into_iter().flatten() {
                    self.expr(part, depth + 1, Place::Free);
                }
                if place == Place::Free {
                    self.made(s.span().end_offset, depth);
                }
            }
            E::UnaryOp(u) => self.expr(&u.expr, depth + 1, Place::Free),
            E::BinOp(b) => match op_name(&b.op) {
                Some(_) if !self.rewriting => {
                    self.stats.operators += 1;
                    self.expr(&b.left, depth + 1, Place::Free);
                    self.expr(&b.right, depth + 1, Place::Free);
                }
                Some((name, ch)) => self.chain(b, name, ch, depth),
                None if is_comparison(&b.op) => {
                    self.operand(&b.left, depth + 1);
                    self.operand(&b.right, depth + 1);
                }
                None => {
                    self.expr(&b.left, depth + 1, Place::Free);
                    self.expr(&b.right, depth + 1, Place::Free);
                }
            },
            E::Compare(c) => {
                self.operand(&c.expr, depth + 1);
                for op in &c.ops {
                    self.operand(&op.expr, depth + 1);
                }
            }
            E::IfExpr(i) => {
                self.expr(&i.test_expr, depth + 1, Place::Free);
                self.expr(&i.true_expr, depth + 1, Place::Free);
                if let Some(f) = &i.false_expr {
                    self.expr(f, depth + 1, Place::Free);
                }
            }
            E::Filter(f) => {
                if self.rewriting && f.name.starts_with(PREFIX) {
                    let line = self.line_of(f.span().start_offset);
                    self.fail(format!(
                        "`{}` (line {line}) is a name the sandbox keeps for itself",
                        f.name
                    ));
                }
                if !self.rewriting && f.name == MADE {
                    self.stats.made += 1;
                }
                let loop_call = |a: &ast::CallArg| matches!(a, ast::CallArg::Pos(ast::Expr::Const(c)) if c.value.as_str() == Some(LOOP_CALL));
                if !self.rewriting
                    && f.name == ITERABLE
                    && f.args.len() == 2
                    && loop_call(&f.args[0])
                {
                    self.stats.charged_recursions += 1;
                }
                if let Some(inner) = &f.expr {
                    self.expr(inner, depth + 1, Place::Free);
                }
                self.args(&f.args, depth + 1);
            }
            // Tests with arguments (`eq`, `in`, `lt`, ...) compare them
            // with the value; those without look at its kind (`defined`,
            // `string`) or read a string whole (`lower`, `iterable`).
            E::Test(t) if !t.args.is_empty() => {
                self.operand(&t.expr, depth + 1);
                for a in &t.args {
                    self.operand(arg_expr(a), depth + 1);
                }
            }
            E::Test(t) => self.wrap(&t.expr, depth + 1, INDEXED),
            E::GetAttr(g) => self.expr(&g.expr, depth + 1, Place::Postfixed),
            E::GetItem(g) => {
                self.wrap(&g.expr, depth + 1, INDEXED);
                self.operand(&g.subscript_expr, depth + 1);
            }
            E::Call(c) => self.call(c, c.span(), depth, place),
            E::List(l) => {
                for item in &l.items {
                    self.expr(item, depth + 1, Place::Free);
                }
            }
            E::Map(m) => {
                for key in &m.keys {
                    self.operand(key, depth + 1);
                }
                for value in &m.values {
                    self.expr(value, depth + 1, Place::Free);
                }
            }
        }
    }

    /// `a ~ b ~ c` (left-nested, one start offset) as `NAME(a , b , c)`.
    fn chain(&mut self, top: &ast::Spanned<ast::BinOp>, name: &str, ch: u8, depth: i64) {
        let start = top.span().start_offset;
        let mut nodes = vec![top];
        while let ast::Expr::BinOp(left) = &nodes[nodes.len() - 1].left {
            if same_op(&left.op, &top.op) && left.span().start_offset == start {
                nodes.push(left);
            } else {
                break;
            }
        }
        self.insert(start, 1, depth, format!("{name}("));
        self.insert(top.span().end_offset, 0, -depth, ")");
        self.stats.chains += 1;
        let innermost = nodes[nodes.len() - 1];
        self.expr(&innermost.left, depth + 1, Place::Free);
        for node in nodes.iter().rev() {
            let at = self.skip_closers(node.left.span().end_offset);
            let bytes = self.src.as_bytes();
            let is_op = bytes.get(at) == Some(&ch)
                && !(ch == b'*' && bytes.get(at + 1) == Some(&b'*'))
                && at < node.right.span().start_offset as usize;
            if !is_op {
                let line = self.line_of(node.span().start_offset);
                self.fail(format!(
                    "could not find the `{}` of an expression (line {line})",
                    ch as char
                ));
                return;
            }
            self.edits.push(Edit {
                at,
                class: 2,
                order: 0,
                delete: 1,
                text: ",".into(),
            });
            self.expr(&node.right, depth + 1, Place::Free);
        }
    }
}
