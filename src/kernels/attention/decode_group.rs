//! Several ranks' one-token decoding steps in one dispatch, where the ranks
//! share a CPU adapter: each decoded its attention step alone, and the
//! adapter's fixed cost per dispatch (waking its worker threads) was most
//! of a step's time at four ranks. The program is the one-token step's
//! (`shaders/attention_decode.wgsl`) copied once per member, each copy
//! reading its member's eight bindings and parameters, so every member
//! gets its step's bits. Up to [`GROUP_MAX`] members a dispatch, as many
//! as the device binds storage buffers for (four on lavapipe, two on GL
//! llvmpipe; none under WebGPU's limits, where each step runs alone).

use std::sync::OnceLock;

use super::decode::{check_tables, checked, decode_into, step_buffers, step_shapes};
use super::decode_one::{self, BINDINGS, Rope, SOURCE};
use super::gqa::Src;
use super::launch::Problem;
use super::params::Params;
use super::shape::{AttentionShape, HeadGroups};
use super::{Decoded, fused_checked};
use crate::device::{Access, Dispatch, KernelSpec, LocalTensor};
use crate::element::DType;
use crate::error::Result;
use crate::kernels::member_source::{function_names, items, member_entry, specialise};

/// The most members one dispatch takes.
const GROUP_MAX: usize = 4;

/// The step's bindings, renamed per member.
const GLOBALS: [&str; 8] = ["q4", "k4", "v4", "cache4", "scores", "out4", "cos4", "sin4"];

/// One rank's decoding step: the arguments of
/// [`attention_decode_gqa`](super::attention_decode_gqa) (`rope: None`) or
/// [`attention_decode_gqa_rotary`](super::attention_decode_gqa_rotary).
#[derive(Clone, Copy)]
pub(crate) struct Step<'a> {
    /// The new tokens' queries, keys and values.
    pub qkv: [&'a LocalTensor; 3],
    /// The cache of the earlier positions.
    pub cache: Option<&'a LocalTensor>,
    /// The rank's attention shape.
    pub shape: AttentionShape,
    /// The rank's heads.
    pub groups: HeadGroups,
    /// The rotary tables, where q and k are rotated first.
    pub rope: Rope<'a>,
}

/// The WGSL `struct Group` of [`group_source`].
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct GroupParams {
    count: u32,
    _pad: [u32; 3],
    starts: [u32; 4],
    m: [Params; GROUP_MAX],
}

// WGSL lays `Group` out as Rust does only while `Params` is a whole number
// of 16-byte rows (a uniform array's stride) and four members fill `starts`.
const _: () = assert!(
    std::mem::size_of::<Params>().is_multiple_of(16)
        && GROUP_MAX == 4
        && BINDINGS.len() == 8
        && std::mem::size_of::<GroupParams>() == 32 + GROUP_MAX * std::mem::size_of::<Params>()
);

/// Each step's decoding, as the entries give it alone (the same bits and
/// errors; every step is checked before anything is recorded), with the
/// one-token steps of ranks on one CPU adapter recorded together.
pub(crate) fn decode_steps(steps: &[Step]) -> Result<Vec<Decoded>> {
    let mut checks = Vec::with_capacity(steps.len());
    for s in steps {
        let op = match s.rope {
            Some(_) => "attention_decode_gqa_rotary",
            None => "attention_decode_gqa",
        };
        if let Some(tables) = s.rope {
            check_tables(op, s.qkv[0], &s.shape, tables)?;
        }
        let (pr, srcs) = checked(op, s.qkv, s.cache, (s.shape, s.groups))?;
        checks.push(Checked {
            op,
            pr,
            srcs,
            rope: s.rope,
            cache: s.cache,
        });
    }
    run(&checks)
}

