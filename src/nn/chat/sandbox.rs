//! The sandbox around an untrusted chat template: the template is
//! rewritten before minijinja compiles it, and the environment gets
//! size-checked versions of whatever can make a value grow
//! ([`ChatLimits`] has the bounds; `limits.rs` the checks).
//!
//! minijinja has no hook on its operators, so the rewrite (through its own
//! parser, whose spans are byte offsets into the text) turns them into
//! calls: `a ~ b ~ c` into `__sandbox_concat(a , b , c)`, and likewise `+`
//! and `*`. Constant folding at compile time goes with them: `'a' * 10**9`
//! is no longer computed by [`ChatTemplate::new`](super::ChatTemplate::new).
//! Slices and function or macro calls get `|__sandbox_made`, which charges
//! what they made; each `{% for %}` tells its iterable how many bytes of
//! literal text one pass of its body writes, charged per item (text written
//! into `{% set %}` blocks and macro bodies has no other hook); and
//! `{% set ns.attr = value %}` stores through `__sandbox_store`, which
//! refuses values nested deeper than [`MAX_NESTING`] or holding a
//! namespace, so that no namespace can hold itself (comparing or printing
//! it would overflow the stack). `include`, `import` and `extends` are
//! refused (transformers' environment has no loader either).
//!
//! Before parsing, each tag may hold at most [`MAX_OPERATORS`] operators:
//! minijinja's parser and compiler recurse once per operator of a chain,
//! and about 6 000 overflow a 2 MiB thread stack.
//!
//! The rewritten text is parsed again and checked to hold exactly the
//! calls made and none of the operators; a template that fails this is
//! refused rather than run unchecked.

use std::sync::Arc;

use minijinja::machinery::{self, WhitespaceConfig, ast};
use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Rest, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};

use super::compat::ITERABLE;
use super::limits::{Budget, Capped, ChatLimits, ITEM_BYTES, LIMIT, MAX_NESTING, check_shape};

/// The most operators one tag may hold (real templates: under 30).
pub(super) const MAX_OPERATORS: usize = 1000;

