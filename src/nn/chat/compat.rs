//! transformers' Jinja environment (`_compile_jinja_template` in
//! `transformers/utils/chat_template_utils.py`) on minijinja: the settings,
//! `raise_exception`, `strftime_now`, how values print, and jinja2's
//! semantics where minijinja's differ: looping over `None` is an error
//! (transformers passes `tools=None` and `documents=None`, and a template
//! that loops over them unguarded fails), an undefined value has length 0
//! and is iterable, `None` is not, `trim` knows Python's whitespace
//! (`\x1c`-`\x1f` included), `string` and `trim` print values as Python's
//! `str`. Python's methods, `str` and `tojson` are `python.rs`; the rewrite
//! of the template's text (`{% generation %}`, `{% for %}`) is `source.rs`.
//!
//! Every filter, method and printed value is checked against the
//! template's [`ChatLimits`] (`sandbox.rs`, `guards.rs`, `limits.rs`).

use std::sync::Arc;

use minijinja::machinery::make_string_output;
use minijinja::value::{Kwargs, Value, ValueIter, ValueKind};
use minijinja::{Environment, Error, ErrorKind, Output, State, UndefinedBehavior};

use super::clock;
use super::filters::{self, add_guarded_filter};
use super::guards;
use super::limits::{Budget, ChatLimits, check_shape};
use super::python::{py_str, py_strip, py_type, python_method, tojson};
use super::sandbox::{self, ITERABLE};
use super::source;

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
    filters::guard_builtin_filters(&mut env, limits);
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
            let budget = Budget::of(state, &l);
            // Starting a loop over a string counts its characters.
            if let Some(s) = value.as_str() {
                budget.charge(s.len())?;
            }
            match raw {
                Some(raw) if raw > 0 => charged(budget, value, raw),
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
    let l = limits.clone();
    env.add_function(
        "raise_exception",
        move |state: &State, message: Value| -> Result<Value, Error> {
            // Printed as jinja2 would, once its size is known to fit.
            check_shape(&message, &Budget::of(state, &l), true)?;
            Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("{RAISED}{message}"),
            ))
        },
    );
    let l = limits.clone();
    env.add_function("strftime_now", move |state: &State, format: Value| {
        let budget = Budget::of(state, &l);
        check_shape(&format, &budget, true)?;
        let format = format.to_string();
        // A directive writes at most 32 bytes (`%c`: 24).
        budget.string(format.len().saturating_mul(16))?;
        let out = Value::from(clock::strftime(&format, clock::now_utc()));
        budget.made(&out)?;
        Ok(out)
    });
    env.add_template_owned(
        "chat_template",
        sandbox::rewrite(&source::rewrite(template))?,
    )?;
    Ok(env)
}

/// How `{{ value }}` prints: Python's `str` for booleans, none, floats,
/// lists and dicts, minijinja's for the rest; charged to the budget.
fn format(budget: &Budget, out: &mut Output, state: &State, value: &Value) -> Result<(), Error> {
    match value.kind() {
        ValueKind::String => {
            let bytes = value.as_str().map_or(0, str::len);
            // Escaping writes up to six bytes a byte (`"` as `&quot;`).
            let escaped =
                !matches!(state.auto_escape(), minijinja::AutoEscape::None) && !value.is_safe();
            budget.charge(if escaped {
                bytes.saturating_mul(6)
            } else {
                bytes
            })?;
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
