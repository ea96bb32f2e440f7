// Up to four pairs of small-M products in one dispatch
// (src/kernels/gemv/pair.rs): pair g < p.count multiplies one a_g by two
// weights b_g and d_g of the same [N, K] (a Llama layer's key and value
// projections, or its MLP's gate and up), reading both in one pass, two
// columns of each an invocation. Either it stores both, c_g = a·bᵀ and
// e_g = a·dᵀ, or (flags bit 5) only c_g = act(a·bᵀ) ⊙ a·dᵀ (SwiGLU's
// hidden row). Each column's sums are gemv.wgsl's nk (nk8 for bf16
// weights) in its order, and the gated store is the gate's product
// multiplying by up as it stores: the same bits as the products alone.
// Composed like gemv_group.wgsl: these bindings, the loads,
// gemv_header.wgsl and gemv_pair_body.wgsl, one copy per pair reading its
// own bindings and sizes (src/kernels/gemv/pair_source.rs).

// After gemv_members.wgsl (Params, a and b):
@group(0) @binding(9) var<storage, read> d0: array<BV>;
@group(0) @binding(10) var<storage, read> d1: array<BV>;
@group(0) @binding(11) var<storage, read> d2: array<BV>;
@group(0) @binding(12) var<storage, read> d3: array<BV>;
@group(0) @binding(13) var<storage, read_write> c0: array<COut>;
@group(0) @binding(14) var<storage, read_write> c1: array<COut>;
@group(0) @binding(15) var<storage, read_write> c2: array<COut>;
@group(0) @binding(16) var<storage, read_write> c3: array<COut>;
@group(0) @binding(17) var<storage, read_write> e0: array<COut>;
@group(0) @binding(18) var<storage, read_write> e1: array<COut>;
@group(0) @binding(19) var<storage, read_write> e2: array<COut>;
@group(0) @binding(20) var<storage, read_write> e3: array<COut>;