const CONCAT: &str = "__sandbox_concat";
const ADD: &str = "__sandbox_add";
const MUL: &str = "__sandbox_mul";
const MADE: &str = "__sandbox_made";
const STORE: &str = "__sandbox_store";
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
                let loops = std::mem::take(&mut self.loops);
                self.stmts(&s.macro_decl.body);
                self.loops = loops;
            }
            S::Do(s) => self.call(&s.call, s.call.span(), 0, Place::Statement),
        }
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
    /// `compat::rewrite`: given the body's literal bytes as a second argument.
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
                ast::CallArg::Pos(e)
                | ast::CallArg::Kwarg(_, e)
                | ast::CallArg::PosSplat(e)
                | ast::CallArg::KwargSplat(e) => self.expr(e, depth, Place::Free),
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
            self.expr(&c.expr, depth + 1, Place::Postfixed);
        }
        self.args(&c.args, depth + 1);
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
                self.expr(&s.expr, depth + 1, Place::Postfixed);
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
                None => {
                    self.expr(&b.left, depth + 1, Place::Free);
                    self.expr(&b.right, depth + 1, Place::Free);
                }
            },
            E::Compare(c) => {
                self.expr(&c.expr, depth + 1, Place::Free);
                for op in &c.ops {
                    self.expr(&op.expr, depth + 1, Place::Free);
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
            E::Test(t) => {
                self.expr(&t.expr, depth + 1, Place::Free);
                self.args(&t.args, depth + 1);
            }
            E::GetAttr(g) => self.expr(&g.expr, depth + 1, Place::Postfixed),
            E::GetItem(g) => {
                self.expr(&g.expr, depth + 1, Place::Postfixed);
                self.expr(&g.subscript_expr, depth + 1, Place::Free);
            }
            E::Call(c) => self.call(c, c.span(), depth, place),
            E::List(l) => {
                for item in &l.items {
                    self.expr(item, depth + 1, Place::Free);
                }
            }
            E::Map(m) => {
                for item in m.keys.iter().chain(&m.values) {
                    self.expr(item, depth + 1, Place::Free);
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

/// minijinja's `+` or `*` of two values, for what the sandbox does not do
/// itself (floats, mixed numbers, errors): evaluated by a plain
/// environment, so the results and error messages are minijinja's.
fn minijinja_op(op: &str, a: &Value, b: &Value) -> Result<Value, Error> {
    use std::sync::OnceLock;
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    let env = ENV.get_or_init(Environment::new);
    let expr = env.compile_expression(if op == "+" { "a + b" } else { "a * b" })?;
    expr.eval(minijinja::context! { a => a.clone(), b => b.clone() })
        .map_err(|e| {
            // Without the helper's own location, so the template's is kept.
            Error::new(e.kind(), e.detail().unwrap_or_default().to_string())
        })
}

fn is_listlike(v: &Value) -> bool {
    matches!(v.kind(), ValueKind::Seq | ValueKind::Iterable)
}

/// Collects `parts`, one after another, into a list of at most
/// `max_items` items.
fn collect(budget: &Budget, parts: &[(&Value, usize)]) -> Result<Value, Error> {
    let max = budget.limits.max_items;
    let mut out = Vec::new();
    for (v, times) in parts {
        for _ in 0..*times {
            for item in v.try_iter()? {
                if out.len() >= max {
                    return Err(budget.items(max.saturating_add(1)).unwrap_err());
                }
                out.push(item);
            }
        }
    }
    budget.charge(out.len().saturating_mul(ITEM_BYTES))?;
    Ok(Value::from(out))
}

fn add2(budget: &Budget, a: &Value, b: &Value) -> Result<Value, Error> {
    if is_listlike(a) && is_listlike(b) {
        if let (Some(x), Some(y)) = (a.len(), b.len()) {
            budget.items(x.saturating_add(y))?;
        }
        return collect(budget, &[(a, 1), (b, 1)]);
    }
    if let (Some(x), Some(y)) = (a.as_str(), b.as_str()) {
        let len = x.len().saturating_add(y.len());
        budget.string(len)?;
        budget.charge(len)?;
        return Ok(Value::from([x, y].concat()));
    }
    if a.is_integer()
        && b.is_integer()
        && let (Some(x), Some(y)) = (a.as_i64(), b.as_i64())
        && let Some(sum) = x.checked_add(y)
    {
        return Ok(Value::from(sum));
    }
    minijinja_op("+", a, b)
}

fn mul2(budget: &Budget, a: &Value, b: &Value) -> Result<Value, Error> {
    if let Some((s, n)) = a
        .as_str()
        .map(|s| (s, b))
        .or_else(|| b.as_str().map(|s| (s, a)))
    {
        if let Some(n) = n.as_usize() {
            let len = s.len().saturating_mul(n);
            budget.string(len)?;
            // minijinja's own cap (and error) stays.
            if len <= 100_000_000 {
                budget.charge(len)?;
                return Ok(Value::from(s.repeat(n)));
            }
        }
        return minijinja_op("*", a, b);
    }
    if let Some((seq, n)) = [(a, b), (b, a)]
        .into_iter()
        .find(|(x, _)| x.as_object().is_some() && is_listlike(x))
        && let (Some(n), Some(len)) = (n.as_usize(), seq.len())
    {
        budget.items(len.saturating_mul(n))?;
        return collect(budget, &[(seq, n)]);
    }
    if a.is_integer()
        && b.is_integer()
        && let (Some(x), Some(y)) = (a.as_i64(), b.as_i64())
        && let Some(product) = x.checked_mul(y)
    {
        return Ok(Value::from(product));
    }
    minijinja_op("*", a, b)
}

/// Whether `v` is one of minijinja's namespaces: a map whose Rust type
/// prints (`Debug`) as `Namespace { .. }`; only the first bytes are
/// written, so a namespace holding itself is not walked.
pub(super) fn is_namespace(v: &Value) -> bool {
    struct Head(String);
    impl std::fmt::Write for Head {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            let room = 9usize.saturating_sub(self.0.len());
            let take = s.char_indices().nth(room).map_or(s.len(), |(i, _)| i);
            self.0.push_str(&s[..take]);
            if self.0.len() >= 9 {
                Err(std::fmt::Error)
            } else {
                Ok(())
            }
        }
    }
    if v.kind() != ValueKind::Map || v.is_kwargs() {
        return false;
    }
    let Some(obj) = v.as_object() else {
        return false;
    };
    let mut head = Head(String::new());
    let _ = std::fmt::write(&mut head, format_args!("{obj:?}"));
    head.0 == "Namespace"
}

/// Refuses to store `v` in a namespace if it is or holds a namespace, or
/// nests deeper than [`MAX_NESTING`], or has more than `max_items` parts.
fn storable(budget: &Budget, v: &Value) -> Result<(), Error> {
    fn walk(budget: &Budget, v: &Value, depth: usize, nodes: &mut usize) -> Result<(), Error> {
        *nodes += 1;
        if *nodes > budget.limits.max_items {
            return Err(budget.items(*nodes).unwrap_err());
        }
        if !matches!(
            v.kind(),
            ValueKind::Seq | ValueKind::Map | ValueKind::Iterable
        ) {
            return Ok(());
        }
        if is_namespace(v) {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!(
                    "{LIMIT}a namespace stored in a namespace (refused, so that none can hold itself)"
                ),
            ));
        }
        if depth >= MAX_NESTING {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("{LIMIT}a value nested more than {MAX_NESTING} deep"),
            ));
        }
        let map = v.kind() == ValueKind::Map;
        if let Ok(items) = v.try_iter() {
            for item in items {
                if map {
                    let value = v.get_item(&item).unwrap_or_default();
                    walk(budget, &value, depth + 1, nodes)?;
                } else {
                    walk(budget, &item, depth + 1, nodes)?;
                }
            }
        }
        Ok(())
    }
    let mut nodes = 0;
    walk(budget, v, 0, &mut nodes)?;
    budget.charge(nodes.saturating_mul(ITEM_BYTES))
}

