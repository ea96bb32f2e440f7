// What the grouped (gemv_group.wgsl) and paired (gemv_pair.wgsl) small-M
// programs share: each member's sizes and workgroups, and its input a and
// weight b (src/kernels/gemv/group.rs's Params).

struct Params {
    m: u32,
    flags: u32,
    count: u32,
    _pad: u32,
    ns: vec4<u32>,
    ks: vec4<u32>,
    starts: vec4<u32>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a0: array<AV>;
@group(0) @binding(2) var<storage, read> a1: array<AV>;
@group(0) @binding(3) var<storage, read> a2: array<AV>;
@group(0) @binding(4) var<storage, read> a3: array<AV>;
@group(0) @binding(5) var<storage, read> b0: array<BV>;
@group(0) @binding(6) var<storage, read> b1: array<BV>;
@group(0) @binding(7) var<storage, read> b2: array<BV>;
@group(0) @binding(8) var<storage, read> b3: array<BV>;
