//! minijinja's built-in filters wrapped in the sandbox's checks: a filter's
//! input is charged as read, what it would make is bounded first
//! ([`before`], `bounds.rs`), whatever it compares, hashes or prints among
//! its arguments is walked ([`checked_args`]), and its result is made
//! concrete and charged.

use std::sync::Arc;

use minijinja::value::{Rest, Value, ValueKind};
use minijinja::{Environment, Error, State};

use super::bounds::{
    format_bound, join_bound, lines_bound, printed, read, replace_bound, split_bound,
};
use super::guards::{compared, settled, settled_chain, walked};
use super::limits::{Budget, Capped, ChatLimits};

/// The filters that compare or hash the items of their input.
const COMPARES_ITEMS: [&str; 6] = ["sort", "unique", "groupby", "dictsort", "min", "max"];

/// The filters that compare items with their test's arguments.
const COMPARES_WITH_ARGS: [&str; 4] = ["select", "reject", "selectattr", "rejectattr"];

/// `args` of filter `name` with what it will hash, compare or print
/// charged first ([`walked`]): every argument after the input (a test's
/// arguments, an attribute name, a separator, keyword arguments), and the
/// input of a filter that compares its items or of a select with a test.
fn checked_args(name: &str, budget: &Budget, args: &[Value]) -> Result<Vec<Value>, Error> {
    let mut args = args.to_vec();
    // A select's test (`lower`, `equalto`, ...) may read each item whole.
    let test_name = if name.ends_with("attr") { 2 } else { 1 };
    let mut test_args = false;
    for (i, a) in args.iter_mut().enumerate().skip(1) {
        test_args |= COMPARES_WITH_ARGS.contains(&name) && i >= test_name && !a.is_kwargs();
        *a = walked(budget, a.clone(), true)?;
    }
    if (COMPARES_ITEMS.contains(&name) || test_args)
        && let Some(first) = args.first_mut()
    {
        *first = compared(budget, first.clone())?;
    }
    Ok(args)
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
        "batch" | "slice" => {
            if let Some(s) = first.as_str() {
                budget.items(s.chars().count())?;
            }
            match args.get(1).and_then(|v| v.as_usize()) {
                Some(count) => budget.items(count),
                None => Ok(()),
            }
        }
        "split" => match first.as_str() {
            Some(s) => {
                let sep = args.get(1).and_then(|v| v.as_str());
                let max = args.get(2).and_then(|v| i64::try_from(v.clone()).ok());
                split_bound(budget, s, sep, max)
            }
            None => printed(budget, &first).map(|_| ()),
        },
        "lines" => match first.as_str() {
            Some(s) => lines_bound(budget, s),
            None => printed(budget, &first).map(|_| ()),
        },
        // A string iterated into a list: a list item a character.
        "list" | "sort" | "unique" | "groupby" | "min" | "max" | "map" | "select" | "reject"
        | "selectattr" | "rejectattr"
            if first.kind() == ValueKind::String =>
        {
            budget.items(first.as_str().map_or(0, |s| s.chars().count()))
        }
        "escape" | "e" | "safe" | "lower" | "upper" | "title" | "capitalize" => {
            printed(budget, &first).map(|_| ())
        }
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

/// The filters that walk their whole input, when called or, for the lazy
/// ones (`map`, `select`, `chain`, ...), when what they return is used:
/// its length is charged when they are called (others take constant time,
/// as `length` or `first`).
const WALKS: &[&str] = &[
    "list",
    "sort",
    "unique",
    "join",
    "groupby",
    "dictsort",
    "sum",
    "min",
    "max",
    "batch",
    "slice",
    "reverse",
    "items",
    "tojson",
    "string",
    "trim",
    "pprint",
    "format",
    "indent",
    "select",
    "reject",
    "selectattr",
    "rejectattr",
    "map",
    "chain",
    "zip",
    "last",
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
        let args = checked_args(name, &budget, &args)?;
        let rv = if name == "pprint" {
            // minijinja's `format!("{value:#?}")`, into a bounded string.
            let value = args.first().cloned().unwrap_or_default();
            let mut out = Capped::new(budget.limits.max_value_bytes);
            out.write(format_args!("{value:#?}"))?;
            Value::from(out.text)
        } else {
            filter.call(state, &args)?
        };
        let rv = if name == "chain" {
            settled_chain(&budget, rv)?
        } else {
            settled(&budget, rv)?
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