/// Registers the sandbox's functions and filters, and the limits minijinja
/// enforces itself.
pub(super) fn install(env: &mut Environment<'static>, limits: &Arc<ChatLimits>) {
    env.set_fuel(limits.engine_fuel());
    // `debug()` prints every variable, with no bound; jinja2 has no such
    // global either.
    env.remove_global("debug");
    let l = limits.clone();
    env.add_function(CONCAT, move |state: &State, args: Rest<Value>| {
        let budget = Budget::of(state, &l);
        let mut out = Capped::new(budget.limits.max_value_bytes);
        for v in args.iter() {
            check_shape(v, &budget, true)?;
            out.write(format_args!("{v}"))?;
        }
        budget.charge(out.text.len())?;
        Ok(Value::from(out.text))
    });
    let l = limits.clone();
    env.add_function(ADD, move |state: &State, args: Rest<Value>| {
        let budget = Budget::of(state, &l);
        let mut acc = args.first().cloned().unwrap_or_default();
        for v in args.iter().skip(1) {
            acc = add2(&budget, &acc, v)?;
        }
        Ok(acc)
    });
    let l = limits.clone();
    env.add_function(MUL, move |state: &State, args: Rest<Value>| {
        let budget = Budget::of(state, &l);
        let mut acc = args.first().cloned().unwrap_or_default();
        for v in args.iter().skip(1) {
            acc = mul2(&budget, &acc, v)?;
        }
        Ok(acc)
    });
    let l = limits.clone();
    env.add_filter(MADE, move |state: &State, value: Value| {
        Budget::of(state, &l).made(&value)?;
        Ok(value)
    });
    let l = limits.clone();
    env.add_function(STORE, move |state: &State, args: Rest<Value>| {
        let value = match args.as_slice() {
            [one] => one.clone(),
            many => Value::from(many.to_vec()),
        };
        storable(&Budget::of(state, &l), &value)?;
        Ok(value)
    });
    let l = limits.clone();
    env.add_function(
        "namespace",
        move |state: &State, defaults: Option<Value>| {
            if let Some(d) = &defaults {
                storable(&Budget::of(state, &l), d)?;
            }
            minijinja::functions::namespace(defaults)
        },
    );
}

/// What printing a value for `replace`, `format` or `join` takes, at most:
/// its bytes if a string, else what [`check_shape`] makes of it.
fn printed(budget: &Budget, v: &Value) -> Result<usize, Error> {
    match v.as_str() {
        Some(s) => Ok(s.len()),
        None => Ok(check_shape(v, budget, true)?.1),
    }
}

