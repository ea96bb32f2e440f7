//! The register kernel's tiles: where it reads A and B ([`Reads`]), which
//! operands it reads as stored or blocked ([`Stored`]), how a workgroup's
//! lanes split C ([`Lanes`]), and the tile each adapter and product takes
//! ([`Tile::for_device`]). The WGSL each tile compiles to is generated in
//! `register.rs`.

use crate::device::settings::{self, GemmTile, TileLanes};
use crate::device::{Device, intel_cpu, old_mesa};

/// Where the register kernel reads A and B: storage buffers of vec4s, or
/// RGBA textures (a texel per four elements of a row; device/texture.rs),
/// which Mesa's CPU drivers fetch much faster, bound as sampled or as
/// read-only storage textures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Reads {
    Buffers,
    /// `texture_2d<f32>`, read with `textureLoad(t, xy, 0)`.
    Textures,
    /// `texture_storage_2d<rgba32float | rgba16float, read>`: on Mesa's
    /// CPU drivers a storage load skips the sampled fetch's mip-level
    /// logic, so it is the cheaper read there.
    StorageTextures,
}

impl Reads {
    /// Whether A and B are textures (sampled or storage).
    pub(super) fn texels(self) -> bool {
        self != Reads::Buffers
    }
}

/// Which operands a kernel reads transposed, as stored: A `[K, M]`
/// (`trans_a`), B `[N, K]` (`trans_b`). Only shared-rows texture tiles read
/// them so ([`Tile::reads_transposed`]); other kernels get them packed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Stored {
    pub(crate) trans_a: bool,
    pub(crate) trans_b: bool,
    /// A (not transposed) packed in blocks of `tm` rows
    /// (`transpose::pack_blocks`), [`BLOCKED_TEXELS`] texels a texture row:
    /// the subgroup's fetches for one step of K are adjacent texels instead
    /// of one per row, `lda` apart. Only shared-rows tiles read A so.
    pub(crate) blocked_a: bool,
    /// B packed in blocks of the workgroup's columns (`span().1`), so that
    /// a lane's texels for one step of K are adjacent, and the subgroup's:
    /// stored `[N, K]` (`trans_b`) by `transpose::pack_blocks`, where they
    /// were one per column of B, a texture row apart; stored `[K, N]` by
    /// `transpose::pack_column_blocks`, where they were in four rows.
    pub(crate) blocked_b: bool,
}

/// Texels per texture row of a blocked A ([`Stored::blocked_a`]): 4 KiB
/// of f32, 2 KiB of f16 (whole 256-byte copy rows either way); a power of
/// two so the kernel's `%` and `/` are masks and shifts.
pub(crate) const BLOCKED_TEXELS: usize = 256;

/// How a workgroup's invocations split its part of C.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Lanes {
    /// Each lane its own rows (`m` in tile names): every lane loads the
    /// same B values.
    Rows,
    /// Each lane its own columns (`n`): every lane loads the same A rows.
    Columns,
    /// Each lane its own columns, A's rows fetched once per subgroup, a
    /// share per lane, and broadcast (`s`; needs `SUBGROUP` and a workgroup
    /// of exactly one subgroup). On lavapipe a fetch costs far more than a
    /// broadcast, so fetching each row once per subgroup beats `Rows`.
    SharedRows,
}

/// Register tile of the register kernel (`register.rs`; buffers or
/// textures): `tm` rows × `tnv` vec4 columns of C per invocation, `wg`
/// invocations per workgroup, split by `lanes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Tile {
    pub(super) tm: usize,
    pub(super) tnv: usize,
    pub(super) wg: usize,
    pub(super) lanes: Lanes,
}

impl Tile {
    /// `tm` rows × `tn` columns (a multiple of 4) per invocation, `wg`
    /// invocations per workgroup.
    const fn new(tm: usize, tn: usize, wg: usize, lanes: Lanes) -> Tile {
        Tile {
            tm,
            tnv: tn / 4,
            wg,
            lanes,
        }
    }

    /// Texels of four columns of C each lane holds (per k, the texels of
    /// B it reads).
    pub(crate) fn lane_texels(self) -> usize {
        self.tnv
    }

    /// C rows and columns one workgroup covers.
    pub(crate) fn span(self) -> (usize, usize) {
        match self.lanes {
            Lanes::Rows => (self.tm * self.wg, 4 * self.tnv),
            Lanes::Columns | Lanes::SharedRows => (self.tm, 4 * self.tnv * self.wg),
        }
    }

    /// The tile a [`GemmTile`] setting names.
    fn from_setting(t: GemmTile) -> Tile {
        let lanes = match t.lanes {
            TileLanes::Rows => Lanes::Rows,
            TileLanes::Columns => Lanes::Columns,
            TileLanes::SharedRows => Lanes::SharedRows,
        };
        Tile::new(t.rows, t.columns, t.workgroup, lanes)
    }

