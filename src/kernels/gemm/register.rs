//! The GEMM's register kernel for CPU adapters, generated per tile: the
//! shared header (`shaders/gemm_header.wgsl`) plus a K loop unrolled over a
//! `tm` × `4·tnv` tile of C held in one vec4 variable per accumulator. It is
//! generated rather than written in a `.wgsl` file because the best tile
//! differs per adapter, and written as loops over arrays the accumulators
//! stayed in memory on lavapipe (3.5× slower); unrolled, nothing in the K
//! loop is indexed dynamically, which FXC also needs. The finished tile is
//! copied into an array (whole vectors, constant indices) and stored from a
//! loop, which keeps compile times short. A and B come from storage buffers
//! or, faster on Mesa's CPU drivers, from RGBA textures ([`Reads`]). Where
//! subgroups work, A's rows are fetched once per subgroup and broadcast
//! ([`Lanes::SharedRows`]): on lavapipe 25 a fetch is a call of ~250
//! instructions for 8 lanes, a broadcast one or two.

use std::sync::OnceLock;

use super::{Precision, interned};
use crate::device::Device;
use crate::element::DType;

/// Where the register kernel reads A and B: storage buffers of vec4s, or
/// RGBA textures (a texel per four elements of a row; device/texture.rs),
/// which Mesa's CPU drivers fetch 2–14× faster, bound as sampled or as
/// read-only storage textures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Reads {
    Buffers,
    /// `texture_2d<f32>`, read with `textureLoad(t, xy, 0)`.
    Textures,
    /// `texture_storage_2d<rgba32float | rgba16float, read>`: on lavapipe
    /// a load is a ~70-instruction call against ~90–200 for a sampled
    /// fetch (no mip-level logic), which made the GEMM 1.2–1.6× as fast
    /// there and on GL llvmpipe (BENCHMARKS.md, round 6).
    StorageTextures,
}

impl Reads {
    /// Whether A and B are textures (sampled or storage).
    fn texels(self) -> bool {
        self != Reads::Buffers
    }
}

const XYZW: [&str; 4] = ["x", "y", "z", "w"];

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

/// `Params`, bindings 0 and 3–5 and the store helpers: the one copy every
/// GEMM kernel starts with.
const HEADER: &str = include_str!("../../../shaders/gemm_header.wgsl");

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
    /// of exactly one subgroup). On lavapipe 25 a fetch costs ~250
    /// instructions and a broadcast 1–2, so this ran 1.3–1.8× as fast as
    /// `Rows` (BENCHMARKS.md, round 5).
    SharedRows,
}