/// The most bytes `fmt` (printf or `str.format` style, by `delimiter`)
/// can write with `args`: its own length, every run of digits in it (the
/// widths and precisions) and, for each placeholder, the largest argument.
pub(super) fn format_bound(
    budget: &Budget,
    fmt: &str,
    delimiter: char,
    args: &[Value],
) -> Result<(), Error> {
    let mut bound = fmt.len();
    for run in fmt.split(|c: char| !c.is_ascii_digit()) {
        if !run.is_empty() {
            bound = bound.saturating_add(run.parse::<usize>().unwrap_or(usize::MAX));
        }
    }
    let mut widest = 0usize;
    for a in args {
        let size = if a.is_kwargs() {
            let mut size = 0usize;
            for key in a.try_iter()? {
                size = size.max(printed(budget, &a.get_item(&key)?)?);
            }
            size
        } else if a.is_number() {
            48
        } else {
            printed(budget, a)?
        };
        widest = widest.max(size);
    }
    let places = fmt.matches(delimiter).count();
    budget.string(bound.saturating_add(places.saturating_mul(widest)))
}

/// The most bytes `s.replace(from, to)` (at most `count` times) writes.
pub(super) fn replace_bound(
    budget: &Budget,
    s: &str,
    from: &str,
    to: &str,
    count: Option<usize>,
) -> Result<(), Error> {
    if to.len() <= from.len() {
        return Ok(());
    }
    let mut matches = if from.is_empty() {
        s.chars().count() + 1
    } else {
        s.matches(from).count()
    };
    if let Some(count) = count {
        matches = matches.min(count);
    }
    budget.string(
        s.len()
            .saturating_add(matches.saturating_mul(to.len() - from.len())),
    )
}

/// The most bytes `sep.join(items)` writes.
pub(super) fn join_bound(budget: &Budget, items: &Value, sep: &str) -> Result<(), Error> {
    let bytes = printed(budget, items)?;
    let n = items.len().unwrap_or(0);
    budget.string(bytes.saturating_add(sep.len().saturating_mul(n)))
}

/// Charges reading `v` (its bytes, or its items), for work that takes time
/// in proportion (`length`, `trim`, `sort`, ...).
pub(super) fn read(budget: &Budget, v: &Value) -> Result<(), Error> {
    match v.kind() {
        ValueKind::String => budget.charge(v.as_str().map_or(0, str::len)),
        ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => match v.len() {
            Some(n) => {
                budget.items(n)?;
                budget.charge(n.saturating_mul(ITEM_BYTES))
            }
            None => Ok(()),
        },
        _ => Ok(()),
    }
}

fn kwarg(args: &[Value], name: &str) -> Option<Value> {
    args.last()
        .filter(|v| v.is_kwargs())
        .and_then(|k| k.get_item(&Value::from(name)).ok())
        .filter(|v| !v.is_undefined())
}

/// The checks before filter `name` runs on `args`.
fn before(name: &str, budget: &Budget, args: &[Value]) -> Result<(), Error> {
    let first = args.first().cloned().unwrap_or_default();
    let text = |v: &Value| v.as_str().map(str::to_string);
    match name {
        "replace" => {
            let s = match first.as_str() {
                Some(s) => s.to_string(),
                None => "x".repeat(printed(budget, &first)?),
            };
            let from = args.get(1).and_then(text).unwrap_or_default();
            let to = args.get(2).and_then(text).unwrap_or_default();
            replace_bound(budget, &s, &from, &to, None)
        }
        "format" => {
            let fmt = first.as_str().unwrap_or_default();
            format_bound(budget, fmt, '%', args.get(1..).unwrap_or_default())
        }
        "indent" => {
            let bytes = printed(budget, &first)?;
            let width = args
                .get(1)
                .filter(|v| !v.is_kwargs())
                .cloned()
                .or_else(|| kwarg(args, "width"))
                .and_then(|v| v.as_usize())
                .unwrap_or(4);
            let lines = first.as_str().map_or(bytes, |s| s.matches('\n').count()) + 1;
            budget.string(bytes.saturating_add(width.saturating_mul(lines)))
        }
        "join" => {
            let sep = args.get(1).and_then(text).unwrap_or_default();
            join_bound(budget, &first, &sep)
        }
        "batch" | "slice" => match args.get(1).and_then(|v| v.as_usize()) {
            Some(count) => budget.items(count),
            None => Ok(()),
        },
        "escape" | "e" | "safe" | "lower" | "upper" | "title" | "capitalize" | "split"
        | "lines" => printed(budget, &first).map(|_| ()),
        _ => Ok(()),
    }
}

