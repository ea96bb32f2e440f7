//! transformers' Jinja environment (`_compile_jinja_template` in
//! `transformers/utils/chat_template_utils.py`) on minijinja: the settings,
//! `raise_exception`, a `tojson` that is Python's `json.dumps`,
//! `strftime_now`, Python's methods, and `{% generation %}` blocks; and
//! jinja2's semantics where minijinja's differ: looping over `None` is an
//! error (transformers passes `tools=None` and `documents=None`, and a
//! template that loops over them unguarded fails), an undefined value has
//! length 0 and is iterable, `None` is not, `trim`, `strip()` and `split()`
//! know Python's whitespace (`\x1c`-`\x1f` included), `string` and `trim`
//! print values as Python's `str`.
//!
//! Every filter, method and printed value is checked against the
//! template's [`ChatLimits`] (`sandbox.rs`, `guards.rs`, `limits.rs`).

use std::sync::Arc;

use minijinja::machinery::make_string_output;
use minijinja::value::{Kwargs, Value, ValueIter, ValueKind, from_args};
use minijinja::{Environment, Error, ErrorKind, Output, State, UndefinedBehavior};

use super::clock;
use super::guards::{self, add_guarded_filter, format_bound, join_bound, replace_bound};
use super::limits::{Budget, ChatLimits, check_shape};
use super::sandbox::{self, ITERABLE};

/// Marks the errors `raise_exception` makes.
pub(super) const RAISED: &str = "raise_exception: ";

/// The environment, holding `template` as "chat_template", rendering
/// within `limits`.
pub(super) fn environment(
    template: &str,
    limits: &Arc<ChatLimits>,
) -> Result<Environment<'static>, Error> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_keep_trailing_newline(false);
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    let l = limits.clone();
    env.set_unknown_method_callback(move |state, value, method, args| {
        python_method(&Budget::of(state, &l), state, value, method, args)
    });
    let l = limits.clone();
    env.set_formatter(move |out, state, value| format(&Budget::of(state, &l), out, state, value));
    guards::install(&mut env, limits);
    guards::guard_builtin_filters(&mut env, limits);
    let l = limits.clone();
    let tojson = move |state: &State, value: &Value, kwargs: Kwargs| {
        tojson(&Budget::of(state, &l), value, kwargs)
    };
    add_guarded_filter(&mut env, limits, "tojson", Value::from_function(tojson));
    let l = limits.clone();
    env.add_filter(
        ITERABLE,
        move |state: &State, value: Value, expr: String, raw: Option<usize>| {
            let value = iterable_or_error(value, expr)?;
            match raw {
                Some(raw) if raw > 0 => charged(Budget::of(state, &l), value, raw),
                _ => Ok(value),
            }
        },
    );
    let l = limits.clone();
    let trim = move |state: &State, value: &Value, chars: Option<Value>| {
        trim(&Budget::of(state, &l), value, chars)
    };
    add_guarded_filter(&mut env, limits, "trim", Value::from_function(trim));
    let l = limits.clone();
    let string = move |state: &State, value: &Value| string(&Budget::of(state, &l), value);
    add_guarded_filter(&mut env, limits, "string", Value::from_function(string));
    add_guarded_filter(&mut env, limits, "length", Value::from_function(length));
    add_guarded_filter(&mut env, limits, "count", Value::from_function(length));
    add_guarded_filter(&mut env, limits, "list", Value::from_function(list));
    add_guarded_filter(&mut env, limits, "items", Value::from_function(items));
    env.add_test("iterable", is_iterable);
    env.add_function(
        "raise_exception",
        |message: String| -> Result<Value, Error> {
            Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("{RAISED}{message}"),
            ))
        },
    );
    env.add_function("strftime_now", |format: String| {
        clock::strftime(&format, clock::now_utc())
    });
    env.add_template_owned("chat_template", sandbox::rewrite(&rewrite(template))?)?;
    Ok(env)
}

/// How `{{ value }}` prints: Python's `str` for booleans, none, floats,
/// lists and dicts, minijinja's for the rest; charged to the budget.
fn format(budget: &Budget, out: &mut Output, state: &State, value: &Value) -> Result<(), Error> {
    match value.kind() {
        ValueKind::String => {
            budget.charge(value.as_str().map_or(0, str::len))?;
            minijinja::escape_formatter(out, state, value)
        }
        ValueKind::Bool | ValueKind::None | ValueKind::Seq | ValueKind::Map => {
            let text = py_str(budget, value)?;
            budget.charge(text.len())?;
            out.write_str(&text).map_err(Error::from)
        }
        ValueKind::Number if !value.is_integer() => {
            out.write_str(&py_str(budget, value)?).map_err(Error::from)
        }
        _ => {
            check_shape(value, budget, true)?;
            let mut text = String::new();
            minijinja::escape_formatter(&mut make_string_output(&mut text), state, value)?;
            budget.charge(text.len())?;
            out.write_str(&text).map_err(Error::from)
        }
    }
}

