// Shared head of every GEMM kernel (src/kernels/gemm/ appends a kernel):
// c[M,N] = a·b (+ bias[n]) (+ acc[m,n]), a [M,K] with row stride lda, b [K,N]
// with row stride ldb, all row-major f32. Transposed or ragged operands are
// packed into this layout first (shaders/transpose.wgsl), so each kernel
// comes in one layout and compiles once. The kernel declares a (binding 1)
// and b (binding 2) as it reads them. Grid: p.groups workgroups folded into
// x/y (see fold_workgroups); linear id = wg.y * nwg.x + wg.x.
// Element types come from aliases src/kernels/gemm composes in front:
// AIn (a and b: f32 or f16) and COut (c); arithmetic, bias and acc are f32.

struct Params {
    m: u32,
    n: u32,
    k: u32,
    // bit 0: add bias; bit 1: add acc.
    flags: u32,
    // Workgroups along n, and in all.
    groups_n: u32,
    groups: u32,
    // Row strides of a and b, in elements.
    lda: u32,
    ldb: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read> acc_in: array<f32>;
@group(0) @binding(5) var<storage, read_write> c: array<COut>;

// c(m, n) = v (+ bias) (+ acc), for m < M; nothing for n ≥ N.
fn store1(m: u32, n: u32, v: f32) {
    if (n >= p.n) {
        return;
    }
    var r = v;
    if ((p.flags & 1u) != 0u) {
        r += bias[n];
    }
    let idx = m * p.n + n;
    if ((p.flags & 2u) != 0u) {
        r += acc_in[idx];
    }
    c[idx] = COut(r);
}

// c(m, n..n+4) from v; nothing for m ≥ M or columns ≥ N.
fn store4(m: u32, n: u32, v: vec4<f32>) {
    if (m >= p.m) {
        return;
    }
    store1(m, n, v.x);
    store1(m, n + 1u, v.y);
    store1(m, n + 2u, v.z);
    store1(m, n + 3u, v.w);
}
