//! The GEMM's register kernel for CPU adapters, generated per tile: the
//! shared header (`shaders/gemm_header.wgsl`) plus a K loop unrolled over a
//! `tm` × `4·tnv` tile of C held in one vec4 variable per accumulator. It is
//! generated rather than written in a `.wgsl` file because the best tile
//! differs per adapter, and written as loops over arrays the accumulators
//! stayed in memory on lavapipe (much slower); unrolled, nothing in the K
//! loop is indexed dynamically, which FXC also needs. The finished tile is
//! copied into an array (whole vectors, constant indices) and stored from a
//! loop, which keeps compile times short. A and B come from storage buffers
//! or, faster on Mesa's CPU drivers, from RGBA textures ([`Reads`]). Where
//! subgroups work, A's rows are fetched once per subgroup and broadcast
//! ([`Lanes::SharedRows`]): on lavapipe 25 a fetch is a call of ~250
//! instructions for 8 lanes, a broadcast one or two.
//!
//! The tile types and their choice are in `tile.rs`; this file adds the
//! generator's methods to [`Tile`].

use super::precision::{Precision, interned};
use super::tile::{BLOCKED_TEXELS, Lanes, Reads, Stored, Tile};
use crate::element::DType;

const XYZW: [&str; 4] = ["x", "y", "z", "w"];

/// `Params`, bindings 0 and 3–5 and the store helpers: the one copy every
/// GEMM kernel starts with.
const HEADER: &str = include_str!("../../../shaders/gemm_header.wgsl");

impl Tile {
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
                Reads::Buffers => "buf",
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
        // instead streams all of B once per block of rows.
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
        // order, and it sets how much the loop spills: columns outer, or k
        // before columns, spilled more and ran slower on lavapipe.
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
