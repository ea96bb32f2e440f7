//! [`ChatLimits`], the bounds on rendering an untrusted chat template, and
//! the per-render [`Budget`] the sandbox (`sandbox.rs`) charges.
//!
//! A chat template is Jinja from a downloaded file: `{{ 'a' * 10**11 }}`,
//! a string doubled sixty times, or two nested `range(100000)` loops would
//! otherwise take all memory or run for hours. Every place where the
//! template can make a value grow goes through a check here: before it
//! allocates, the size it would reach is held against `max_value_bytes`
//! or `max_items`; after, what it made is added to a running total held
//! against `max_total_bytes` (so no number of steps, each within bounds,
//! adds up to more); instructions are counted against `fuel`, and the
//! rendered text against `max_output_bytes`.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use minijinja::value::{Object, Value, ValueKind};
use minijinja::{Error, ErrorKind, State};

/// Bounds on the work and memory of rendering one chat template, from
/// [`ChatTemplate::with_limits`](super::ChatTemplate::with_limits).
///
/// Chat templates come from model files (`tokenizer_config.json`,
/// `chat_template.jinja`), which are downloaded and so untrusted; a render
/// that would go past a limit stops with an [`Error::Tokenizer`](crate::Error)
/// naming the limit, within about a second, and the template stays usable.
/// The defaults are far above what real templates need: those of
/// `tests/fixtures/chat` render their test conversations with a hundredth
/// of each, and 2000-message conversations with the defaults. For a
/// template you trust (one you wrote), raise them:
///
/// ```no_run
/// # use wgpu_tp::nn::{ChatLimits, ChatTemplate};
/// # fn main() -> wgpu_tp::Result<()> {
/// let template = ChatTemplate::from_dir("model")?.with_limits(ChatLimits {
///     max_output_bytes: 64 << 20,
///     ..ChatLimits::default()
/// })?;
/// // or no limits at all:
/// let trusted = ChatTemplate::from_dir("model")?.with_limits(ChatLimits::unlimited())?;
/// # Ok(()) }
/// ```
///
/// `docs/SETTINGS.md` ("Limits on untrusted model files") has the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatLimits {
    /// Template instructions one render may run (minijinja's fuel: about
    /// one per variable, operator, filter call, output and loop step).
    /// Default 10 000 000, under a second; the templates of
    /// `tests/fixtures/chat` spend 200 to 300 per message, so this is
    /// tens of thousands of messages. `u64::MAX`: no limit.
    pub fuel: u64,
    /// Bytes of rendered text. Default 16 MiB, four times what a
    /// million-token context holds (about 4 MiB of English).
    pub max_output_bytes: usize,
    /// Bytes of any one string the template builds (`~`, `+`, `*`,
    /// `join`, `replace`, `format`, `indent`, string methods, `tojson`,
    /// printing a list), and of what a list or dict prints as. Default
    /// 16 MiB. Templates copy message text, so a single message must fit.
    pub max_value_bytes: usize,
    /// Items of any one list or dict the template builds (`+`, `*`,
    /// `list`, `batch`, `slice`, ...) or walks to print, store, compare or
    /// hash (shared parts counted each time they are reached). Default
    /// 1 000 000.
    pub max_items: usize,
    /// Bytes the template's string and list operations may make and read
    /// in one render, all together (a list item counts 16). This bounds
    /// its memory, and its time beyond `fuel`. Default 256 MiB.
    pub max_total_bytes: usize,
}

impl Default for ChatLimits {
    fn default() -> ChatLimits {
        ChatLimits {
            fuel: 10_000_000,
            max_output_bytes: 16 << 20,
            max_value_bytes: 16 << 20,
            max_items: 1_000_000,
            max_total_bytes: 256 << 20,
        }
    }
}

