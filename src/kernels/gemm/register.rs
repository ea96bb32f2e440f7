//! The GEMM's register kernel for CPU adapters, generated per tile: the
//! shared header (`shaders/gemm_header.wgsl`) plus a K loop unrolled over a
//! `tm` × `4·tnv` tile of C held in one vec4 variable per accumulator. It is
//! generated rather than written in a `.wgsl` file because the best tile
//! differs per adapter, and written as loops over arrays the accumulators
//! stayed in memory on lavapipe (3.5× slower); unrolled, nothing is indexed
//! dynamically, which FXC also needs.

use std::sync::OnceLock;

use super::{Precision, interned};

/// `Params`, bindings 0 and 3–5 and the store helpers: the one copy every
/// GEMM kernel starts with.
const HEADER: &str = include_str!("../../../shaders/gemm_header.wgsl");

/// Register tile of the CPU kernel: `tm` rows × `tnv` vec4 columns of C per
/// invocation, `wg` invocations per workgroup, laid along M (`tall`: b's loads
/// are the same for every lane) or along N.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Tile {
    tm: usize,
    tnv: usize,
    wg: usize,
    tall: bool,
}

impl Tile {
    /// C rows and columns one workgroup covers.
    pub(crate) fn span(self) -> (usize, usize) {
        if self.tall {
            (self.tm * self.wg, 4 * self.tnv)
        } else {
            (self.tm, 4 * self.tnv * self.wg)
        }
    }

    fn entry(self) -> String {
        format!(
            "gemm_cpu_{}x{}_{}{}",
            self.tm,
            self.tnv * 4,
            self.wg,
            if self.tall { "m" } else { "n" }
        )
    }

    /// Parse `TMxTN/WG[m|n]`, e.g. `4x16/8m` (TN a multiple of 4).
    fn parse(s: &str) -> Option<Tile> {
        let (tile, rest) = s.split_once('/')?;
        let (tm, tn) = tile.split_once('x')?;
        let tall = rest.ends_with('m');
        let wg = rest.trim_end_matches(['m', 'n']);
        let t = Tile {
            tm: tm.parse().ok()?,
            tnv: tn.parse::<usize>().ok()? / 4,
            wg: wg.parse().ok()?,
            tall,
        };
        (t.tm > 0 && t.tnv > 0 && t.wg > 0).then_some(t)
    }

