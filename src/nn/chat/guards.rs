//! What the sandbox's calls do (`sandbox.rs` rewrites the template to make
//! them), and minijinja's built-in filters wrapped in the same checks:
//! each bounds what it would make before making it, and charges what it
//! made to the render's [`Budget`].

use std::sync::Arc;

use minijinja::value::{Rest, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};

use super::limits::{Budget, Capped, ChatLimits, ITEM_BYTES, LIMIT, MAX_NESTING, check_shape};
use super::sandbox::{ADD, CHARGE, CMP, CONCAT, INDEXED, MADE, MUL, STORE};

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
        let budget = Budget::of(state, &l);
        let value = settled(&budget, value)?;
        budget.made(&value)?;
        Ok(value)
    });
    let l = limits.clone();
    env.add_filter(CMP, move |state: &State, value: Value| {
        compared(&Budget::of(state, &l), value)
    });
    let l = limits.clone();
    env.add_function(CHARGE, move |state: &State, bytes: usize| {
        Budget::of(state, &l)
            .charge(bytes)
            .map(|()| Value::from(""))
    });
    let l = limits.clone();
    env.add_filter(INDEXED, move |state: &State, value: Value| {
        let budget = Budget::of(state, &l);
        match value.kind() {
            ValueKind::String => {
                budget.charge(value.as_str().map_or(0, str::len))?;
                Ok(value)
            }
            // Indexing a lazy sequence walks it: made a list (charged) once.
            ValueKind::Iterable => collect(&budget, &[(&value, 1)]),
            _ => Ok(value),
        }
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

/// A result made concrete and charged once: minijinja's lazy sequences (a
/// slice, `map`, `reverse`, `chain`) redo their work each time they are
/// used (a reversed slice copies its list, a chain of a million parts
/// walks them on each lookup), which a template can do a million times.
fn settled(budget: &Budget, value: Value) -> Result<Value, Error> {
    match value.kind() {
        ValueKind::Iterable => collect(budget, &[(&value, 1)]),
        _ => Ok(value),
    }
}

/// `chain`'s result as a plain list or map (see [`settled`]).
fn settled_chain(budget: &Budget, value: Value) -> Result<Value, Error> {
    match value.kind() {
        ValueKind::Seq | ValueKind::Iterable => collect(budget, &[(&value, 1)]),
        ValueKind::Map => {
            let max = budget.limits.max_items;
            let keys: Vec<Value> = value.try_iter()?.take(max.saturating_add(1)).collect();
            budget.items(keys.len())?;
            budget.charge(keys.len().saturating_mul(2 * ITEM_BYTES))?;
            let pairs: Vec<(Value, Value)> = keys
                .into_iter()
                .map(|k| {
                    let v = value.get_item(&k).unwrap_or_default();
                    (k, v)
                })
                .collect();
            Ok(Value::from_iter(pairs))
        }
        _ => Ok(value),
    }
}

/// A value minijinja is about to compare or hash, its cost charged first:
/// a string's bytes; for a list or map, every node and string byte
/// reached (shared parts each time they are reached, as comparing repeats
/// them), refused past `max_items` nodes. A lazy sequence (`select`,
/// `map`) comes back as a list, so that it is walked once.
pub(super) fn compared(budget: &Budget, value: Value) -> Result<Value, Error> {
    walked(budget, value, false)
}

/// [`compared`], and with `print`, refused if it would print to more than
/// `max_value_bytes` (for what minijinja may turn into text).
fn walked(budget: &Budget, value: Value, print: bool) -> Result<Value, Error> {
    let value = match value.kind() {
        ValueKind::String => {
            budget.charge(value.as_str().map_or(0, str::len))?;
            return Ok(value);
        }
        ValueKind::Iterable => collect(budget, &[(&value, 1)])?,
        ValueKind::Seq | ValueKind::Map => value,
        _ => return Ok(value),
    };
    let (_, bytes) = check_shape(&value, budget, print)?;
    budget.charge(bytes)?;
    Ok(value)
}

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
        ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => {
            let n = match v.len() {
                Some(n) => n,
                // A lazy sequence (`chain`, `select`, ...) can be far longer
                // than anything made: counted, up to the limit.
                None => {
                    let max = budget.limits.max_items;
                    v.try_iter()?.take(max.saturating_add(1)).count()
                }
            };
            budget.items(n)?;
            budget.charge(n.saturating_mul(ITEM_BYTES))
        }
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

/// Checks the list splitting `s` on `sep` (`None`: runs of whitespace)
/// at most `maxsplit` times makes, before making it: a 16 MB string split
/// into characters would be 16 million values (770 MB).
pub(super) fn split_bound(
    budget: &Budget,
    s: &str,
    sep: Option<&str>,
    maxsplit: Option<i64>,
) -> Result<(), Error> {
    let pieces = match sep {
        // Rust's `split("")`: an empty piece at each end.
        Some("") => s.chars().count() + 2,
        Some(sep) => s.matches(sep).count() + 1,
        None => s
            .split(|c: char| c.is_whitespace() || ('\x1c'..='\x1f').contains(&c))
            .filter(|p| !p.is_empty())
            .count(),
    };
    let pieces = match maxsplit.and_then(|n| usize::try_from(n).ok()) {
        Some(n) => pieces.min(n.saturating_add(1)),
        None => pieces,
    };
    budget.items(pieces)
}

/// Checks the list of `s`'s lines, before making it.
pub(super) fn lines_bound(budget: &Budget, s: &str) -> Result<(), Error> {
    budget.items(s.matches('\n').count() + 1)
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