/// `value` as a `{% for %}` iterates it, charging `raw` bytes (the literal
/// text of one pass of the loop's body) per item: an item past the budget
/// is its error, which ends the loop.
fn charged(budget: Arc<Budget>, value: Value, raw: usize) -> Result<Value, Error> {
    struct Charged<'a> {
        items: ValueIter,
        budget: &'a Budget,
        raw: usize,
        done: bool,
    }
    impl Iterator for Charged<'_> {
        type Item = Value;
        fn next(&mut self) -> Option<Value> {
            if self.done {
                return None;
            }
            let item = self.items.next()?;
            match self.budget.charge(self.raw) {
                Ok(()) => Some(item),
                Err(e) => {
                    self.done = true;
                    Some(Value::from(e))
                }
            }
        }
        fn size_hint(&self) -> (usize, Option<usize>) {
            self.items.size_hint()
        }
    }
    value.try_iter()?;
    Ok(Value::make_object_iterable(
        (value, budget),
        move |(value, budget)| match value.try_iter() {
            Ok(items) => Box::new(Charged {
                items,
                budget,
                raw,
                done: false,
            }),
            Err(_) => Box::new(std::iter::empty()),
        },
    ))
}

/// Python's `str.isspace()` of one character: Rust's whitespace and the
/// four information separators `\x1c`-`\x1f`.
fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.strip` (`lstrip`, `rstrip`: `left`, `right`) with `chars`
/// (`None`: whitespace).
fn py_strip<'a>(s: &'a str, chars: Option<&str>, left: bool, right: bool) -> &'a str {
    let strip = |c: char| match chars {
        Some(chars) => chars.contains(c),
        None => is_py_space(c),
    };
    let s = if left { s.trim_start_matches(strip) } else { s };
    if right { s.trim_end_matches(strip) } else { s }
}

/// Python's `str.split()` with no separator: runs of whitespace split, at
/// most `maxsplit` times (negative: no limit).
fn py_split_whitespace(s: &str, maxsplit: i64) -> Vec<Value> {
    let mut parts = Vec::new();
    let mut rest = s.trim_start_matches(is_py_space);
    while !rest.is_empty() {
        if maxsplit >= 0 && parts.len() as i64 == maxsplit {
            parts.push(Value::from(rest));
            break;
        }
        let end = rest.find(is_py_space).unwrap_or(rest.len());
        parts.push(Value::from(&rest[..end]));
        rest = rest[end..].trim_start_matches(is_py_space);
    }
    parts
}

/// Python's methods, within the budget: the string's bytes are charged
/// as read, what `replace`, `format` and `join` would write is checked
/// before they write it, and every result after.
fn python_method(
    budget: &Budget,
    state: &State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if let Some(s) = value.as_str() {
        budget.charge(s.len())?;
        match method {
            "replace" => {
                let (from, to, count): (&str, &str, Option<i64>) = from_args(args)?;
                let count = count.and_then(|c| usize::try_from(c).ok());
                replace_bound(budget, s, from, to, count)?;
            }
            "format" => format_bound(budget, s, '{', args)?,
            "join" => {
                let (values,): (&Value,) = from_args(args)?;
                join_bound(budget, values, s)?;
            }
            _ => {}
        }
    }
    // `l.count(x)` compares x with each item (its arguments are charged
    // where the rewrite puts them behind `__sandbox_cmp`).
    let walked;
    let value = if value.kind() == ValueKind::Seq && method == "count" {
        walked = guards::compared(budget, value.clone())?;
        &walked
    } else {
        value
    };
    let rv = unbounded_python_method(state, value, method, args)?;
    budget.made(&rv)?;
    Ok(rv)
}

/// The string methods whose whitespace is Python's, and `count` (whose
/// `pycompat` version never ends for `''`); the rest as minijinja-contrib's
/// `pycompat` has them.
fn unbounded_python_method(
    state: &State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if let (ValueKind::String, Some(s)) = (value.kind(), value.as_str()) {
        match method {
            "strip" | "lstrip" | "rstrip" => {
                let (chars,): (Option<Value>,) = from_args(args)?;
                let chars = chars.filter(|c| !c.is_none());
                let chars = match &chars {
                    Some(c) => Some(c.as_str().ok_or_else(|| {
                        Error::new(
                            ErrorKind::InvalidOperation,
                            format!("{method} arg must be None or str"),
                        )
                    })?),
                    None => None,
                };
                let (left, right) = (method != "rstrip", method != "lstrip");
                return Ok(Value::from(py_strip(s, chars, left, right)));
            }
            "split" => {
                let (sep, maxsplit): (Option<Value>, Option<i64>) = from_args(args)?;
                if sep.as_ref().is_none_or(|v| v.is_none()) {
                    return Ok(Value::from(py_split_whitespace(s, maxsplit.unwrap_or(-1))));
                }
            }
            "isspace" => {
                let () = from_args(args)?;
                return Ok(Value::from(!s.is_empty() && s.chars().all(is_py_space)));
            }
            "count" => {
                let (what,): (&str,) = from_args(args)?;
                return Ok(Value::from(if what.is_empty() {
                    s.chars().count() + 1
                } else {
                    s.matches(what).count()
                }));
            }
            _ => {}
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// jinja2's `trim`: Python's `str(value).strip(chars)`.
fn trim(budget: &Budget, value: &Value, chars: Option<Value>) -> Result<Value, Error> {
    let text = match value.kind() {
        ValueKind::Undefined => String::new(),
        _ => py_str(budget, value)?,
    };
    let chars = chars.filter(|c| !c.is_none());
    let chars = chars.as_ref().and_then(|c| c.as_str());
    Ok(Value::from(py_strip(&text, chars, true, true)))
}

/// jinja2's `string`: Python's `str(value)` (`''` for undefined).
fn string(budget: &Budget, value: &Value) -> Result<Value, Error> {
    Ok(match value.kind() {
        ValueKind::Undefined => Value::from(""),
        ValueKind::String => value.clone(),
        _ => Value::from(py_str(budget, value)?),
    })
}

/// jinja2's `length`: 0 for undefined, an error for what has no length.
fn length(value: &Value) -> Result<usize, Error> {
    match value.kind() {
        ValueKind::Undefined => Ok(0),
        _ => value.len().ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidOperation,
                format!("object of type '{}' has no len()", py_type(value)),
            )
        }),
    }
}

/// jinja2's `list`: `[]` for undefined, an error for `None`.
fn list(state: &State, value: Value) -> Result<Value, Error> {
    match value.kind() {
        ValueKind::Undefined => Ok(Value::from(Vec::<Value>::new())),
        ValueKind::None | ValueKind::Bool | ValueKind::Number => Err(not_iterable(&value)),
        _ => minijinja::filters::list(state, value),
    }
}

/// jinja2's `items`: the pairs of a mapping, none for undefined.
fn items(value: &Value) -> Result<Value, Error> {
    match value.kind() {
        ValueKind::Undefined => Ok(Value::from(Vec::<Value>::new())),
        ValueKind::Map => minijinja::filters::items(value),
        _ => Err(Error::new(
            ErrorKind::InvalidOperation,
            "Can only get item pairs from a mapping.",
        )),
    }
}

/// jinja2's `iterable` test: undefined is (it iterates as empty), `None`,
/// booleans and numbers are not.
fn is_iterable(value: &Value) -> bool {
    match value.kind() {
        ValueKind::Undefined => true,
        ValueKind::None | ValueKind::Bool | ValueKind::Number => false,
        _ => value.try_iter().is_ok(),
    }
}

/// What a `{% for %}` loops over, or jinja2's error for `None`, which
/// minijinja would loop over as empty. `expr` is the loop's Jinja text.
fn iterable_or_error(value: Value, expr: String) -> Result<Value, Error> {
    match value.kind() {
        ValueKind::None => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "cannot loop over `{expr}`: it is None, and jinja2 raises \"'NoneType' object is not iterable\" (transformers passes tools=None and documents=None when none are given)"
            ),
        )),
        _ => Ok(value),
    }
}

fn not_iterable(value: &Value) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("'{}' object is not iterable", py_type(value)),
    )
}

/// Python's type name of a value, for error messages.
fn py_type(value: &Value) -> &'static str {
    match value.kind() {
        ValueKind::None => "NoneType",
        ValueKind::Bool => "bool",
        ValueKind::Number if value.is_integer() => "int",
        ValueKind::Number => "float",
        ValueKind::String => "str",
        ValueKind::Seq => "list",
        ValueKind::Map => "dict",
        ValueKind::Undefined => "Undefined",
        _ => "object",
    }
}

/// The template as minijinja compiles it: `{% generation %}` /
/// `{% endgeneration %}` (transformers' assistant-mask tag, which renders
/// its body unchanged) as `{% if true %}` / `{% endif %}`, and each
/// `{% for x in EXPR %}` as `{% for x in (EXPR)|__jinja2_iterable("EXPR") %}`
/// so that looping over `None` fails as in jinja2. Whitespace control,
/// comments, `{{ }}` and `{% raw %}` blocks are kept as they are.
fn rewrite(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 64);
    let mut rest = text;
    while let Some(start) = find_open(rest) {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match &rest[start..start + 2] {
            "{#" => {
                let end = after.find("#}").map_or(after.len(), |e| e + 2);
                out.push_str(&rest[start..start + 2 + end]);
                rest = &after[end..];
            }
            "{{" => {
                let end = tag_end(after, '}').map_or(after.len(), |e| e + 2);
                out.push_str(&rest[start..start + 2 + end]);
                rest = &after[end..];
            }
            _ => {
                let Some(end) = tag_end(after, '%') else {
                    out.push_str(&rest[start..]);
                    rest = "";
                    break;
                };
                let inner = &after[..end];
                rest = &after[end + 2..];
                let left_len = inner.len() - inner.trim_start_matches(['-', '+']).len();
                let right_len = inner.len() - inner.trim_end_matches(['-', '+']).len();
                let (left, right) = (&inner[..left_len], &inner[inner.len() - right_len..]);
                let body = &inner[left_len..inner.len() - right_len];
                let word = body.split_whitespace().next().unwrap_or("");
                match word {
                    "generation" if body.trim() == "generation" => {
                        out.push_str(&format!("{{%{left} if true {right}%}}"))
                    }
                    "endgeneration" if body.trim() == "endgeneration" => {
                        out.push_str(&format!("{{%{left} endif {right}%}}"))
                    }
                    "for" => out.push_str(&format!("{{%{left}{}{right}%}}", rewrite_for(body))),
                    "raw" if body.trim() == "raw" => {
                        // Everything up to the end of `{% endraw %}` as it is.
                        out.push_str(&format!("{{%{inner}%}}"));
                        let end = find_endraw(rest).unwrap_or(rest.len());
                        out.push_str(&rest[..end]);
                        rest = &rest[end..];
                    }
                    _ => out.push_str(&format!("{{%{inner}%}}")),
                }
            }
        }
    }
    out.push_str(rest);
    out
}

/// Where the next `{{`, `{%` or `{#` starts.
fn find_open(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    (0..bytes.len().saturating_sub(1))
        .find(|&i| bytes[i] == b'{' && matches!(bytes[i + 1], b'{' | b'%' | b'#'))
}

/// Where the `X}` (X: `}` or `%`) that closes a tag starts in `text` (the
/// text after its opening), skipping string literals and brackets.
fn tag_end(text: &str, close: char) -> Option<usize> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if let Some(q) = quote {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                c if c == q => quote = None,
                _ => {}
            }
            continue;
        }
        match c {
            '\'' | '"' => quote = Some(c),
            '(' | '[' | '{' => depth += 1,
            ')' | ']' => depth = depth.saturating_sub(1),
            '}' if depth > 0 => depth -= 1,
            c if c == close && depth == 0 && chars.peek().map(|(_, n)| *n) == Some('}') => {
                return Some(i);
            }
            _ => {}
        }
    }
    None
}

/// Where the text after a `{% endraw %}` tag starts in `text`.
fn find_endraw(text: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(start) = text[from..].find("{%").map(|s| s + from) {
        let after = &text[start + 2..];
        let end = after.find("%}")?;
        if after[..end].trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace())
            == "endraw"
        {
            return Some(start + 2 + end + 2);
        }
        from = start + 2;
    }
    None
}

