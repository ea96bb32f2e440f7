//! What a string or list operation would make, bounded before it makes it
//! (`replace`, `format`, `join`, `split`, `lines`), and the charge for
//! reading its input: shared by the wrapped filters (`filters.rs`) and
//! Python's methods (`python.rs`).

use minijinja::Error;
use minijinja::value::{Value, ValueKind};

use super::limits::{Budget, ITEM_BYTES, check_shape};

/// What printing a value for `replace`, `format` or `join` takes, at most:
/// its bytes if a string, else what [`check_shape`] makes of it.
pub(super) fn printed(budget: &Budget, v: &Value) -> Result<usize, Error> {
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