/// [`attention_decode`](super::attention_decode) of each `(qkv, cache,
/// shape)` (multi-head, fused QKV), as [`decode_steps`] records them.
pub(crate) fn decode_fused_steps(
    steps: &[(&LocalTensor, Option<&LocalTensor>, AttentionShape)],
) -> Result<Vec<Decoded>> {
    let checks = (steps.iter())
        .map(|&(qkv, cache, shape)| {
            let (pr, srcs) = fused_checked(qkv, cache, shape)?;
            let op = "attention_decode";
            Ok(Checked {
                op,
                pr,
                srcs,
                rope: None,
                cache,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    run(&checks)
}

/// A step whose operands were checked.
struct Checked<'a> {
    op: &'static str,
    pr: Problem,
    srcs: [Src<'a>; 3],
    rope: Rope<'a>,
    cache: Option<&'a LocalTensor>,
}

/// The checked steps recorded: together where [`group_size`] allows, else
/// one by one.
fn run(checks: &[Checked]) -> Result<Vec<Decoded>> {
    // Every step's sizes before any step grows its cache.
    for c in checks {
        step_shapes(c.op, &c.pr, c.srcs[0].0)?;
    }
    let size = group_size(checks);
    if size < 2 {
        return (checks.iter())
            .map(|c| {
                let (out, cache) = decode_into(c.op, &c.pr, c.srcs, c.rope, c.cache)?;
                Ok(Decoded { out, cache })
            })
            .collect();
    }
    let mut done = Vec::with_capacity(checks.len());
    let mut scores = Vec::with_capacity(checks.len());
    for c in checks {
        let q = c.srcs[0].0;
        let (cache, out, probs) = step_buffers(c.op, &c.pr, q, c.cache)?;
        scores.push(q.rank().alloc(c.op, &probs, DType::F32)?);
        done.push(Decoded { out, cache });
    }
    let members: Vec<Member> = (0..checks.len())
        .map(|i| Member {
            pr: &checks[i].pr,
            srcs: checks[i].srcs,
            rope: checks[i].rope,
            cache: &done[i].cache,
            scores: &scores[i],
            out: &done[i].out,
        })
        .collect();
    for chunk in members.chunks(size) {
        match chunk {
            [m] => decode_one::record(m.pr, m.srcs, m.rope, m.cache, m.scores, m.out)?,
            _ => record(chunk)?,
        }
    }
    Ok(done)
}

/// Members a dispatch takes for these steps: 0 where they cannot go
/// together (not all one-token steps on one CPU adapter, or a device that
/// binds too few storage buffers for two).
fn group_size(checks: &[Checked]) -> usize {
    let Some(first) = checks.first() else {
        return 0;
    };
    let dev = first.srcs[0].0.device();
    let fits = checks.iter().all(|c| {
        let views = c.srcs.map(|x| x.1);
        decode_one::fits(&c.pr, views, c.srcs[0].0, c.rope.is_some())
            && (c.srcs.iter().map(|s| s.0))
                .chain(c.cache)
                .chain(c.rope.iter().flat_map(|&(c, n)| [c, n]))
                .all(|t| std::sync::Arc::ptr_eq(t.device(), dev) && !t.is_blocked())
    });
    let binds = dev.limits().max_storage_buffers_per_shader_stage as usize / BINDINGS.len();
    match fits && checks.len() >= 2 {
        true => binds.min(GROUP_MAX),
        false => 0,
    }
}

/// One member's operands and outputs.
struct Member<'a> {
    pr: &'a Problem,
    srcs: [Src<'a>; 3],
    rope: Rope<'a>,
    cache: &'a LocalTensor,
    scores: &'a LocalTensor,
    out: &'a LocalTensor,
}

/// Record `members` (2 to [`GROUP_MAX`]) as one dispatch.
fn record(members: &[Member]) -> Result<()> {
    let count = members.len();
    let mut p = GroupParams {
        count: count as u32,
        _pad: [0; 3],
        starts: [0; 4],
        m: [bytemuck::Zeroable::zeroed(); GROUP_MAX],
    };
    let mut total = 0u32;
    let mut buffers: Vec<&LocalTensor> = Vec::with_capacity(count * BINDINGS.len());
    for (g, m) in members.iter().enumerate() {
        p.m[g] = decode_one::params(m.pr, m.srcs.map(|s| s.1), m.rope.is_some());
        p.starts[g] = total;
        total += p.m[g].n;
        let [q, k, v] = m.srcs.map(|s| s.0);
        let (cos, sin) = m.rope.unwrap_or((q, q));
        buffers.extend([q, k, v, m.cache, m.scores, m.out, cos, sin]);
    }
    let (family, source, bindings) = program(count);
    let spec = KernelSpec::new(family, source, bindings, "attend_group").in_vec4s();
    Dispatch {
        spec: &spec,
        params: bytemuck::bytes_of(&p),
        buffers: &buffers,
        workgroups: u64::from(total),
    }
    .record(buffers[0].device())
}

/// The one-token step's program and the grouped ones, by family (for the
/// shader tests).
pub(crate) fn decode_sources() -> Vec<(&'static str, &'static str)> {
    let mut out = vec![("attention_decode", SOURCE)];
    out.extend((2..=GROUP_MAX).map(|c| {
        let (family, source, _) = program(c);
        (family, source)
    }));
    out
}

/// The (family, source, bindings) of the program for `count` members
/// (2..=[`GROUP_MAX`]), composed once per process.
fn program(count: usize) -> (&'static str, &'static str, &'static [Access]) {
    static SOURCES: [OnceLock<String>; GROUP_MAX - 1] = [const { OnceLock::new() }; GROUP_MAX - 1];
    static BOUND: [Access; GROUP_MAX * 8] = {
        let mut b = [Access::Read; GROUP_MAX * 8];
        let mut i = 0;
        while i < GROUP_MAX * 8 {
            b[i] = BINDINGS[i % 8];
            i += 1;
        }
        b
    };
    const FAMILIES: [&str; GROUP_MAX - 1] = [
        "attention_decode_group2",
        "attention_decode_group3",
        "attention_decode_group4",
    ];
    let source = SOURCES[count - 2].get_or_init(|| group_source(count));
    (
        FAMILIES[count - 2],
        source,
        &BOUND[..count * BINDINGS.len()],
    )
}

/// The grouped program's WGSL: the step's functions per member, its
/// bindings renamed `q4_g`, ... and its parameters read from `p.m[g]`.
pub(super) fn group_source(count: usize) -> String {
    let items = items(SOURCE);
    let names = function_names(&items);
    let mut src = String::new();
    // The header's bindings are redeclared per member below.
    for (text, _) in items
        .iter()
        .filter(|(t, f)| !*f && !t.starts_with("@group"))
    {
        src.push_str(text);
        src.push('\n');
    }
    src.push_str(&format!(
        "struct Group {{ count: u32, _p0: u32, _p1: u32, _p2: u32, starts: vec4<u32>, \
         m: array<Params, {GROUP_MAX}> }}\n@group(0) @binding(0) var<uniform> p: Group;\n"
    ));
    for g in 0..count {
        let decl = |(i, (name, access)): (usize, (&&str, &Access))| {
            let (mode, ty) = match (*name, access) {
                ("scores", _) => ("read_write", "f32"),
                (_, Access::Read) => ("read", "vec4<f32>"),
                _ => ("read_write", "vec4<f32>"),
            };
            format!(
                "@group(0) @binding({}) var<storage, {mode}> {name}_{g}: array<{ty}>;\n",
                1 + g * BINDINGS.len() + i
            )
        };
        src.extend(GLOBALS.iter().zip(BINDINGS).enumerate().map(decl));
        let param = |f: &str| Some(format!("p.m[{g}].{f}"));
        for (text, _) in items.iter().filter(|(_, f)| *f) {
            src.push_str(&specialise(text, &names, &GLOBALS, g, &param));
            src.push('\n');
        }
    }
    src.push_str(&member_entry("attend_group", "64", count, |g| {
        format!("attend_{g}(w - p.starts[g], li);")
    }));
    src
}
