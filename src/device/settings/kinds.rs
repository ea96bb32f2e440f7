//! The typed values of the settings ([`Settings`](super::Settings)): each
//! enum is one variable's choices, named as the variable spells them.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// How kernel variants are chosen by measurement in this process
/// (`WGPU_TP_TUNE`, `WGPU_TP_TUNE_DIR`, `WGPU_TP_TUNE_BUDGET_MS`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// Measure candidates (else every kernel takes its guess).
    pub enabled: bool,
    /// Where choices are kept between processes (`None`: nowhere).
    pub dir: Option<PathBuf>,
    /// The most time the process spends measuring, pipeline builds included.
    pub budget: Duration,
}

/// The limits a mesh's devices open with (`WGPU_TP_LIMITS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LimitsPreset {
    /// The adapter's own limits.
    #[default]
    Adapter,
    /// `wgpu::Limits::default()`: what browsers' WebGPU guarantees.
    WebGpu,
    /// `wgpu::Limits::downlevel_defaults()`: GLES 3.1-class devices.
    Downlevel,
}

impl LimitsPreset {
    /// The limits to open devices with (`None`: the adapter's own).
    pub fn limits(self) -> Option<wgpu::Limits> {
        match self {
            LimitsPreset::Adapter => None,
            LimitsPreset::WebGpu => Some(wgpu::Limits::default()),
            LimitsPreset::Downlevel => Some(wgpu::Limits::downlevel_defaults()),
        }
    }
}

/// Which GEMM kernel to run (see the `kernels::gemm` module docs); the
/// process-wide choice is `WGPU_TP_GEMM_VARIANT`, one call's
/// [`GemmOptions::variant`](crate::kernels::GemmOptions::variant).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GemmVariant {
    /// The settings' variant if not `Auto`, else `Gemv` for products of
    /// a few rows, `Coop` for f16 products where the adapter has it,
    /// `Texture` on CPU adapters and `Tiled` on other adapters.
    #[default]
    Auto,
    /// The register kernel reading A and B from RGBA textures they are
    /// copied into (packed first where a row is not a multiple of 64 f32 /
    /// 128 f16 elements, and where transposed unless the kernel shares rows
    /// by subgroup and the product is large): the fastest on CPU adapters,
    /// whose drivers fetch texels much faster than storage loads. Products
    /// with a side over `max_texture_dimension_2d` run as parts that fit.
    /// On CPU adapters the textures are bound as read-only storage textures
    /// (loaded faster than sampled texels there), elsewhere as sampled ones.
    Texture,
    /// `Texture` with A and B bound as sampled textures (`texture_2d`).
    SampledTexture,
    /// `Texture` with A and B bound as read-only storage textures
    /// (`texture_storage_2d`); sampled textures where the device cannot
    /// bind two of them in a kernel.
    StorageTexture,
    /// Register-tiled, no workgroup memory, reading storage buffers. Operands
    /// whose layout it cannot read in place (transposed, or a contiguous
    /// dimension not a multiple of 4) are packed first.
    Buffer,
    /// Workgroup-memory tiled: for real GPUs; any shape (transposed operands
    /// are packed first).
    Tiled,
    /// Cooperative matrices (tensor cores; `shaders/gemm_coop.wgsl`): f16 A
    /// and B in 16×16×16 steps accumulated in f32, any shape (transposed
    /// operands packed first). `Auto` takes it for f16 products where
    /// [`Device::has_coop_f16`](crate::Device::has_coop_f16); asked for
    /// elsewhere, or with f32 operands, it is an error.
    Coop,
    /// The `Buffer` kernel with both operands always packed: the path ragged
    /// shapes take, forced (for tests and benchmarks).
    PackedBuffer,
    /// The small-M kernel (`shaders/gemv.wgsl`): A of at most
    /// [`GEMV_MAX_ROWS`](crate::kernels::gemv::GEMV_MAX_ROWS) rows, B read
    /// where it is stored (no pack; on CPU adapters a weight read again
    /// through a kept texture copy, the same bits). `Auto` takes it for
    /// such products on every adapter.
    Gemv,
}

