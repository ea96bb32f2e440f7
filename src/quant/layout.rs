//! How a quantized weight's blocks sit in a device buffer: each block's
//! fields split into three regions so that every load a kernel makes is
//! aligned (GGUF's 18-, 22-, 34- and 210-byte blocks are not), with the same
//! bytes in all: the quants (`main`, 16-byte multiples, read as vec4s),
//! then the 4-byte fields (`extra`: high bits, sub-block scales), then the
//! f16 scales and minima (`halves`, two or four bytes a block).

use super::types::QuantType;

/// Byte ranges of one GGUF block that go to each region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fields {
    pub(crate) main: (usize, usize),
    pub(crate) extra: (usize, usize),
    pub(crate) halves: (usize, usize),
}

impl Fields {
    pub(crate) fn main_bytes(self) -> usize {
        self.main.1 - self.main.0
    }
    pub(crate) fn extra_bytes(self) -> usize {
        self.extra.1 - self.extra.0
    }
    pub(crate) fn halves_bytes(self) -> usize {
        self.halves.1 - self.halves.0
    }
}

/// The regions of `q`'s block (`ggml-common.h`'s structs).
pub(crate) fn fields(q: QuantType) -> Fields {
    let f = |main, extra, halves| Fields {
        main,
        extra,
        halves,
    };
    match q {
        QuantType::Q8_0 => f((2, 34), (0, 0), (0, 2)),
        QuantType::Q4_0 => f((2, 18), (0, 0), (0, 2)),
        QuantType::Q4_1 => f((4, 20), (0, 0), (0, 4)),
        QuantType::Q5_0 => f((6, 22), (2, 6), (0, 2)),
        QuantType::Q5_1 => f((8, 24), (4, 8), (0, 4)),
        QuantType::Q4K => f((16, 144), (4, 16), (0, 4)),
        QuantType::Q5K => f((16, 176), (4, 16), (0, 4)),
        QuantType::Q6K => f((0, 192), (192, 208), (208, 210)),
    }
}

/// Byte offsets of the `extra` and `halves` regions for `blocks` blocks,
/// and the buffer's whole size: a multiple of 16, because the kernels bind
/// it as `array<vec4<u32>>`, whose length counts whole vec4s only. A
/// browser's WebGPU clamps every index to that length (robust buffer
/// access), so the scales in a last, partly filled vec4 would be read from
/// the vec4 before it; native drivers happen to read them.
pub(crate) fn regions(q: QuantType, blocks: usize) -> (usize, usize, usize) {
    let f = fields(q);
    let extra = blocks * f.main_bytes();
    let halves = extra + blocks * f.extra_bytes();
    (
        extra,
        halves,
        (halves + blocks * f.halves_bytes()).next_multiple_of(16),
    )
}

/// Bytes `blocks` blocks of `q` take on the device: GGUF's bytes in the
/// device order, rounded up to a whole vec4 (16 bytes).
pub fn device_bytes(q: QuantType, blocks: usize) -> usize {
    regions(q, blocks).2
}

/// GGUF-ordered blocks (`blocks.len()` a multiple of the block size) in the
/// device order.
pub fn to_device(q: QuantType, blocks: &[u8]) -> Vec<u8> {
    let (bb, f) = (q.block_bytes(), fields(q));
    let n = blocks.len() / bb;
    let (xo, ho, total) = regions(q, n);
    let mut out = vec![0u8; total];
    for (i, b) in blocks.chunks_exact(bb).enumerate() {
        let put = |out: &mut [u8], at: usize, (s, e): (usize, usize)| {
            out[at + i * (e - s)..at + (i + 1) * (e - s)].copy_from_slice(&b[s..e])
        };
        put(&mut out, 0, f.main);
        put(&mut out, xo, f.extra);
        put(&mut out, ho, f.halves);
    }
    out
}

/// The inverse of [`to_device`]: `blocks` blocks in GGUF order.
pub fn from_device(q: QuantType, bytes: &[u8], blocks: usize) -> Vec<u8> {
    let (bb, f) = (q.block_bytes(), fields(q));
    let (xo, ho, _) = regions(q, blocks);
    let mut out = vec![0u8; blocks * bb];
    for (i, b) in out.chunks_exact_mut(bb).enumerate() {
        let get = |b: &mut [u8], at: usize, (s, e): (usize, usize)| {
            b[s..e].copy_from_slice(&bytes[at + i * (e - s)..at + (i + 1) * (e - s)])
        };
        get(b, 0, f.main);
        get(b, xo, f.extra);
        get(b, ho, f.halves);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_hold_every_byte_once_and_round_trip() {
        for q in QuantType::ALL {
            let f = fields(q);
            assert_eq!(
                f.main_bytes() + f.extra_bytes() + f.halves_bytes(),
                q.block_bytes(),
                "{q}"
            );
            assert_eq!(f.main_bytes() % 16, 0, "{q}");
            assert_eq!(f.extra_bytes() % 4, 0, "{q}");
            for n in [1usize, 2, 3, 7] {
                let raw: Vec<u8> = (0..n * q.block_bytes())
                    .map(|i| (i * 131 % 251) as u8)
                    .collect();
                let dev = to_device(q, &raw);
                assert_eq!(dev.len(), device_bytes(q, n));
                // Kernels read the buffer as whole vec4s (see `regions`).
                assert_eq!(dev.len() % 16, 0, "{q} n={n}");
                assert!(dev.len() < n * q.block_bytes() + 16, "{q} n={n}");
                assert_eq!(from_device(q, &dev, n), raw, "{q} n={n}");
            }
        }
    }
}