/// `for TARGET in EXPR [if COND] [recursive]` with EXPR passed through the
/// `__jinja2_iterable` filter; anything it cannot read is left as it is.
fn rewrite_for(body: &str) -> String {
    let words = words(body);
    let Some(&(in_start, in_end)) = words.iter().find(|&&(s, e)| &body[s..e] == "in") else {
        return body.to_string();
    };
    let expr_end = words
        .iter()
        .filter(|&&(s, _)| s > in_end)
        .find(|&&(s, e)| matches!(&body[s..e], "if" | "recursive"))
        .map_or(body.trim_end().len(), |&(s, _)| s);
    let expr = body[in_end..expr_end].trim();
    if expr.is_empty() || in_start == 0 {
        return body.to_string();
    }
    let literal: String = expr
        .chars()
        .flat_map(|c| match c {
            '\\' => vec!['\\', '\\'],
            '"' => vec!['\\', '"'],
            '\n' => vec!['\\', 'n'],
            '\r' => vec!['\\', 'r'],
            '\t' => vec!['\\', 't'],
            c => vec![c],
        })
        .collect();
    format!(
        "{} ({expr})|{ITERABLE}(\"{literal}\") {}",
        &body[..in_end],
        &body[expr_end..]
    )
}

/// The (start, end) of each bare word of a tag body, outside string
/// literals and brackets.
fn words(body: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut start: Option<usize> = None;
    let mut prev: Option<char> = None;
    for (i, c) in body.char_indices() {
        let word_char = c.is_alphanumeric() || c == '_';
        if let Some(s) = start
            && !word_char
        {
            out.push((s, i));
            start = None;
        }
        if let Some(q) = quote {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                c if c == q => quote = None,
                _ => {}
            }
        } else {
            match c {
                '\'' | '"' => quote = Some(c),
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' => depth = depth.saturating_sub(1),
                c if word_char && depth == 0 && start.is_none() && prev != Some('.') => {
                    let after_word = prev.is_some_and(|p| p.is_alphanumeric() || p == '_');
                    if !after_word && !c.is_ascii_digit() {
                        start = Some(i);
                    }
                }
                _ => {}
            }
        }
        prev = Some(c);
    }
    if let Some(s) = start {
        out.push((s, body.len()));
    }
    out
}