    /// The tile for this device reading this way for an M×N×K product
    /// (`trans_a`: A stored `[K, M]`), or the settings' `gemm_tile`
    /// (`WGPU_TP_GEMM_TILE`) when set (a shared-rows tile only where the
    /// device can run it).
    pub(crate) fn for_device(
        device: &Device,
        reads: Reads,
        (m, n, k): (usize, usize, usize),
        trans_a: bool,
    ) -> Tile {
        let subgroup = fixed_subgroup_size(device);
        let env = settings::current().gemm_tile.map(Tile::from_setting);
        match (env, subgroup) {
            (Some(t), Some(size)) if t.lanes == Lanes::SharedRows => return t.with_wg(size),
            (Some(t), _) if t.lanes != Lanes::SharedRows => return t,
            _ => {}
        }
        let info = device.adapter_info();
        let old_mesa = old_mesa(device);
        let small = small_product(m as u64 * n as u64 * k as u64);
        // Storage and sampled textures take the same tiles.
        match (
            reads.texels(),
            subgroup,
            info.backend == wgpu::Backend::Gl || old_mesa,
        ) {
            (true, Some(size), _) if small => TILE_TEXTURES_SHARED_SMALL.with_wg(size),
            (true, None, _) if small => TILE_TEXTURES_SMALL,
            (true, Some(size), false)
                if (trans_a && k > LONG_K) || (device.is_cpu() && intel_cpu()) =>
            {
                TILE_TEXTURES_SHARED_TALL.with_wg(size)
            }
            (true, Some(size), _) => TILE_TEXTURES_SHARED.with_wg(size),
            (true, None, true) => TILE_TEXTURES_OLD_MESA,
            (true, None, false) => TILE_TEXTURES,
            (false, _, true) => TILE_LOAD_BOUND,
            (false, _, false) => TILE_DEFAULT,
        }
    }

    /// Whether this tile reads transposed operand textures in place
    /// ([`Stored`]): shared-rows tiles with whole texels of rows.
    pub(crate) fn reads_transposed(self) -> bool {
        self.lanes == Lanes::SharedRows && self.tm.is_multiple_of(4)
    }

    /// Whether this tile can read A in blocks of its rows
    /// ([`Stored::blocked_a`]): shared-rows tiles whose rows the subgroup
    /// fetches in whole rounds, so no lane reads past its block.
    pub(crate) fn reads_blocked(self) -> bool {
        self.reads_transposed() && self.tm.is_multiple_of(self.wg)
    }

    /// What this tile reads of `wanted` (the operands the caller would
    /// have read as stored, or blocked): transposed operands only where it
    /// reads them so ([`Tile::reads_transposed`]); blocked ones only from
    /// textures, on tiles that can ([`Tile::reads_blocked`]), A only when
    /// not transposed (B either way), and B only where a
    /// lane's `4·tnv` texels of one step of K never straddle a texture row
    /// (the kernel addresses them from the first). The one place these
    /// rules live: [`Tile::program`] and the GEMM both go through it.
    pub(crate) fn layout(self, reads: Reads, wanted: Stored) -> Stored {
        let transposed = self.reads_transposed();
        let blocks = self.reads_blocked() && reads.texels();
        let (trans_a, trans_b) = (wanted.trans_a && transposed, wanted.trans_b && transposed);
        Stored {
            trans_a,
            trans_b,
            blocked_a: wanted.blocked_a && !trans_a && blocks,
            blocked_b: wanted.blocked_b && blocks && BLOCKED_TEXELS.is_multiple_of(4 * self.tnv),
        }
    }

    fn with_wg(self, wg: usize) -> Tile {
        Tile { wg, ..self }
    }
}

/// The buffer-reading tile (operands past the texture limit) on lavapipe
/// from Mesa ≥ 24 and other non-GL adapters: small enough to compile
/// quickly, and larger tiles were no faster there (measured: see BENCHMARKS.md).
pub(super) const TILE_DEFAULT: Tile = Tile::new(4, 4, 8, Lanes::Rows);

/// The buffer-reading tile on Mesa < 24 (lavapipe 22.3, GL llvmpipe), where
/// storage loads cost even more, so speed grows with FMAs per load; the
/// largest tile that still compiles in a couple of seconds.
pub(super) const TILE_LOAD_BOUND: Tile = Tile::new(4, 16, 8, Lanes::Rows);

/// The texture-reading kernel's tile where subgroups work (lavapipe): 16
/// rows × 8 columns per lane, the rows shared by the subgroup; the fastest
/// tile with blocked operands on AMD CPUs, and quicker to compile than
/// taller ones. Intel CPUs take `TILE_TEXTURES_SHARED_TALL` on Mesa ≥ 24
/// instead. `wg` becomes the subgroup size.
pub(super) const TILE_TEXTURES_SHARED: Tile = Tile::new(16, 8, 8, Lanes::SharedRows);