impl ChatLimits {
    /// No limits, for a template you trust: renders as plain minijinja
    /// does (its recursion limit and 100 MB cap on `'a' * n` remain).
    pub fn unlimited() -> ChatLimits {
        ChatLimits {
            fuel: u64::MAX,
            max_output_bytes: usize::MAX,
            max_value_bytes: usize::MAX,
            max_items: usize::MAX,
            max_total_bytes: usize::MAX,
        }
    }

    /// The fuel to give minijinja: `None` (no tracking) for `u64::MAX`;
    /// minijinja counts it in an `isize`, so at most `isize::MAX`.
    pub(super) fn engine_fuel(&self) -> Option<u64> {
        (self.fuel != u64::MAX).then(|| self.fuel.min(isize::MAX as u64))
    }
}

/// Marks the errors a limit makes (`render_with` words them).
pub(super) const LIMIT: &str = "limit: ";

/// How deep a value may nest for the template to print, compare-walk or
/// store it (a namespace holding itself would otherwise recurse forever).
pub(super) const MAX_NESTING: usize = 100;

/// What a list item counts against `max_total_bytes`.
pub(super) const ITEM_BYTES: usize = 16;

/// The error of going past `field` (a [`ChatLimits`] field) of `limit`.
pub(super) fn over(field: &str, limit: impl fmt::Display, what: &str) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("{LIMIT}{what} (ChatLimits::{field} = {limit})"),
    )
}

/// The running total of one render, shared by its macros (a minijinja temp).
#[derive(Debug)]
pub(super) struct Budget {
    pub(super) limits: Arc<ChatLimits>,
    total: AtomicUsize,
}

impl Object for Budget {}

impl Budget {
    /// This render's budget.
    pub(super) fn of(state: &State, limits: &Arc<ChatLimits>) -> Arc<Budget> {
        state.get_or_set_temp_object("__sandbox_budget", || Budget {
            limits: limits.clone(),
            total: AtomicUsize::new(0),
        })
    }

    /// Adds `bytes` to the running total.
    pub(super) fn charge(&self, bytes: usize) -> Result<(), Error> {
        let limit = self.limits.max_total_bytes;
        let before = self.total.fetch_add(bytes, Ordering::Relaxed);
        if before.saturating_add(bytes) > limit {
            self.total.store(limit, Ordering::Relaxed);
            return Err(over(
                "max_total_bytes",
                limit,
                &format!("more than {limit} bytes of strings and lists made and read in all"),
            ));
        }
        Ok(())
    }

    /// Checks a string of `bytes` may be made, before making it.
    pub(super) fn string(&self, bytes: usize) -> Result<(), Error> {
        let limit = self.limits.max_value_bytes;
        if bytes > limit {
            return Err(over(
                "max_value_bytes",
                limit,
                &format!("a string of {bytes} bytes"),
            ));
        }
        Ok(())
    }

    /// Checks a list of `items` may be made, before making it.
    pub(super) fn items(&self, items: usize) -> Result<(), Error> {
        let limit = self.limits.max_items;
        if items > limit {
            return Err(over(
                "max_items",
                limit,
                &format!("a list of {items} items"),
            ));
        }
        Ok(())
    }

    /// Checks and charges a value just made: its bytes if a string, its
    /// items if a list or map (the items themselves were charged when made).
    pub(super) fn made(&self, value: &Value) -> Result<(), Error> {
        match value.kind() {
            ValueKind::String => {
                let bytes = value.as_str().map_or(0, str::len);
                self.string(bytes)?;
                self.charge(bytes)
            }
            ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => match value.len() {
                Some(items) => {
                    self.items(items)?;
                    self.charge(items.saturating_mul(ITEM_BYTES))
                }
                None => Ok(()),
            },
            _ => Ok(()),
        }
    }
}

/// The size of a value when walked: its nodes and about how many bytes it
/// prints as.
#[derive(Default)]
struct Walk {
    nodes: usize,
    bytes: usize,
}