/// Python's `str` of a value, as jinja2 prints it (`True`, `None`, `['a']`),
/// if its shape is within the limits (`check_shape`: so `py_repr`'s
/// recursion ends).
fn py_str(budget: &Budget, v: &Value) -> Result<String, Error> {
    match v.kind() {
        ValueKind::String => Ok(v.as_str().unwrap_or("").to_string()),
        _ => {
            check_shape(v, budget, true)?;
            let text = py_repr(v);
            budget.string(text.len())?;
            Ok(text)
        }
    }
}

/// Python's `repr` of a value.
fn py_repr(v: &Value) -> String {
    let join = |items: Vec<String>| items.join(", ");
    match v.kind() {
        ValueKind::None => "None".into(),
        ValueKind::Bool => (if v.is_true() { "True" } else { "False" }).into(),
        ValueKind::Number if !v.is_integer() => {
            py_float(f64::try_from(v.clone()).unwrap_or(f64::NAN))
        }
        ValueKind::String => {
            let s = v.as_str().unwrap_or("");
            let q = if s.contains('\'') && !s.contains('"') {
                '"'
            } else {
                '\''
            };
            let mut out = String::from(q);
            for c in s.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    c if c == q => out.extend(['\\', c]),
                    c if (c as u32) < 0x20 || c == '\u{7f}' => {
                        out.push_str(&format!("\\x{:02x}", c as u32))
                    }
                    c => out.push(c),
                }
            }
            out.push(q);
            out
        }
        ValueKind::Seq => format!(
            "[{}]",
            join(
                v.try_iter()
                    .map(|i| i.map(|x| py_repr(&x)).collect())
                    .unwrap_or_default()
            )
        ),
        ValueKind::Map => {
            let pairs = v.try_iter().map(|i| {
                i.map(|k| {
                    format!(
                        "{}: {}",
                        py_repr(&k),
                        py_repr(&v.get_item(&k).unwrap_or_default())
                    )
                })
                .collect()
            });
            format!("{{{}}}", join(pairs.unwrap_or_default()))
        }
        _ => v.to_string(),
    }
}

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=None,
/// separators=None, sort_keys=False)`, of a value whose shape is within the
/// limits, writing at most `max_value_bytes`.
fn tojson(budget: &Budget, value: &Value, kwargs: Kwargs) -> Result<String, Error> {
    check_shape(value, budget, true)?;
    let ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    let indent = match kwargs.get::<Option<Value>>("indent")? {
        Some(v) if v.is_integer() => {
            let width = v.as_i64().unwrap_or(0).max(0) as usize;
            budget.string(width)?;
            Some(" ".repeat(width))
        }
        Some(v) if v.kind() == ValueKind::String => Some(v.as_str().unwrap_or("").to_string()),
        _ => None,
    };
    let separators = kwargs.get::<Option<Vec<String>>>("separators")?;
    let sort = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    kwargs.assert_all_used()?;
    let (item, key) = match separators.as_deref() {
        Some([item, key]) => (item.clone(), key.clone()),
        Some(_) => {
            let message = "tojson: separators must be (item_separator, key_separator)";
            return Err(Error::new(ErrorKind::InvalidOperation, message));
        }
        None if indent.is_some() => (",".into(), ": ".into()),
        None => (", ".into(), ": ".into()),
    };
    let mut out = String::new();
    Json {
        ascii,
        indent,
        item,
        key,
        sort,
        budget,
    }
    .write(value, 0, &mut out)?;
    Ok(out)
}