/// K above which a product reading A transposed as stored (`[K, M]`, the
/// weight gradient's dyᵀ) takes `TILE_TEXTURES_SHARED_TALL` on Mesa ≥ 24.
const LONG_K: usize = 2048;

/// The shared-rows tile with 32 rows a lane, on Mesa ≥ 24 for every large
/// product on Intel CPUs (faster there than 16×8, unlike on AMD) and,
/// elsewhere, for A read transposed over a long K, where twice the rows per
/// texel row read keeps it fed. It compiles slower, which only large
/// products pay.
pub(super) const TILE_TEXTURES_SHARED_TALL: Tile = Tile::new(32, 8, 8, Lanes::SharedRows);

/// Whether a product of `macs` multiply-adds is below 2^24 (256³): such
/// products take `TILE_TEXTURES_SHARED_SMALL` or `TILE_TEXTURES_SMALL` and
/// have transposed operands
/// packed rather than read in place. They take milliseconds at any tile,
/// so compiling (once per layout and device) is what a user waits for.
pub(crate) fn small_product(macs: u64) -> bool {
    macs < 1 << 24
}

/// The shared-rows tile for small products: it compiles in a fraction of
/// the large tiles' time, which a pipeline per layout and device pays
/// several times over on a fresh shader cache.
pub(super) const TILE_TEXTURES_SHARED_SMALL: Tile = Tile::new(8, 8, 8, Lanes::SharedRows);

/// The texture tile for small products without subgroups (GL llvmpipe):
/// it compiles several times faster than the large tile, whose compiles
/// once per device dominated the GL test suite's time.
pub(super) const TILE_TEXTURES_SMALL: Tile = Tile::new(4, 8, 8, Lanes::Rows);

/// The texture-reading kernel's tile on lavapipe from Mesa ≥ 24 without
/// subgroups: much faster than the buffer kernel, and compiles in under
/// a second; wider tiles gained little for much longer compiles.
pub(super) const TILE_TEXTURES: Tile = Tile::new(16, 16, 8, Lanes::Rows);

/// The texture-reading kernel's tile on Mesa < 24 (lavapipe 22.3, GL
/// llvmpipe), where larger kernels compile much slower: smaller than
/// `TILE_TEXTURES`, and still far faster than the buffer kernel there.
pub(super) const TILE_TEXTURES_OLD_MESA: Tile = Tile::new(8, 16, 8, Lanes::Rows);

/// The device's subgroup size where a shared-rows tile can use it:
/// `SUBGROUP` enabled and one size for every pipeline (so a workgroup of
/// that many invocations is exactly one subgroup).
fn fixed_subgroup_size(device: &Device) -> Option<usize> {
    let info = device.adapter_info();
    let (min, max) = (info.subgroup_min_size, info.subgroup_max_size);
    (device.features().contains(wgpu::Features::SUBGROUP) && min == max && (4..=64).contains(&min))
        .then_some(min as usize)
}

/// Whether products reading B stored `[K, N]` should take it in blocks of
/// the workgroup's columns (`transpose::pack_column_blocks`): the packing
/// made dx and dW faster on Mesa ≥ 24 lavapipe but slower on Mesa 22.3.
pub(crate) fn column_blocks_pay(device: &Device) -> bool {
    !old_mesa(device)
}

#[cfg(test)]
mod tests {
    use super::{Lanes, Reads, Stored, Tile};

    #[test]
    fn tile_settings_name_their_tiles() {
        use crate::device::settings::GemmTile;
        for (name, tile) in [
            ("32x8/8s", Tile::new(32, 8, 8, Lanes::SharedRows)),
            ("4x16/8m", Tile::new(4, 16, 8, Lanes::Rows)),
            ("4x16/16n", Tile::new(4, 16, 16, Lanes::Columns)),
        ] {
            let setting = GemmTile::parse(name).expect(name);
            assert_eq!(Tile::from_setting(setting), tile, "{name}");
        }
    }

    #[test]
    fn blocked_b_only_where_a_lanes_texels_share_a_texture_row() {
        // 32×12 (WGPU_TP_GEMM_TILE=32x12/8s): 12 texels a lane, which cross
        // 256-texel rows; its products were wrong when B was blocked.
        let wanted = Stored {
            trans_a: false,
            trans_b: true,
            blocked_a: true,
            blocked_b: true,
        };
        let blocked_b = |t: Tile| t.layout(Reads::StorageTextures, wanted).blocked_b;
        assert!(blocked_b(Tile::new(32, 8, 8, Lanes::SharedRows)));
        assert!(blocked_b(Tile::new(16, 8, 16, Lanes::SharedRows)));
        assert!(!blocked_b(Tile::new(32, 12, 8, Lanes::SharedRows)));
        assert!(!blocked_b(Tile::new(32, 8, 8, Lanes::Rows)));
        assert!(
            !Tile::new(32, 8, 8, Lanes::SharedRows)
                .layout(Reads::Buffers, wanted)
                .blocked_b
        );
    }
}
