// Split-K small-M GEMM for GPUs (entry gemv_nk_split, b [N, K]), appended
// to shaders/gemv.wgsl's module. The serial entries give one invocation a
// whole row of b: too few invocations in flight, and neighbours read
// addresses K apart. Here a team of TEAM invocations owns one column of c:
// lane l sums the 8-element chunks l, l + TEAM, l + 2·TEAM, … of the weight
// row (neighbouring lanes read neighbouring 32 bytes: coalesced), then the
// team adds its lanes by a tree in workgroup memory. A workgroup holds
// WG / TEAM columns (the measured knob). The order of the sums depends on
// TEAM alone, so every WG gives the same bits, and f32 and bf16 weights of
// equal values the same bits; not the serial entries' bits (other order).
// Needs ldb8_nk(n, c) -> mat2x4<f32>: b[n, 8c..8c+8] (8c + 7 < K).

const TEAM: u32 = 32u;

// ROWS · WG ≤ 8 · 256 partial sums (8 KiB; WebGPU allows 16).
var<workgroup> part: array<f32, 2048>;

// Chunk c's (8 elements) product with row m of a.
fn chunk8(m: u32, c: u32, w: mat2x4<f32>) -> f32 {
    return dot(lda4(m, 2u * c), w[0]) + dot(lda4(m, 2u * c + 1u), w[1]);
}

@compute @workgroup_size(WG)
fn gemv_nk_split(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let team = li / TEAM;
    let lane = li % TEAM;
    let n = (wg.y * nwg.x + wg.x) * (WG / TEAM) + team;
    // Columns past N compute the last one (the barriers below need every
    // invocation) and store nothing.
    let col = min(n, p.n - 1u);
    var s: array<f32, 8>;
    let k8 = p.k / 8u;
    // Two chunks a step: four loads in flight per lane, same order of sums.
    var c = lane;
    for (; c + TEAM < k8; c += 2u * TEAM) {
        let w0 = ldb8_nk(col, c);
        let w1 = ldb8_nk(col, c + TEAM);
        for (var m = 0u; m < ROWS; m++) {
            s[m] += chunk8(m, c, w0);
            s[m] += chunk8(m, c + TEAM, w1);
        }
    }
    if (c < k8) {
        let w0 = ldb8_nk(col, c);
        for (var m = 0u; m < ROWS; m++) {
            s[m] += chunk8(m, c, w0);
        }
    }
    // K mod 8 trailing elements: the lane whose turn chunk k8 would be.
    if (lane == k8 % TEAM) {
        for (var k = 8u * k8; k < p.k; k++) {
            let w = ldb_nk(col, k);
            for (var m = 0u; m < ROWS; m++) {
                s[m] += lda(m, k) * w;
            }
        }
    }
    for (var m = 0u; m < ROWS; m++) {
        part[m * WG + li] = s[m];
    }
    workgroupBarrier();
    // Halving strides: neighbouring lanes touch neighbouring words (no bank conflicts).
    for (var h = TEAM / 2u; h > 0u; h /= 2u) {
        if (lane < h) {
            for (var m = 0u; m < ROWS; m++) {
                part[m * WG + li] += part[m * WG + li + h];
            }
        }
        workgroupBarrier();
    }
    if (lane < ROWS && n < p.n) {
        store1(lane, n, part[lane * WG + team * TEAM]);
    }
}