struct Json<'a> {
    ascii: bool,
    indent: Option<String>,
    item: String,
    key: String,
    sort: bool,
    budget: &'a Budget,
}

impl Json<'_> {
    fn newline(&self, level: usize, out: &mut String) -> Result<(), Error> {
        if let Some(indent) = &self.indent {
            let after = indent
                .len()
                .saturating_mul(level)
                .saturating_add(out.len() + 1);
            self.budget.string(after)?;
            out.push('\n');
            (0..level).for_each(|_| out.push_str(indent));
        }
        Ok(())
    }

    fn write(&self, v: &Value, level: usize, out: &mut String) -> Result<(), Error> {
        self.budget.string(out.len())?;
        let scalar = match v.kind() {
            ValueKind::None => Some("null".to_string()),
            ValueKind::Bool => Some((if v.is_true() { "true" } else { "false" }).to_string()),
            ValueKind::Number if v.is_integer() => Some(v.to_string()),
            ValueKind::Number => Some(py_float(f64::try_from(v.clone())?)),
            _ => None,
        };
        if let Some(text) = scalar {
            out.push_str(&text);
            return Ok(());
        }
        let items: Vec<(Option<String>, Value)> = match v.kind() {
            ValueKind::String => {
                self.string(v.as_str().unwrap_or(""), out);
                return Ok(());
            }
            ValueKind::Seq => v.try_iter()?.map(|x| (None, x)).collect(),
            ValueKind::Map => {
                let mut pairs = Vec::new();
                for k in v.try_iter()? {
                    let name = match k.kind() {
                        ValueKind::String => k.as_str().unwrap_or("").to_string(),
                        ValueKind::None => "null".into(),
                        ValueKind::Bool => (if k.is_true() { "true" } else { "false" }).into(),
                        _ => k.to_string(),
                    };
                    pairs.push((Some(name), v.get_item(&k)?));
                }
                if self.sort {
                    pairs.sort_by(|a, b| a.0.cmp(&b.0));
                }
                pairs
            }
            kind => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("tojson: a {kind} is not JSON serializable"),
                ));
            }
        };
        let (open, close) = if v.kind() == ValueKind::Map {
            ('{', '}')
        } else {
            ('[', ']')
        };
        out.push(open);
        if items.is_empty() {
            out.push(close);
            return Ok(());
        }
        for (i, (name, x)) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(&self.item);
            }
            self.newline(level + 1, out)?;
            if let Some(name) = name {
                self.string(name, out);
                out.push_str(&self.key);
            }
            self.write(x, level + 1, out)?;
        }
        self.newline(level, out)?;
        out.push(close);
        Ok(())
    }

    fn string(&self, s: &str, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 || (self.ascii && (c as u32) > 0x7e) => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{u:04x}"));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// Python's `repr` of a float (what `json.dumps` writes).
fn py_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let sci = format!("{f:e}"); // shortest digits: "-1.25e-7"
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = mantissa
        .strip_prefix('-')
        .map_or(("", mantissa), |m| ("-", m));
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if !(-4..16).contains(&exp) {
        let (head, tail) = digits.split_at(1);
        let tail = if tail.is_empty() {
            String::new()
        } else {
            format!(".{tail}")
        };
        return format!(
            "{sign}{head}{tail}e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.abs()
        );
    }
    let point = exp + 1; // digits before the decimal point
    let text = if point <= 0 {
        format!("0.{}{digits}", "0".repeat((-point) as usize))
    } else if (point as usize) >= digits.len() {
        format!("{digits}{}.0", "0".repeat(point as usize - digits.len()))
    } else {
        format!(
            "{}.{}",
            &digits[..point as usize],
            &digits[point as usize..]
        )
    };
    format!("{sign}{text}")
}
