//! Every composed GEMM source, as (name, source), for the validation and
//! translation tests (`kernels::all_shaders`): the tiled kernel and the
//! register kernel's shipped tiles, in each precision.

use super::precision::{Precision, interned};
use super::tile::{
    Reads, Stored, TILE_DEFAULT, TILE_LOAD_BOUND, TILE_TEXTURES, TILE_TEXTURES_OLD_MESA,
    TILE_TEXTURES_SHARED, TILE_TEXTURES_SHARED_SMALL, TILE_TEXTURES_SHARED_TALL,
    TILE_TEXTURES_SMALL,
};

/// The tiled kernel in every precision, as (name, source): for validation tests.
pub(crate) fn tiled_sources() -> Vec<(&'static str, &'static str)> {
    Precision::ALL
        .iter()
        .map(|p| (p.family(), p.tiled_source()))
        .collect()
}

/// The cooperative-matrix kernel in its two precisions (f16 operands; C f32
/// or f16), as (name, source): for validation tests. Apart from
/// [`tiled_sources`]: it translates to SPIR-V only.
pub(crate) fn coop_sources() -> Vec<(&'static str, &'static str)> {
    Precision::ALL
        .iter()
        .filter(|p| p.input() == crate::element::DType::F16)
        .map(|p| (p.family(), p.coop_source()))
        .collect()
}

/// The register kernel's generated source for each shipped tile, operand
/// kind and precision, as (entry point, source): for validation tests.
pub(crate) fn register_sources() -> Vec<(&'static str, &'static str)> {
    let mut out = Vec::new();
    for (tile, reads) in [
        (TILE_DEFAULT, Reads::Buffers),
        (TILE_LOAD_BOUND, Reads::Buffers),
        (TILE_TEXTURES, Reads::Textures),
        (TILE_TEXTURES_OLD_MESA, Reads::Textures),
        (TILE_TEXTURES_SHARED, Reads::Textures),
        (TILE_TEXTURES_SHARED_TALL, Reads::Textures),
        (TILE_TEXTURES_SHARED_SMALL, Reads::Textures),
        (TILE_TEXTURES_SMALL, Reads::Textures),
        (TILE_TEXTURES, Reads::StorageTextures),
        (TILE_TEXTURES_OLD_MESA, Reads::StorageTextures),
        (TILE_TEXTURES_SHARED, Reads::StorageTextures),
        (TILE_TEXTURES_SHARED_TALL, Reads::StorageTextures),
        (TILE_TEXTURES_SHARED_SMALL, Reads::StorageTextures),
        (TILE_TEXTURES_SMALL, Reads::StorageTextures),
    ] {
        for precision in Precision::ALL {
            // Every layout the tile reads: each wish, as the tile takes it.
            let mut seen = std::collections::HashSet::new();
            for wish in 0..16u8 {
                let stored = tile.layout(
                    reads,
                    Stored {
                        trans_a: wish & 1 != 0,
                        trans_b: wish & 2 != 0,
                        blocked_a: wish & 4 != 0,
                        blocked_b: wish & 8 != 0,
                    },
                );
                if !seen.insert(stored) {
                    continue;
                }
                let (entry, source) = tile.program(precision, reads, stored);
                let name = format!("{}::{entry}", precision.family());
                out.push((interned(&name, || name.clone()), source));
            }
        }
    }
    out
}