/// minijinja's built-in filters the sandbox wraps (the crate's own
/// `trim`, `string`, `length`, `count`, `list`, `items` and `tojson` are
/// wrapped where `compat.rs` registers them).
fn builtin_filters() -> Vec<(&'static str, Value)> {
    use minijinja::filters as f;
    vec![
        ("safe", Value::from_function(f::safe)),
        ("escape", Value::from_function(f::escape)),
        ("e", Value::from_function(f::escape)),
        ("lower", Value::from_function(f::lower)),
        ("upper", Value::from_function(f::upper)),
        ("title", Value::from_function(f::title)),
        ("capitalize", Value::from_function(f::capitalize)),
        ("replace", Value::from_function(f::replace)),
        ("dictsort", Value::from_function(f::dictsort)),
        ("reverse", Value::from_function(f::reverse)),
        ("join", Value::from_function(f::join)),
        ("split", Value::from_function(f::split)),
        ("lines", Value::from_function(f::lines)),
        ("default", Value::from_function(f::default)),
        ("d", Value::from_function(f::default)),
        ("round", Value::from_function(f::round)),
        ("abs", Value::from_function(f::abs)),
        ("int", Value::from_function(f::int)),
        ("float", Value::from_function(f::float)),
        ("attr", Value::from_function(f::attr)),
        ("first", Value::from_function(f::first)),
        ("last", Value::from_function(f::last)),
        ("min", Value::from_function(f::min)),
        ("max", Value::from_function(f::max)),
        ("sort", Value::from_function(f::sort)),
        ("bool", Value::from_function(f::bool)),
        ("batch", Value::from_function(f::batch)),
        ("slice", Value::from_function(f::slice)),
        ("sum", Value::from_function(f::sum)),
        ("indent", Value::from_function(f::indent)),
        ("select", Value::from_function(f::select)),
        ("reject", Value::from_function(f::reject)),
        ("selectattr", Value::from_function(f::selectattr)),
        ("rejectattr", Value::from_function(f::rejectattr)),
        ("map", Value::from_function(f::map)),
        ("groupby", Value::from_function(f::groupby)),
        ("unique", Value::from_function(f::unique)),
        ("chain", Value::from_function(f::chain)),
        ("zip", Value::from_function(f::zip)),
        ("pprint", Value::from_function(f::pprint)),
        ("format", Value::from_function(f::format)),
    ]
}

/// The filters that walk a whole list or map as soon as they are called
/// (others take constant time, as `length`, or are lazy, as `map`).
const WALKS: [&str; 19] = [
    "list", "sort", "unique", "join", "groupby", "dictsort", "sum", "min", "max", "batch", "slice",
    "reverse", "items", "tojson", "string", "trim", "pprint", "format", "indent",
];

/// Registers `filter` as `name`, checked: its input charged as read (a
/// string, or a list [`WALKS`] names), the checks of [`before`], and its
/// result checked and charged.
pub(super) fn add_guarded_filter(
    env: &mut Environment<'static>,
    limits: &Arc<ChatLimits>,
    name: &'static str,
    filter: Value,
) {
    let l = limits.clone();
    env.add_filter(name, move |state: &State, args: Rest<Value>| {
        let budget = Budget::of(state, &l);
        match args.first() {
            Some(input) if input.kind() == ValueKind::String || WALKS.contains(&name) => {
                read(&budget, input)?;
            }
            _ => {}
        }
        before(name, &budget, &args)?;
        let rv = if name == "pprint" {
            // minijinja's `format!("{value:#?}")`, into a bounded string.
            let value = args.first().cloned().unwrap_or_default();
            let mut out = Capped::new(budget.limits.max_value_bytes);
            out.write(format_args!("{value:#?}"))?;
            Value::from(out.text)
        } else {
            filter.call(state, &args)?
        };
        budget.made(&rv)?;
        Ok(rv)
    });
}

/// Wraps minijinja's built-in filters (see [`add_guarded_filter`]).
pub(super) fn guard_builtin_filters(env: &mut Environment<'static>, limits: &Arc<ChatLimits>) {
    for (name, filter) in builtin_filters() {
        add_guarded_filter(env, limits, name, filter);
    }
}
