//! The attention shader's side: how a head's rows are laid out in each
//! tensor ([`View`]), the uniform parameters, and the dispatches of the five
//! entry points for one rank's [`Problem`].

use super::entries::Entries;
use super::params::Params;
use super::shape::{AttentionShape, HeadGroups, elements};
use crate::device::LocalTensor;
use crate::error::Result;

/// Invocations per workgroup of the scalar entries (see the shader).
const WORKGROUP: u64 = 64;
/// Side of the square output tile of `masked_dots` and `mix`.
const TILE: usize = 4;

/// Where element `e` of head `h` at position `t` of sequence `b` lives:
/// `base + b·sb + h·sh + t·st + e`.
#[derive(Clone, Copy)]
pub(super) struct View {
    base: u64,
    sb: u64,
    sh: u64,
    st: u64,
}

impl View {
    /// Block `block` (0 = q, 1 = k, 2 = v) of the fused QKV layout with `seq`
    /// rows per sequence.
    pub(super) fn fused(s: &AttentionShape, seq: usize, block: usize) -> View {
        let (hd, d) = ((s.heads * s.head_dim) as u64, s.head_dim as u64);
        View {
            base: block as u64 * hd,
            sb: seq as u64 * 3 * hd,
            sh: d,
            st: 3 * hd,
        }
    }

    /// Keys (`block` 0) or values (1) of a cache `[len, 2, B, KV, D]`.
    pub(super) fn cache_of(s: &AttentionShape, kv: usize, block: usize) -> View {
        let (b, h, d) = (s.batch as u64, kv as u64, s.head_dim as u64);
        View {
            base: block as u64 * b * h * d,
            sb: h * d,
            sh: d,
            st: 2 * b * h * d,
        }
    }

    /// Position `past` onward of a cache `[len, 2, B, KV, D]`, as the flat
    /// output of `write_kv`.
    pub(super) fn cache_from(s: &AttentionShape, kv: usize, past: usize) -> View {
        let row = 2 * (s.batch * kv * s.head_dim) as u64;
        View {
            base: past as u64 * row,
            sb: 0,
            sh: 0,
            st: 0,
        }
    }

    /// The output layout `[B·T, H·D]` (also `dO`'s, and separate q's).
    pub(super) fn heads(s: &AttentionShape) -> View {
        View::packed(s.seq, s.heads, s.head_dim)
    }

    /// `[B·seq, heads·D]`, heads contiguous in the columns: a separate q, k
    /// or v projection's output.
    pub(super) fn packed(seq: usize, heads: usize, d: usize) -> View {
        let (hd, d) = ((heads * d) as u64, d as u64);
        View {
            base: 0,
            sb: seq as u64 * hd,
            sh: d,
            st: hd,
        }
    }

    /// Whether every index of the view is a multiple of 4 where `e` is.
    pub(super) fn whole_vec4s(&self) -> bool {
        [self.base, self.sb, self.sh, self.st]
            .iter()
            .all(|x| x % 4 == 0)
    }

    pub(super) fn words(&self) -> [u32; 4] {
        [self.base, self.sb, self.sh, self.st].map(|x| x as u32)
    }
}

/// One rank's problem: `s.seq` queries per sequence after `past` cached
/// positions, so `past + s.seq` keys, of the key/value heads `g` says.
#[derive(Clone, Copy)]
pub(super) struct Problem {
    pub(super) s: AttentionShape,
    pub(super) past: usize,
    pub(super) g: HeadGroups,
}

impl Problem {
    pub(super) fn keys(&self) -> usize {
        self.past + self.s.seq
    }

    pub(super) fn params(&self, scale: f32, trans: bool, a: View, b: View, o: View) -> Params {
        let s = &self.s;
        Params {
            batch: s.batch as u32,
            heads: s.heads as u32,
            tq: s.seq as u32,
            tk: self.keys() as u32,
            d: s.head_dim as u32,
            past: self.past as u32,
            scale,
            trans: trans as u32,
            a: a.words(),
            b: b.words(),
            o: o.words(),
            n: 0,
            group: self.g.group as u32,
            q0: self.g.q_start as u32,
            kv0: self.g.kv_start as u32,
            // A window reaching past the first key is no window (and would
            // overflow the shader's u32 sums).
            window: if self.g.window >= self.keys() {
                0
            } else {
                self.g.window as u32
            },
            kv_heads: self.g.kv_heads as u32,
            shift: 0,
            rotate: 0,
        }
    }

