//! [`Settings`]: every process-wide knob of the crate as a typed field,
//! one per `WGPU_TP_*` variable (docs/SETTINGS.md has the table), and the
//! checks a value set in code must pass.

use std::path::PathBuf;
use std::time::Duration;

use super::kinds::{AttentionEntries, GemmTile, GemmVariant, LimitsPreset, Tuning};
use crate::error::{Error, Result};

/// MPI collectives' default limit on waiting for a peer.
const MPI_TIMEOUT: Duration = Duration::from_secs(300);

/// Kernel tuning's default budget per process.
const TUNE_BUDGET: Duration = Duration::from_millis(3000);

/// The crate's process-wide settings: read once from the `WGPU_TP_*`
/// environment variables at first use ([`Settings::from_env`]), read with
/// [`settings`](crate::settings) and changed in code with
/// [`set_settings`](crate::set_settings) /
/// [`update_settings`](crate::update_settings). Each field names its
/// variable; docs/SETTINGS.md lists them all. A field is read where it
/// acts (a mesh's build, a kernel's call), so a change applies from then on.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Settings {
    /// `WGPU_TP_LIMITS`: the limits meshes open their devices with unless
    /// [`MeshBuilder::limits`](crate::MeshBuilder::limits) gives some.
    pub limits: LimitsPreset,
    /// `WGPU_TP_TRACE`: trace every mesh built from build to drop into this
    /// Chrome JSON file unless [`MeshBuilder::trace_to`](crate::MeshBuilder::trace_to)
    /// names one.
    pub trace: Option<PathBuf>,
    /// `WGPU_TP_TUNE`, `WGPU_TP_TUNE_DIR`, `WGPU_TP_TUNE_BUDGET_MS`: kernel
    /// variants chosen by measurement.
    pub tuning: Tuning,
    /// `WGPU_TP_GEMM_VARIANT`: the GEMM kernel for every product whose call
    /// leaves the variant to `Auto` (`Auto`: chosen by adapter and shape).
    pub gemm_variant: GemmVariant,
    /// `WGPU_TP_GEMM_TILE`: the register kernel's tile (`None`: chosen by
    /// adapter and shape).
    pub gemm_tile: Option<GemmTile>,
    /// `WGPU_TP_GEMV_TEXTURE`: whether the small-M GEMM keeps a texture of
    /// a weight read again on CPU adapters (`None`: by adapter and
    /// measurement; `Some(true)` on every CPU adapter; `Some(false)` never).
    pub gemv_texture: Option<bool>,
    /// `WGPU_TP_PACK_CACHE`: whether the GEMM keeps the packs and texture
    /// copies it derives from a weight until the weight changes.
    pub pack_cache: bool,
    /// `WGPU_TP_ATTENTION_ENTRIES`: the entries attention's products take
    /// where their sizes let them (`None`: chosen by adapter and shape).
    pub attention_entries: Option<AttentionEntries>,
    /// `WGPU_TP_MPI_TIMEOUT` (seconds): how long an MPI collective waits
    /// for a peer before it fails, unless
    /// [`MeshBuilder::mpi_timeout`](crate::MeshBuilder::mpi_timeout) sets it.
    pub mpi_timeout: Duration,
}

impl Default for Settings {
    /// The settings of an empty environment (no tuning cache directory:
    /// [`Settings::from_env`] finds one from `XDG_CACHE_HOME` or `HOME`).
    fn default() -> Settings {
        Settings {
            limits: LimitsPreset::Adapter,
            trace: None,
            tuning: Tuning {
                // A browser cannot wait for measurements.
                enabled: !cfg!(target_arch = "wasm32"),
                dir: None,
                budget: TUNE_BUDGET,
            },
            gemm_variant: GemmVariant::Auto,
            gemm_tile: None,
            gemv_texture: None,
            pack_cache: true,
            attention_entries: None,
            mpi_timeout: MPI_TIMEOUT,
        }
    }
}

impl Settings {
    /// The hash of the kernels' code this build carries (`build.rs` sets
    /// `WGPU_TP_KERNELS_HASH` at compile time; the run-time environment
    /// cannot change it): tuned choices on disk are keyed by it.
    pub fn kernels_hash() -> &'static str {
        env!("WGPU_TP_KERNELS_HASH")
    }

    /// Whether every field holds a value the crate can use, else an error
    /// naming the field and what it takes.
    pub fn validate(&self) -> Result<()> {
        const OP: &str = "set_settings";
        if let Some(t) = &self.gemm_tile {
            t.check()
                .map_err(|m| Error::invalid(OP, format!("gemm_tile: {m}")))?;
        }
        if self
            .trace
            .as_ref()
            .is_some_and(|p| p.as_os_str().is_empty())
        {
            return Err(Error::invalid(
                OP,
                "trace: give a file path, or None for no trace",
            ));
        }
        if (self.tuning.dir.as_ref()).is_some_and(|p| p.as_os_str().is_empty()) {
            return Err(Error::invalid(
                OP,
                "tuning.dir: give a directory, or None to keep no choices on disk",
            ));
        }
        if self.mpi_timeout.is_zero() {
            return Err(Error::invalid(
                OP,
                "mpi_timeout: give a positive duration (the default is 300 s)",
            ));
        }
        Ok(())
    }
}
