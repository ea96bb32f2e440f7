//! What the sandbox's calls do (`sandbox.rs` rewrites the template to make
//! them): each bounds what it would make before making it, and charges
//! what it made to the render's [`Budget`]. minijinja's built-in filters
//! get the same checks in `filters.rs`.

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
pub(super) fn settled(budget: &Budget, value: Value) -> Result<Value, Error> {
    match value.kind() {
        ValueKind::Iterable => collect(budget, &[(&value, 1)]),
        _ => Ok(value),
    }
}

/// `chain`'s result as a plain list or map (see [`settled`]).
pub(super) fn settled_chain(budget: &Budget, value: Value) -> Result<Value, Error> {
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
pub(super) fn walked(budget: &Budget, value: Value, print: bool) -> Result<Value, Error> {
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
