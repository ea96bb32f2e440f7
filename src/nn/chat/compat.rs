//! transformers' Jinja environment (`_compile_jinja_template` in
//! `transformers/utils/chat_template_utils.py`) on minijinja: the settings,
//! `raise_exception`, a `tojson` that is Python's `json.dumps`,
//! `strftime_now`, Python's methods, and `{% generation %}` blocks.

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, UndefinedBehavior};

use super::clock;

/// Marks the errors `raise_exception` makes.
pub(super) const RAISED: &str = "raise_exception: ";

/// The environment, holding `template` as "chat_template".
pub(super) fn environment(template: &str) -> Result<Environment<'static>, Error> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_keep_trailing_newline(false);
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.set_formatter(|out, state, value| match value.kind() {
        ValueKind::Bool | ValueKind::None | ValueKind::Seq | ValueKind::Map => {
            out.write_str(&py_str(value)).map_err(Error::from)
        }
        ValueKind::Number if !value.is_integer() => {
            out.write_str(&py_str(value)).map_err(Error::from)
        }
        _ => minijinja::escape_formatter(out, state, value),
    });
    env.add_filter("tojson", tojson);
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
    env.add_template_owned("chat_template", generation_as_if(template))?;
    Ok(env)
}

/// `{% generation %}` / `{% endgeneration %}` (transformers' assistant-mask
/// tag, which renders its body unchanged) as `{% if true %}` / `{% endif %}`,
/// whitespace control kept.
fn generation_as_if(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{%") {
        out.push_str(&rest[..start]);
        let tag = &rest[start + 2..];
        let Some(end) = tag.find("%}") else {
            rest = &rest[start..];
            break;
        };
        let inner = &tag[..end];
        let body = inner
            .trim_start_matches(['-', '+'])
            .trim_end_matches(['-', '+']);
        let (left, right) = (
            &inner[..inner.len() - inner.trim_start_matches(['-', '+']).len()],
            &inner[inner.trim_end_matches(['-', '+']).len()..],
        );
        match body.trim() {
            "generation" => out.push_str(&format!("{{%{left} if true {right}%}}")),
            "endgeneration" => out.push_str(&format!("{{%{left} endif {right}%}}")),
            _ => out.push_str(&rest[start..start + 2 + end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

/// Python's `str` of a value, as jinja2 prints it (`True`, `None`, `['a']`).
fn py_str(v: &Value) -> String {
    match v.kind() {
        ValueKind::String => v.as_str().unwrap_or("").to_string(),
        _ => py_repr(v),
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
/// separators=None, sort_keys=False)`.
fn tojson(value: &Value, kwargs: Kwargs) -> Result<String, Error> {
    let ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    let indent = match kwargs.get::<Option<Value>>("indent")? {
        Some(v) if v.is_integer() => Some(" ".repeat(v.as_i64().unwrap_or(0).max(0) as usize)),
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
    }
    .write(value, 0, &mut out)?;
    Ok(out)
}

struct Json {
    ascii: bool,
    indent: Option<String>,
    item: String,
    key: String,
    sort: bool,
}

impl Json {
    fn newline(&self, level: usize, out: &mut String) {
        if let Some(indent) = &self.indent {
            out.push('\n');
            (0..level).for_each(|_| out.push_str(indent));
        }
    }

    fn write(&self, v: &Value, level: usize, out: &mut String) -> Result<(), Error> {
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
            self.newline(level + 1, out);
            if let Some(name) = name {
                self.string(name, out);
                out.push_str(&self.key);
            }
            self.write(x, level + 1, out)?;
        }
        self.newline(level, out);
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