/// Register tile of the CPU kernel: `tm` rows × `tnv` vec4 columns of C per
/// invocation, `wg` invocations per workgroup, split by `lanes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Tile {
    tm: usize,
    tnv: usize,
    wg: usize,
    lanes: Lanes,
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

    fn entry(self, reads: Reads, stored: Stored) -> String {
        // n: as the kernel's one layout; t: transposed as stored; b: blocked
        // (B: from [N, K]); k: B blocked from [K, N].
        let side = |trans, blocked| match (trans, blocked) {
            (_, true) => 'b',
            (true, false) => 't',
            (false, false) => 'n',
        };
        let b_side = match (stored.trans_b, stored.blocked_b) {
            (false, true) => 'k',
            (trans, blocked) => side(trans, blocked),
        };
        let layout = match (side(stored.trans_a, stored.blocked_a), b_side) {
            ('n', 'n') => String::new(),
            (a, b) => format!("_{a}{b}"),
        };
        format!(
            "gemm_{}_{}x{}_{}{}{layout}",
            match reads {
                Reads::Buffers => "cpu",
                Reads::Textures => "tex",
                Reads::StorageTextures => "img",
            },
            self.tm,
            self.tnv * 4,
            self.wg,
            match self.lanes {
                Lanes::Rows => "m",
                Lanes::Columns => "n",
                Lanes::SharedRows => "s",
            }
        )
    }

    /// Parse `TMxTN/WG[m|n|s]`, e.g. `4x16/8m` (TN a multiple of 4; see
    /// [`Lanes`] for the suffix).
    fn parse(s: &str) -> Option<Tile> {
        let (tile, rest) = s.split_once('/')?;
        let (tm, tn) = tile.split_once('x')?;
        let lanes = match rest.chars().last()? {
            'm' => Lanes::Rows,
            's' => Lanes::SharedRows,
            _ => Lanes::Columns,
        };
        let wg = rest.trim_end_matches(['m', 'n', 's']);
        let t = Tile::new(tm.parse().ok()?, tn.parse().ok()?, wg.parse().ok()?, lanes);
        (t.tm > 0 && t.tnv > 0 && t.wg > 0).then_some(t)
    }

    /// The complete kernel source, unrolled: one variable per accumulator
    /// vec4, so nothing is indexed dynamically (arrays of accumulators stayed
    /// in memory on lavapipe, and FXC cannot write vector parts by index).
    fn source(self, precision: Precision, reads: Reads, stored: Stored) -> String {
        use std::fmt::Write;
        let Tile { tm, tnv, wg, lanes } = self;
        let shared = lanes == Lanes::SharedRows;
        let mut s = precision.prelude();
        s.push_str(HEADER);
        let entry = self.entry(reads, stored);
        let Stored {
            trans_a,
            trans_b,
            blocked_a,
            blocked_b,
        } = stored;
        let texels = "fetches a and b as texels of four (a: K/4 × M, or M/4 × K stored [K, M];\n\
                      // b: N/4 × K, or K/4 × N stored [N, K]; K rounded up to 4, zero past K)";
        let (operands, how) = match reads {
            Reads::Buffers => (
                "@group(0) @binding(1) var<storage, read> a: array<vec4<AIn>>;\n\
                 @group(0) @binding(2) var<storage, read> b: array<vec4<AIn>>;"
                    .to_string(),
                "reads a and b as aligned vec4s (lda, ldb multiples of 4; rows of b past K are\n\
                 // zero)",
            ),
            Reads::Textures => (
                "@group(0) @binding(1) var a: texture_2d<f32>;\n\
                 @group(0) @binding(2) var b: texture_2d<f32>;"
                    .to_string(),
                texels,
            ),
            Reads::StorageTextures => {
                let format = if precision.input() == DType::F16 {
                    "rgba16float"
                } else {
                    "rgba32float"
                };
                (
                    format!(
                        "@group(0) @binding(1) var a: texture_storage_2d<{format}, read>;\n\
                         @group(0) @binding(2) var b: texture_storage_2d<{format}, read>;"
                    ),
                    texels,
                )
            }
        };
        // Storage textures have no mip levels to name.
        let level = if reads == Reads::Textures { ", 0" } else { "" };
        // Consecutive workgroups walk down M and share one panel of B
        // (column block × all K) while it is in cache: walking along N
        // instead streamed all of B once per block of rows, which made
        // 2048³ 1.2–1.4× slower on lavapipe (BENCHMARKS.md, round 8).
        let (m0, n0) = if lanes == Lanes::Rows {
            ("((g % gm) * WG + lid) * TM", "(g / gm) * TNV")
        } else {
            ("(g % gm) * TM", "((g / gm) * WG + lid) * TNV")
        };
        let lane = if shared {
            ", @builtin(subgroup_invocation_id) lane: u32"
        } else {
            ""
        };
        let _ = write!(
            s,
            r#"
// Register-tiled kernel for CPU adapters (generated in src/kernels/gemm/register.rs):
// each invocation keeps a TM × 4·TNV tile of c in f32 vec4 registers and
// {how}, so the K loop has no branches; rows past M and columns past the
// stride are clamped and not stored.
const TM: u32 = {tm}u;
const TNV: u32 = {tnv}u;
const WG: u32 = {wg}u;
{operands}

@compute @workgroup_size(WG)
fn {entry}(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32{lane}) {{
    let g = wg.y * nwg.x + wg.x;
    if (g >= p.groups) {{
        return;
    }}
    let gm = p.groups / p.groups_n;
    let m0 = {m0};
    let n0 = {n0};
    let lda = p.lda / 4u;
    let ldb = p.ldb / 4u;
"#
        );
        let row_stride = if reads.texels() { "" } else { " * lda" };
        // Shared rows: lane l fetches rows l, l + WG, … (`f*`) and each row
        // reaches every lane by subgroupBroadcast (`a*`).
        let fetched = if shared { tm.div_ceil(wg) } else { tm };
        // A stored [K, M]: a texel holds four rows at one k; the subgroup
        // fetches TM/4 texels × 4 k, lane l the l-th, (l + WG)-th, …
        let row_groups = tm / 4;
        // A blocked is addressed in the K loop, from `la`.
        for u in (0..fetched).filter(|_| !blocked_a) {
            let _ = if trans_a {
                writeln!(
                    s,
                    "    let ax{u} = min(m0 / 4u + ({}u + lane) % {row_groups}u, (p.m + 3u) / 4u - 1u);\n    \
                     let ay{u} = min(({}u + lane) / {row_groups}u, 3u);",
                    u * wg,
                    u * wg
                )
            } else if shared {
                writeln!(
                    s,
                    "    let ra{u} = min(m0 + {}u + lane, p.m - 1u){row_stride};",
                    u * wg
                )
            } else {
                writeln!(s, "    let ra{u} = min(m0 + {u}u, p.m - 1u){row_stride};")
            };
        }
        if blocked_b {
            // Addressed in the K loop, from `lb`.
        } else if trans_b {
            // B stored [N, K]: one texel per column of this lane holds four k.
            for c in 0..4 * tnv {
                let _ = writeln!(s, "    let cbt{c} = min(4u * n0 + {c}u, p.n - 1u);");
            }
        } else {
            for j in 0..tnv {
                let _ = writeln!(s, "    let cb{j} = min(n0 + {j}u, ldb - 1u);");
            }
        }
        for i in 0..tm {
            for j in 0..tnv {
                let _ = writeln!(s, "    var c{i}_{j} = vec4<f32>();");
            }
        }
        s.push_str("    let kq = (p.k + 3u) / 4u;\n");
        if blocked_a || blocked_b {
            let _ = writeln!(s, "    const BW: u32 = {BLOCKED_TEXELS}u;");
        }
        if blocked_a {
            // Texel index of this lane's first row in block g % gm at q = 0.
            let _ = writeln!(s, "    let la = (m0 / TM) * kq * TM + lane;");
        }
        if blocked_b {
            // This lane's first column's texel in block g / gm (the
            // workgroup's SN columns) at q = 0; its 4·TNV columns' texels are
            // adjacent and, SN and BW being multiples of 4·TNV, in one row.
            let _ = writeln!(
                s,
                "    const SN: u32 = WG * 4u * TNV;\n    let lb = (g / gm) * kq * SN + lid * 4u * TNV;"
            );
        }
        s.push_str("    for (var q = 0u; q < kq; q++) {\n");
        let fetch = if shared { "f" } else { "a" };
        for i in 0..fetched {
            let _ = match (reads.texels(), trans_a) {
                _ if blocked_a => writeln!(
                    s,
                    "        let l{i} = la + q * TM + {}u;\n        \
                     let {fetch}{i} = textureLoad(a, vec2<u32>(l{i} % BW, l{i} / BW){level});",
                    i * wg
                ),
                (false, _) => {
                    writeln!(s, "        let {fetch}{i} = vec4<f32>(a[ra{i} + q]);")
                }
                (true, false) => writeln!(
                    s,
                    "        let {fetch}{i} = textureLoad(a, vec2<u32>(q, ra{i}){level});"
                ),
                (true, true) => writeln!(
                    s,
                    "        let f{i} = textureLoad(a, vec2<u32>(ax{i}, 4u * q + ay{i}){level});"
                ),
            };
        }
        if trans_a {
            // Row i at k = 4q + t is component i % 4 of texel t·TM/4 + i/4.
            for i in 0..tm {
                let parts: Vec<String> = (0..4)
                    .map(|t| {
                        let texel = t * row_groups + i / 4;
                        let (f, l) = (texel / wg, texel % wg);
                        format!("subgroupBroadcast(f{f}.{}, {l}u)", XYZW[i % 4])
                    })
                    .collect();
                let _ = writeln!(s, "        let a{i} = vec4<f32>({});", parts.join(", "));
            }
        } else if shared {
            for i in 0..tm {
                let (f, l) = (i / wg, i % wg);
                let _ = writeln!(s, "        let a{i} = subgroupBroadcast(f{f}, {l}u);");
            }
        }
        if blocked_b {
            let _ = writeln!(
                s,
                "        let lq = lb + q * SN;\n        let bx = lq % BW;\n        let by = lq / BW;"
            );
        }
        if blocked_b && !trans_b {
            // From [K, N]: texel t·TNV + j is four columns at k = 4q + t.
            for t in 0..4 {
                for j in 0..tnv {
                    let _ = writeln!(
                        s,
                        "        let b{t}_{j} = textureLoad(b, vec2<u32>(bx + {}u, by){level});",
                        t * tnv + j
                    );
                }
            }
        } else if trans_b {
            for c in 0..4 * tnv {
                let _ = if blocked_b {
                    writeln!(
                        s,
                        "        let w{c} = textureLoad(b, vec2<u32>(bx + {c}u, by){level});"
                    )
                } else {
                    writeln!(
                        s,
                        "        let w{c} = textureLoad(b, vec2<u32>(q, cbt{c}){level});"
                    )
                };
            }
            // In SIMD-across-lanes code these vectors are only renamings.
            for (t, x) in XYZW.iter().enumerate() {
                for j in 0..tnv {
                    let parts: Vec<String> =
                        (0..4).map(|c| format!("w{}.{x}", 4 * j + c)).collect();
                    let _ = writeln!(s, "        let b{t}_{j} = vec4<f32>({});", parts.join(", "));
                }
            }
        } else {
            let (row_step, next_row) = if reads.texels() {
                ("", "1u")
            } else {
                (" * ldb", "ldb")
            };
            let _ = writeln!(s, "        let r0 = 4u * q{row_step};");
            for t in 1..4 {
                let _ = writeln!(s, "        let r{t} = r{} + {next_row};", t - 1);
            }
            for t in 0..4 {
                for j in 0..tnv {
                    let _ = if reads.texels() {
                        writeln!(
                            s,
                            "        let b{t}_{j} = textureLoad(b, vec2<u32>(cb{j}, r{t}){level});"
                        )
                    } else {
                        writeln!(s, "        let b{t}_{j} = vec4<f32>(b[r{t} + cb{j}]);")
                    };
                }
            }
        }
        // Row by row, each accumulator's four k at once. LLVM keeps the
        // order, and it sets how much the loop spills: columns outer ran
        // 6 % slower on lavapipe, k before columns 8 % (a K loop 11 % larger,
        // 22 % more spill moves; BENCHMARKS.md, round 10).
        for i in 0..tm {
            for j in 0..tnv {
                for (t, x) in XYZW.iter().enumerate() {
                    let _ = writeln!(s, "        c{i}_{j} += a{i}.{x} * b{t}_{j};");
                }
            }
        }
        // Stored from a loop: unrolled, the stores' bias/accumulate branches
        // made the 12×16 tile take 24 s to compile on lavapipe.
        let count = tm * tnv;
        let _ = writeln!(s, "    }}\n    var tile: array<vec4<f32>, {count}>;");
        for i in 0..tm {
            for j in 0..tnv {
                let _ = writeln!(s, "    tile[{}] = c{i}_{j};", i * tnv + j);
            }
        }
        let _ = writeln!(
            s,
            "    for (var e = 0u; e < {count}u; e++) {{\n        \
             store4(m0 + e / TNV, 4u * (n0 + e % TNV), tile[e]);\n    }}\n}}"
        );
        s
    }

    /// The tile for this device reading this way for an M×N×K product
    /// (`trans_a`: A stored `[K, M]`), or `WGPU_TP_GEMM_TILE` when set (a
    /// shared-rows tile only where the device can run it).
    pub(crate) fn for_device(
        device: &Device,
        reads: Reads,
        (m, n, k): (usize, usize, usize),
        trans_a: bool,
    ) -> Tile {
        static ENV: OnceLock<Option<Tile>> = OnceLock::new();
        let subgroup = fixed_subgroup_size(device);
        let env = ENV.get_or_init(|| {
            std::env::var("WGPU_TP_GEMM_TILE")
                .ok()
                .and_then(|s| Tile::parse(&s))
        });
        match (*env, subgroup) {
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

    /// (entry, source) for this tile, precision and operand kind, built once
    /// per process.
    pub(crate) fn program(
        self,
        precision: Precision,
        reads: Reads,
        stored: Stored,
    ) -> (&'static str, &'static str) {
        // One name per source: only what this kernel reads.
        let stored = self.layout(reads, stored);
        let entry = self.entry(reads, stored);
        let source = interned(
            &format!("register {self:?} {precision:?} {reads:?} {stored:?}"),
            || self.source(precision, reads, stored),
        );
        (interned(&entry, || entry.clone()), source)
    }
}

/// The buffer-reading tile (operands past the texture limit) on lavapipe
/// from Mesa ≥ 24 and other non-GL adapters: 4 rows × 4 columns per invocation compiles in under a second and ran
/// 1.2× faster than 3×4 and than tiles up to 4× its size there (BENCHMARKS.md,
/// rounds 2 and 3).
const TILE_DEFAULT: Tile = Tile::new(4, 4, 8, Lanes::Rows);

/// The buffer-reading tile on Mesa < 24 (lavapipe 22.3, GL llvmpipe), where
/// storage loads cost even more: speed grows with
/// FMAs per load (4×16 ran 1.8–1.9× faster than 3×4), and it still compiles
/// in 1–2 s; larger tiles are faster still but take 5–45 s to compile.
const TILE_LOAD_BOUND: Tile = Tile::new(4, 16, 8, Lanes::Rows);

/// The texture-reading kernel's tile where subgroups work (lavapipe): 16
/// rows × 8 columns per lane, the rows shared by the subgroup. With A and
/// B read in blocks it made the standard step 9–10 % faster than 32×8 on
/// Mesa 25 on an AMD EPYC (Zen 3; forward products 0.62–0.78× sgemm, most
/// ≥ 0.69, against 0.60–0.66), and it compiles 2.3× as fast; 8×8, 24×8,
/// 48×8 and 16×16 were slower (BENCHMARKS.md, round 10). Intel CPUs take
/// `TILE_TEXTURES_SHARED_TALL` on Mesa ≥ 24 instead (round 11). On Mesa
/// 22.3, which compiles 32×8 in 6 s, it ran 0.28–0.44× sgemm in round 5
/// and 0.55–0.76× in round 10. `wg` becomes the subgroup size.
const TILE_TEXTURES_SHARED: Tile = Tile::new(16, 8, 8, Lanes::SharedRows);

/// K above which a product reading A transposed as stored (`[K, M]`, the
/// weight gradient's dyᵀ) takes `TILE_TEXTURES_SHARED_TALL` on Mesa ≥ 24.
const LONG_K: usize = 2048;

/// The shared-rows tile with 32 rows a lane, on Mesa ≥ 24 for every large
/// product on Intel CPUs and, elsewhere, for A read transposed over a long
/// K. On an Intel Xeon (AVX-512, ~4 GHz) it ran the standard step 5–7 %
/// faster than 16×8 in ten interleaved pairs (GEMM 74–82 against 60–74
/// GFLOP/s at 1024³ and 2048³), the opposite of the AMD EPYC (Zen 3)
/// the 16×8 default was chosen on (BENCHMARKS.md, rounds 10 and 11). On
/// that EPYC, 16×8 fell to 0.46–0.51× sgemm for A transposed at K = 4096
/// while 32×8, with twice the rows per texel row read, held 0.61–0.62
/// (equal at K = 2048, 16×8 ahead at K = 512). It compiles in 0.85 s per
/// layout and device against 0.36 s (on the EPYC), which only large
/// products pay: on the Xeon the standard step's first call at P = 4 on a
/// fresh shader cache took 3.8 s against 2.6 s. 64×8 ran 5 % faster still
/// there but took 9.6 s.
const TILE_TEXTURES_SHARED_TALL: Tile = Tile::new(32, 8, 8, Lanes::SharedRows);

/// Whether a product of `macs` multiply-adds is below 2^24 (256³): such
/// products take `TILE_TEXTURES_SHARED_SMALL` or `TILE_TEXTURES_SMALL` and
/// have transposed operands
/// packed rather than read in place. They take milliseconds at any tile,
/// so compiling (once per layout and device) is what a user waits for.
pub(crate) fn small_product(macs: u64) -> bool {
    macs < 1 << 24
}

/// The shared-rows tile for small products: 8×8 compiles in 0.3 s on Mesa
/// 25 and 0.7 s on Mesa 22.3 against 1.0 / 2.1 s for the large tiles, per
/// layout and device; with a pipeline per layout, a training step's three
/// made the quickstart's 4 + 1 devices wait 4–7 s longer on a fresh cache.
const TILE_TEXTURES_SHARED_SMALL: Tile = Tile::new(8, 8, 8, Lanes::SharedRows);

/// The texture tile for small products without subgroups (GL llvmpipe):
/// 4×8 compiles in 0.5 s there against 2.0–2.7 s for 8×16, once per
/// device, which made up most of the GL test suite's time (BENCHMARKS.md,
/// round 5).
const TILE_TEXTURES_SMALL: Tile = Tile::new(4, 8, 8, Lanes::Rows);

/// The texture-reading kernel's tile on lavapipe from Mesa ≥ 24 without
/// subgroups: 16×16 ran
/// 22–23 GFLOP/s there against 10.6 for the buffer kernel and compiles in
/// 0.8 s; 16×32 gained 10 % for a 2.4 s compile (BENCHMARKS.md, round 4).
const TILE_TEXTURES: Tile = Tile::new(16, 16, 8, Lanes::Rows);

/// The texture-reading kernel's tile on Mesa < 24 (lavapipe 22.3, GL
/// llvmpipe), where larger kernels compile much slower: 8×16 ran 21 / 17
/// GFLOP/s (lavapipe / GL) against 1.8 for the buffer kernel, compiling in
/// 1.4 / 2.0 s.
const TILE_TEXTURES_OLD_MESA: Tile = Tile::new(8, 16, 8, Lanes::Rows);

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

/// The device's subgroup size where a shared-rows tile can use it:
/// `SUBGROUP` enabled and one size for every pipeline (so a workgroup of
/// that many invocations is exactly one subgroup).
fn fixed_subgroup_size(device: &Device) -> Option<usize> {
    let info = device.adapter_info();
    let (min, max) = (info.subgroup_min_size, info.subgroup_max_size);
    (device.features().contains(wgpu::Features::SUBGROUP) && min == max && (4..=64).contains(&min))
        .then_some(min as usize)
}

/// Whether this process runs on an Intel CPU, which is where a CPU
/// adapter's kernels run. Its cores ran the shared-rows GEMM faster with
/// 32 rows a lane, AMD's (Zen 3) with 16; the vendor rather than a feature
/// flag, since the difference lies in the cores, not in the code lavapipe
/// emits (256-bit either way).
fn intel_cpu() -> bool {
    static INTEL: OnceLock<bool> = OnceLock::new();
    *INTEL.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            // Leaf 0: the vendor string in EBX, EDX, ECX.
            #[allow(unused_unsafe)]
            // SAFETY: every x86-64 CPU has CPUID leaf 0.
            let id = unsafe { std::arch::x86_64::__cpuid(0) };
            let vendor: Vec<u8> = [id.ebx, id.edx, id.ecx]
                .iter()
                .flat_map(|r| r.to_le_bytes())
                .collect();
            vendor == b"GenuineIntel"
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// Whether the device runs a Mesa older than 24 (lavapipe 22.3, Debian 12's
/// stock GL llvmpipe), whose compiler wants other tiles and layouts.
fn old_mesa(device: &Device) -> bool {
    mesa_major(&device.adapter_info().driver_info).is_some_and(|major| major < 24)
}

/// Whether products reading B stored `[K, N]` should take it in blocks of
/// the workgroup's columns (`transpose::pack_column_blocks`): on Mesa 25
/// lavapipe dx and dW ran 0.60–0.68× sgemm as stored and 0.66–0.74× so;
/// on Mesa 22.3 they fell from 0.62–0.76× to 0.53–0.62× (BENCHMARKS.md,
/// round 10).
pub(crate) fn column_blocks_pay(device: &Device) -> bool {
    !old_mesa(device)
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
    use super::{Lanes, Reads, Stored, Tile, mesa_major};

    #[test]
    fn tiles_are_parsed_from_their_names() {
        assert_eq!(
            Tile::parse("32x8/8s"),
            Some(Tile::new(32, 8, 8, Lanes::SharedRows))
        );
        assert_eq!(
            Tile::parse("4x16/8m"),
            Some(Tile::new(4, 16, 8, Lanes::Rows))
        );
        assert_eq!(
            Tile::parse("4x16/16n"),
            Some(Tile::new(4, 16, 16, Lanes::Columns))
        );
        for bad in ["", "32x8", "32x2/8s", "0x8/8s", "ax8/8m", "32x8/s"] {
            assert_eq!(Tile::parse(bad), None, "{bad:?}");
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

    #[test]
    fn mesa_versions_are_read_from_driver_strings() {
        assert_eq!(mesa_major("Mesa 22.3.6 (LLVM 15.0.6)"), Some(22));
        assert_eq!(mesa_major("Mesa 25.0.7-2~bpo12+1 (LLVM 15.0.6)"), Some(25));
        assert_eq!(mesa_major("4.5 (Core Profile) Mesa 22.3.6"), Some(22));
        assert_eq!(mesa_major("NVIDIA 550.54"), None);
        assert_eq!(mesa_major("Mesa "), None);
    }
}