/// Checks that `value` can be printed or walked: nested at most
/// [`MAX_NESTING`] deep, at most `max_items` lists, maps and items in all,
/// and (with `bytes`) printing to at most `max_value_bytes`. Shared parts
/// count each time they are reached, as printing repeats them. Returns
/// the nodes it visited and about how many bytes it prints as; charges the
/// nodes to the budget.
pub(super) fn check_shape(
    value: &Value,
    budget: &Budget,
    bytes: bool,
) -> Result<(usize, usize), Error> {
    fn walk(
        v: &Value,
        depth: usize,
        w: &mut Walk,
        budget: &Budget,
        bytes: bool,
    ) -> Result<(), Error> {
        let limits = &budget.limits;
        w.nodes += 1;
        if w.nodes > limits.max_items {
            return Err(over(
                "max_items",
                limits.max_items,
                &format!(
                    "a value of more than {} lists, maps and items",
                    limits.max_items
                ),
            ));
        }
        match v.kind() {
            ValueKind::String => w.bytes += v.as_str().map_or(0, str::len) + 2,
            ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => {
                if depth >= MAX_NESTING {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        format!(
                            "{LIMIT}a value nested more than {MAX_NESTING} deep (one that holds itself?)"
                        ),
                    ));
                }
                w.bytes += 2;
                let map = v.kind() == ValueKind::Map;
                if let Ok(items) = v.try_iter() {
                    for item in items {
                        if map {
                            let value = v.get_item(&item).unwrap_or_default();
                            walk(&item, depth + 1, w, budget, bytes)?;
                            walk(&value, depth + 1, w, budget, bytes)?;
                        } else {
                            walk(&item, depth + 1, w, budget, bytes)?;
                        }
                        w.bytes += 2;
                    }
                }
            }
            _ => w.bytes += 24,
        }
        if bytes && w.bytes > limits.max_value_bytes {
            return Err(over(
                "max_value_bytes",
                limits.max_value_bytes,
                &format!(
                    "a value that prints to more than {} bytes",
                    limits.max_value_bytes
                ),
            ));
        }
        Ok(())
    }
    if !matches!(
        value.kind(),
        ValueKind::Seq | ValueKind::Map | ValueKind::Iterable
    ) {
        return Ok((1, value.as_str().map_or(24, str::len)));
    }
    let mut w = Walk::default();
    walk(value, 0, &mut w, budget, bytes)?;
    budget.charge(w.nodes.saturating_mul(ITEM_BYTES))?;
    Ok((w.nodes, w.bytes))
}

/// A `String` that refuses to grow past `max` bytes (a formatting sink).
pub(super) struct Capped {
    pub(super) text: String,
    max: usize,
    overflowed: bool,
}

impl Capped {
    pub(super) fn new(max: usize) -> Capped {
        Capped {
            text: String::new(),
            max,
            overflowed: false,
        }
    }

    /// `write!` into it, turning running out into the `max_value_bytes`
    /// error.
    pub(super) fn write(&mut self, args: fmt::Arguments) -> Result<(), Error> {
        match fmt::Write::write_fmt(self, args) {
            Ok(()) => Ok(()),
            Err(_) if self.overflowed => Err(over(
                "max_value_bytes",
                self.max,
                &format!("a string of more than {} bytes", self.max),
            )),
            Err(_) => Err(Error::new(
                ErrorKind::InvalidOperation,
                "could not print a value",
            )),
        }
    }
}

impl fmt::Write for Capped {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.text.len().saturating_add(s.len()) > self.max {
            self.overflowed = true;
            return Err(fmt::Error);
        }
        self.text.push_str(s);
        Ok(())
    }
}

/// An `io::Write` of the rendered text that refuses to grow past `max`
/// bytes.
pub(super) struct CappedOutput {
    pub(super) bytes: Vec<u8>,
    pub(super) max: usize,
    pub(super) overflowed: bool,
}

impl std::io::Write for CappedOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len().saturating_add(buf.len()) > self.max {
            self.overflowed = true;
            return Err(std::io::Error::other("output limit"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