impl GemmVariant {
    /// Every variant with the names `WGPU_TP_GEMM_VARIANT` takes (the first
    /// is the canonical one; `cpu` and `generic` are old names).
    pub const NAMES: &[(GemmVariant, &[&str])] = &[
        (GemmVariant::Auto, &["auto"]),
        (GemmVariant::Texture, &["texture"]),
        (GemmVariant::SampledTexture, &["sampled-texture"]),
        (GemmVariant::StorageTexture, &["storage-texture"]),
        (GemmVariant::Buffer, &["buffer", "cpu"]),
        (GemmVariant::Tiled, &["tiled"]),
        (GemmVariant::Coop, &["coop"]),
        (GemmVariant::PackedBuffer, &["packed-buffer", "generic"]),
        (GemmVariant::Gemv, &["gemv"]),
    ];

    /// The variant a name means (case-insensitive), if any.
    pub fn parse(name: &str) -> Option<GemmVariant> {
        let name = name.trim().to_ascii_lowercase();
        let found = GemmVariant::NAMES.iter().find(|(_, n)| n.contains(&&*name));
        found.map(|(v, _)| *v)
    }
}

/// How the lanes of a register tile split it (the tile name's suffix).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TileLanes {
    /// `m`: each lane its own rows.
    Rows,
    /// `n` (or no suffix): each lane its own columns.
    Columns,
    /// `s`: each lane its own columns, A's rows fetched once per subgroup
    /// and broadcast (needs `SUBGROUP`; the workgroup becomes one subgroup).
    SharedRows,
}

/// A GEMM register tile, `TMxTN/WG[m|n|s]` in `WGPU_TP_GEMM_TILE` (e.g.
/// `32x8/8s`): overrides the tile the register kernel would choose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GemmTile {
    /// Rows of C per invocation (TM, at least 1).
    pub rows: usize,
    /// Columns of C per invocation (TN, a positive multiple of 4).
    pub columns: usize,
    /// Invocations per workgroup (WG, at least 1).
    pub workgroup: usize,
    /// How the lanes split the tile.
    pub lanes: TileLanes,
}

impl GemmTile {
    /// Parse `TMxTN/WG[m|n|s]`, e.g. `4x16/8m`.
    pub fn parse(s: &str) -> Option<GemmTile> {
        let s = s.trim();
        let (tile, rest) = s.split_once('/')?;
        let (tm, tn) = tile.split_once('x')?;
        let lanes = match rest.chars().last()? {
            'm' => TileLanes::Rows,
            's' => TileLanes::SharedRows,
            _ => TileLanes::Columns,
        };
        let wg = rest.trim_end_matches(['m', 'n', 's']);
        let t = GemmTile {
            rows: tm.parse().ok()?,
            columns: tn.parse().ok()?,
            workgroup: wg.parse().ok()?,
            lanes,
        };
        t.check().ok().map(|_| t)
    }

    /// Why the tile cannot run, if it cannot.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.rows == 0
            || self.workgroup == 0
            || self.columns == 0
            || !self.columns.is_multiple_of(4)
        {
            return Err(format!(
                "tile {self}: give at least one row and one invocation, and columns a positive \
                 multiple of 4"
            ));
        }
        Ok(())
    }
}

impl fmt::Display for GemmTile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let suffix = match self.lanes {
            TileLanes::Rows => "m",
            TileLanes::Columns => "n",
            TileLanes::SharedRows => "s",
        };
        let (tm, tn, wg) = (self.rows, self.columns, self.workgroup);
        write!(f, "{tm}x{tn}/{wg}{suffix}")
    }
}

/// Which entries attention's products run on (`WGPU_TP_ATTENTION_ENTRIES`),
/// where their sizes let them; all give the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionEntries {
    /// The scalar entries (any sizes).
    Scalar,
    /// The vec4 entries reading storage buffers.
    Buffers,
    /// The vec4 entries reading textures copied for the call.
    Textures,
}
