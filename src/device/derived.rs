//! What kernels derive from a buffer and may keep while it is unchanged
//! (the GEMM's packs and texture copies of a weight): cached with the
//! buffer's storage, so they go when it goes, and keyed by a version that
//! every in-place write bumps, so a stale one is never handed out. One is
//! kept from its second use between writes (decoding, several forwards per
//! step), not its first (a training step uses each once).
//!
//! Tensors are immutable except for in-place updates (the optimiser
//! kernels), and every kernel that writes a buffer bumps its version when
//! it is recorded (`dispatch.rs`); a derived operand recorded after that
//! reads the new values, since one device records in order. Host values
//! written in place ([`LocalTensor::write_f32`], checkpoint loading) bump it
//! too (`write.rs`).

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::Result;

/// One derived operand: its key, the version it was made from, the value.
type Entry = (String, u64, Arc<dyn Any + Send + Sync>);

/// A buffer's version and the operands derived from its current contents.
#[derive(Default)]
pub(crate) struct DerivedCache {
    version: AtomicU64,
    entries: Mutex<Vec<Entry>>,
    /// Keys asked for once at the current version: kept from the second ask.
    seen: Mutex<Vec<String>>,
}

impl DerivedCache {
    /// The version: bumped by every in-place write.
    pub(crate) fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// An in-place write was recorded: everything derived before is stale
    /// (and freed now).
    pub(crate) fn bump(&self) {
        self.version.fetch_add(1, Ordering::AcqRel);
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.clear();
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Whether `key` was asked for before at `version`; notes it if not.
    /// Only an operand asked for twice between writes is kept: in training
    /// each weight layout is used once between optimiser steps, and keeping
    /// it there would hold an extra copy of the model for no reuse.
    fn asked_before(&self, key: &str, version: u64) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if self.version() != version || seen.iter().any(|k| k == key) {
            return true;
        }
        seen.push(key.to_string());
        false
    }

    /// The operand under `key` derived from the current contents, made by
    /// `make` if there is none, and kept if it was asked for before.
    pub(crate) fn get_or_make<T: Clone + Send + Sync + 'static>(
        &self,
        key: String,
        make: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        let version = self.version();
        {
            let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            let hit = entries
                .iter()
                .find(|(k, v, _)| *k == key && *v == version)
                .and_then(|(_, _, d)| d.downcast_ref::<T>());
            if let Some(d) = hit {
                return Ok(d.clone());
            }
        }
        if !self.asked_before(&key, version) {
            return make();
        }
        let made = make()?;
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        // Written meanwhile: hand it out once, keep nothing.
        if self.version() == version {
            entries.retain(|(k, _, _)| *k != key);
            entries.push((key, version, Arc::new(made.clone())));
        }
        Ok(made)
    }

    /// The operand under `key` if it is kept, or asked for before at this
    /// version (then made and kept); `None`, noting the ask, the first time.
    /// For a derived form that only pays on reuse: the caller reads the
    /// original once and the derived copy from the second use.
    pub(crate) fn get_if_reused<T: Clone + Send + Sync + 'static>(
        &self,
        key: String,
        make: impl FnOnce() -> Result<T>,
    ) -> Result<Option<T>> {
        let version = self.version();
        let kept = self
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|(k, v, _)| *k == key && *v == version);
        if !kept && !self.asked_before(&key, version) {
            return Ok(None);
        }
        // Asked before: get_or_make keeps what it makes.
        self.get_or_make(key, make).map(Some)
    }

    /// Drop the operand kept under `key`, if any (the asks stay noted).
    pub(crate) fn forget(&self, key: &str) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.retain(|(k, _, _)| k != key);
    }

    /// Operands kept (for tests).
    pub(crate) fn len(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}
