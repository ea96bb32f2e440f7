// Up to four small-M products in one dispatch (src/kernels/gemv/group.rs):
// member g < p.count is gemv.wgsl's gemv_nk (or loads.rs's gemv_nk8 for
// bf16 weights) on a_g, b_g, bias_g (its bias or its multiplier, which
// no member has both of) and c_g with its own N and K, over
// workgroups p.starts[g]..p.starts[g + 1]; M, flags, ROWS and WG are
// common. Composed in place of gemv_ab.wgsl and gemv_params.wgsl: after
// these come the loads, gemv_header.wgsl and gemv.wgsl's functions, one
// copy per member reading its bindings and sizes, and the entry
// (src/kernels/gemv/group_source.rs). The same code as one product alone,
// so the same bits.
//
// Why: ranks sharing one device decoded with one dispatch per rank and
// product, and a CPU adapter's fixed cost per dispatch (waking its worker
// threads) was a sixth of a token at four ranks.

// After gemv_members.wgsl (Params, a and b):
@group(0) @binding(9) var<storage, read> bias0: array<f32>;
@group(0) @binding(10) var<storage, read> bias1: array<f32>;
@group(0) @binding(11) var<storage, read> bias2: array<f32>;
@group(0) @binding(12) var<storage, read> bias3: array<f32>;
@group(0) @binding(13) var<storage, read_write> c0: array<COut>;
@group(0) @binding(14) var<storage, read_write> c1: array<COut>;
@group(0) @binding(15) var<storage, read_write> c2: array<COut>;
@group(0) @binding(16) var<storage, read_write> c3: array<COut>;

