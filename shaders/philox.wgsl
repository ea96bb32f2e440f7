// Philox-4x32-10 (Salmon et al., SC'11; Random123's constants), shared by the
// counter-based kernels (dropout.wgsl, init.wgsl; composed in front of them
// in Rust). src/kernels/random.rs computes the same words on the host.

const M0: u32 = 0xD2511F53u;
const M1: u32 = 0xCD9E8D57u;
const W0: u32 = 0x9E3779B9u;
const W1: u32 = 0xBB67AE85u;

// The high 32 bits of the 64-bit product a·b, from 16-bit halves.
fn mulhi(a: u32, b: u32) -> u32 {
    let al = a & 0xFFFFu;
    let ah = a >> 16u;
    let bl = b & 0xFFFFu;
    let bh = b >> 16u;
    let ll = al * bl;
    let lh = al * bh;
    let hl = ah * bl;
    let mid = (ll >> 16u) + (lh & 0xFFFFu) + (hl & 0xFFFFu);
    return ah * bh + (lh >> 16u) + (hl >> 16u) + (mid >> 16u);
}

// Philox-4x32 with 10 rounds: four random words of `counter` under `key`.
fn philox(counter: vec4<u32>, key: vec2<u32>) -> vec4<u32> {
    var c = counter;
    var k = key;
    for (var round = 0u; round < 10u; round++) {
        if (round > 0u) {
            k = k + vec2<u32>(W0, W1);
        }
        let hi0 = mulhi(M0, c.x);
        let lo0 = M0 * c.x;
        let hi1 = mulhi(M1, c.z);
        let lo1 = M1 * c.z;
        c = vec4<u32>(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    }
    return c;
}

