//! Python's behaviour, which templates written for jinja2 (on Python) rely
//! on and minijinja's differs from: the string methods (`strip()`,
//! `split()` and `isspace()` know Python's whitespace, `\x1c`-`\x1f`
//! included; `count`; the rest as minijinja-contrib's `pycompat` has them),
//! `str` and `repr` of values (`True`, `None`, `['a']`), type names for
//! error messages, and transformers' `tojson`, which is Python's
//! `json.dumps`.
//!
//! Every method and printed value is checked against the template's limits
//! (`guards.rs`, `limits.rs`).

use minijinja::value::{Kwargs, Value, ValueKind, from_args};
use minijinja::{Error, ErrorKind, State};

use super::bounds::{format_bound, join_bound, lines_bound, replace_bound, split_bound};
use super::guards;
use super::limits::{Budget, check_shape};

/// Python's `str.isspace()` of one character: Rust's whitespace and the
/// four information separators `\x1c`-`\x1f`.
fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.strip` (`lstrip`, `rstrip`: `left`, `right`) with `chars`
/// (`None`: whitespace).
pub(super) fn py_strip<'a>(s: &'a str, chars: Option<&str>, left: bool, right: bool) -> &'a str {
    // A set, so that stripping costs |s|, not |s| times |chars|.
    let set = chars.map(CharSet::new);
    let strip = |c: char| match &set {
        Some(set) => set.contains(c),
        None => is_py_space(c),
    };
    let s = if left { s.trim_start_matches(strip) } else { s };
    if right { s.trim_end_matches(strip) } else { s }
}

/// A set of characters: a bitmap for ASCII, a hash set for the rest.
struct CharSet {
    ascii: u128,
    other: std::collections::HashSet<char>,
}

impl CharSet {
    fn new(chars: &str) -> CharSet {
        let mut set = CharSet {
            ascii: 0,
            other: Default::default(),
        };
        for c in chars.chars() {
            if c.is_ascii() {
                set.ascii |= 1 << c as u32;
            } else {
                set.other.insert(c);
            }
        }
        set
    }

    fn contains(&self, c: char) -> bool {
        if c.is_ascii() {
            self.ascii & (1 << c as u32) != 0
        } else {
            self.other.contains(&c)
        }
    }
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
pub(super) fn python_method(
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
            "split" => {
                let (sep, maxsplit): (Option<Value>, Option<i64>) = from_args(args)?;
                let sep = sep.filter(|v| !v.is_none());
                split_bound(budget, s, sep.as_ref().and_then(|v| v.as_str()), maxsplit)?;
            }
            "splitlines" => lines_bound(budget, s)?,
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

/// Python's type name of a value, for error messages.
pub(super) fn py_type(value: &Value) -> &'static str {
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

/// Python's `str` of a value, as jinja2 prints it (`True`, `None`, `['a']`),
/// if its shape is within the limits (`check_shape`: so `py_repr`'s
/// recursion ends).
pub(super) fn py_str(budget: &Budget, v: &Value) -> Result<String, Error> {
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
pub(super) fn tojson(budget: &Budget, value: &Value, kwargs: Kwargs) -> Result<String, Error> {
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