    /// The complete kernel source, unrolled: one variable per accumulator
    /// vec4, so nothing is indexed dynamically (arrays of accumulators stayed
    /// in memory on lavapipe, and FXC cannot write vector parts by index).
    fn source(self, precision: Precision) -> String {
        use std::fmt::Write;
        let Tile { tm, tnv, wg, tall } = self;
        let mut s = precision.prelude();
        s.push_str(HEADER);
        let entry = self.entry();
        let (m0, n0) = if tall {
            (
                "((g / p.groups_n) * WG + lid) * TM",
                "(g % p.groups_n) * TNV",
            )
        } else {
            (
                "(g / p.groups_n) * TM",
                "((g % p.groups_n) * WG + lid) * TNV",
            )
        };
        let _ = write!(
            s,
            r#"
// Register-tiled kernel for CPU adapters (generated in src/kernels/gemm/register.rs):
// each invocation keeps a TM × 4·TNV tile of c in f32 vec4 registers and reads a
// and b as aligned vec4s (lda, ldb multiples of 4; rows of b past K are
// zero), so the K loop has no branches; rows past M and columns past the
// stride are clamped and not stored.
const TM: u32 = {tm}u;
const TNV: u32 = {tnv}u;
const WG: u32 = {wg}u;
@group(0) @binding(1) var<storage, read> a: array<vec4<AIn>>;
@group(0) @binding(2) var<storage, read> b: array<vec4<AIn>>;

@compute @workgroup_size(WG)
fn {entry}(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {{
    let g = wg.y * nwg.x + wg.x;
    if (g >= p.groups) {{
        return;
    }}
    let m0 = {m0};
    let n0 = {n0};
    let lda = p.lda / 4u;
    let ldb = p.ldb / 4u;
"#
        );
        for i in 0..tm {
            let _ = writeln!(s, "    let ra{i} = min(m0 + {i}u, p.m - 1u) * lda;");
        }
        for j in 0..tnv {
            let _ = writeln!(s, "    let cb{j} = min(n0 + {j}u, ldb - 1u);");
        }
        for i in 0..tm {
            for j in 0..tnv {
                let _ = writeln!(s, "    var c{i}_{j} = vec4<f32>();");
            }
        }
        s.push_str("    let kq = (p.k + 3u) / 4u;\n    for (var q = 0u; q < kq; q++) {\n");
        for i in 0..tm {
            let _ = writeln!(s, "        let a{i} = vec4<f32>(a[ra{i} + q]);");
        }
        s.push_str("        let r0 = 4u * q * ldb;\n");
        for t in 1..4 {
            let _ = writeln!(s, "        let r{t} = r{} + ldb;", t - 1);
        }
        for t in 0..4 {
            for j in 0..tnv {
                let _ = writeln!(s, "        let b{t}_{j} = vec4<f32>(b[r{t} + cb{j}]);");
            }
        }
        for i in 0..tm {
            for j in 0..tnv {
                for (t, x) in ["x", "y", "z", "w"].iter().enumerate() {
                    let _ = writeln!(s, "        c{i}_{j} += a{i}.{x} * b{t}_{j};");
                }
            }
        }
        s.push_str("    }\n");
        for i in 0..tm {
            for j in 0..tnv {
                let _ = writeln!(s, "    store4(m0 + {i}u, 4u * (n0 + {j}u), c{i}_{j});");
            }
        }
        s.push_str("}\n");
        s
    }

    /// The tile for this adapter, or `WGPU_TP_GEMM_TILE` when set.
    pub(crate) fn for_adapter(info: &wgpu::AdapterInfo) -> Tile {
        static ENV: OnceLock<Option<Tile>> = OnceLock::new();
        if let Some(t) = *ENV.get_or_init(|| {
            std::env::var("WGPU_TP_GEMM_TILE")
                .ok()
                .and_then(|s| Tile::parse(&s))
        }) {
            return t;
        }
        let old_mesa = mesa_major(&info.driver_info).is_some_and(|major| major < 24);
        if info.backend == wgpu::Backend::Gl || old_mesa {
            TILE_LOAD_BOUND
        } else {
            TILE_DEFAULT
        }
    }

    /// (entry, source) for this tile and precision, built once per process.
    pub(crate) fn program(self, precision: Precision) -> (&'static str, &'static str) {
        let entry = self.entry();
        let source = interned(&format!("register {self:?} {precision:?}"), || {
            self.source(precision)
        });
        (interned(&entry, || entry.clone()), source)
    }
}

/// The register tile on lavapipe from Mesa ≥ 24 and other non-GL adapters:
/// 4 rows × 4 columns per invocation compiles in under a second and ran
/// 1.2× faster than 3×4 and than tiles up to 4× its size there (BENCHMARKS.md,
/// rounds 2 and 3).
const TILE_DEFAULT: Tile = Tile {
    tm: 4,
    tnv: 1,
    wg: 8,
    tall: true,
};

/// The register tile where every storage load is a loop over the SIMD lanes
/// (Mesa < 24's gallivm: lavapipe 22.3, and GL llvmpipe): speed grows with
/// FMAs per load (4×16 ran 1.8–1.9× faster than 3×4), and it still compiles
/// in 1–2 s; larger tiles are faster still but take 5–45 s to compile.
const TILE_LOAD_BOUND: Tile = Tile {
    tm: 4,
    tnv: 4,
    wg: 8,
    tall: true,
};

/// The register kernel's generated source for each shipped tile and
/// precision, as (entry point, source): for validation tests.
pub(crate) fn register_sources() -> Vec<(&'static str, &'static str)> {
    let mut out = Vec::new();
    for tile in [TILE_DEFAULT, TILE_LOAD_BOUND] {
        for precision in Precision::ALL {
            let (entry, source) = tile.program(precision);
            let name = format!("{}::{entry}", precision.family());
            out.push((interned(&name, || name.clone()), source));
        }
    }
    out
}

/// The Mesa major version in a driver string such as `Mesa 22.3.6 (LLVM
/// 15.0.6)` (lavapipe) or `4.5 (Core Profile) Mesa 25.0.7` (GL).
fn mesa_major(driver_info: &str) -> Option<u32> {
    let rest = &driver_info[driver_info.find("Mesa ")? + 5..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::mesa_major;

    #[test]
    fn mesa_versions_are_read_from_driver_strings() {
        assert_eq!(mesa_major("Mesa 22.3.6 (LLVM 15.0.6)"), Some(22));
        assert_eq!(mesa_major("Mesa 25.0.7-2~bpo12+1 (LLVM 15.0.6)"), Some(25));
        assert_eq!(mesa_major("4.5 (Core Profile) Mesa 22.3.6"), Some(22));
        assert_eq!(mesa_major("NVIDIA 550.54"), None);
        assert_eq!(mesa_major("Mesa "), None);
    }
}