    /// `1/√D`.
    pub(super) fn inv_sqrt_d(&self) -> f32 {
        1.0 / (self.s.head_dim.max(1) as f32).sqrt()
    }

    /// The entries for a product over `views` reading `inputs`: the vec4
    /// ones where every row of a head, of the score matrix and of the views
    /// starts at a multiple of 4 elements.
    fn entries(&self, views: &[View], inputs: &[&LocalTensor]) -> Entries {
        let aligned = self.s.head_dim.is_multiple_of(4)
            && self.keys().is_multiple_of(4)
            && views.iter().all(View::whole_vec4s);
        Entries::choose(inputs[0].device(), (aligned, self.s.seq), inputs)
    }

    /// Record `entry` with `params` over `n` invocations (with `vec4`, the
    /// vec4 entry over `n` workgroups): `inputs` fill
    /// bindings 1..=3 (None → `any`, unused; never `out`, which wgpu would
    /// refuse as both read and written), `out` binding 4.
    pub(super) fn run(
        &self,
        (entry, entries): (&'static str, Entries),
        mut params: Params,
        n: u64,
        inputs: [Option<&LocalTensor>; 3],
        any: &LocalTensor,
        out: &LocalTensor,
    ) -> Result<()> {
        params.n = n as u32;
        let workgroups = if entries.vec4() {
            n
        } else {
            n.div_ceil(WORKGROUP)
        };
        entries.record(entry, &mut params, workgroups, (inputs, any), out)
    }

    /// Score-shaped `out` `[B, H, Tq, Tk]` = `scale · a bᵀ`, masked to 0.
    pub(super) fn masked_dots(
        &self,
        scale: f32,
        (a_src, a): (&LocalTensor, View),
        (b_src, b): (&LocalTensor, View),
        out: &LocalTensor,
    ) -> Result<()> {
        let s = &self.s;
        let entries = self.entries(&[a, b], &[a_src, b_src]);
        // The vec4 entries' workgroups each take 64 tiles of keys.
        let key_tiles = self.keys().div_ceil(TILE);
        let key_groups = if entries.vec4() {
            key_tiles.div_ceil(64)
        } else {
            key_tiles
        };
        let tiles = elements(&[s.batch, s.heads, s.seq.div_ceil(TILE), key_groups]);
        let params = self.params(scale, false, a, b, a);
        self.run(
            ("masked_dots", entries),
            params,
            tiles,
            [Some(a_src), Some(b_src), None],
            a_src,
            out,
        )
    }

    /// `out` view `o` = `scale · M X` (or `Mᵀ X` when `trans`), `M` score-shaped.
    pub(super) fn mix(
        &self,
        scale: f32,
        trans: bool,
        m: &LocalTensor,
        (x_src, x): (&LocalTensor, View),
        (out, o): (&LocalTensor, View),
    ) -> Result<()> {
        let s = &self.s;
        let (rows, heads) = if trans {
            (self.keys(), self.g.kv_heads)
        } else {
            (s.seq, s.heads)
        };
        let entries = self.entries(&[x, o], &[x_src, m]);
        // The vec4 entries' workgroups each take 16 tiles of elements.
        let e_tiles = s.head_dim.div_ceil(TILE);
        let e_groups = if entries.vec4() {
            e_tiles.div_ceil(16)
        } else {
            e_tiles
        };
        let tiles = elements(&[s.batch, heads, rows.div_ceil(TILE), e_groups]);
        let params = self.params(scale, trans, x, x, o);
        self.run(
            ("mix", entries),
            params,
            tiles,
            [Some(x_src), None, Some(m)],
            m,
            out,
        )
    }

    /// A row kernel (`softmax_rows`, `grad_softmax_rows`) in place on `out`
    /// (`any`: another tensor of the rank for the unused bindings).
    pub(super) fn rows(
        &self,
        entry: &'static str,
        mat: Option<&LocalTensor>,
        any: &LocalTensor,
        out: &LocalTensor,
    ) -> Result<()> {
        let s = &self.s;
        let v = View::heads(s);
        let params = self.params(1.0, false, v, v, v);
        let rows = elements(&[s.batch, s.heads, s.seq]);
        self.run(
            (entry, Entries::Scalar),
            params,
            rows,
            [None, None, mat],
            any,
            out,
        )
    }
}
