//! One settings surface: every `WGPU_TP_*` variable the library reads is a
//! typed field of [`Settings`], read from the environment once, at first
//! use, with a warning on stderr for each malformed value or unknown name;
//! code reads them with [`settings`] and changes them with
//! [`set_settings`] / [`update_settings`] (checked: a bad value is an
//! error, never half-applied). docs/SETTINGS.md has the table.
//!
//! Files: `kinds.rs` (each variable's typed values), `values.rs` (the
//! struct, its defaults and checks), `env.rs` (parsing the environment).

mod env;
mod kinds;
mod values;

use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use crate::error::Result;

pub use kinds::{AttentionEntries, GemmTile, GemmVariant, LimitsPreset, TileLanes, Tuning};
pub use values::Settings;

/// The process's settings, read from the environment at first use.
fn global() -> &'static RwLock<Arc<Settings>> {
    static SETTINGS: OnceLock<RwLock<Arc<Settings>>> = OnceLock::new();
    SETTINGS.get_or_init(|| {
        let (s, warnings) = Settings::from_env();
        for w in warnings {
            eprintln!("wgpu-tp warning: {w}");
        }
        RwLock::new(Arc::new(s))
    })
}

/// The settings now in force, shared (what kernels read on every call: no
/// copy of the paths in them).
pub(crate) fn current() -> Arc<Settings> {
    let lock = global().read().unwrap_or_else(PoisonError::into_inner);
    Arc::clone(&lock)
}

/// This process's settings: the environment's (`WGPU_TP_*`, read at first
/// use) as [`set_settings`] and [`update_settings`] changed them.
pub fn settings() -> Settings {
    Settings::clone(&current())
}

/// Replace this process's settings after checking them
/// ([`Settings::validate`]): an error leaves them as they were. Each takes
/// effect where it is next read (a mesh's build, a kernel's call); kernel
/// choices already measured are kept.
pub fn set_settings(s: Settings) -> Result<()> {
    s.validate()?;
    *global().write().unwrap_or_else(PoisonError::into_inner) = Arc::new(s);
    Ok(())
}

/// Change this process's settings in place, e.g.
/// `update_settings(|s| s.pack_cache = false)`, checked as
/// [`set_settings`] checks them (an error changes nothing).
pub fn update_settings(change: impl FnOnce(&mut Settings)) -> Result<()> {
    let mut lock = global().write().unwrap_or_else(PoisonError::into_inner);
    let mut s = Settings::clone(&lock);
    change(&mut s);
    s.validate()?;
    *lock = Arc::new(s);
    Ok(())
}

/// This process's kernel tuning: [`settings`]`().tuning`.
pub fn tuning() -> Tuning {
    current().tuning.clone()
}

/// Replace this process's kernel tuning (`settings().tuning`; choices
/// already made are kept). A directory of `Some("")` means none.
pub fn set_tuning(t: Tuning) {
    let dir = t.dir.filter(|d| !d.as_os_str().is_empty());
    let mut lock = global().write().unwrap_or_else(PoisonError::into_inner);
    let mut s = Settings::clone(&lock);
    s.tuning = Tuning { dir, ..t };
    *lock = Arc::new(s);
}
