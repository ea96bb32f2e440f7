//! Host quantization and dequantization throughput per type: MB of f32
//! weights (input for quantizing, output for dequantizing) a second, on one
//! thread (slices of one work chunk each) and on all the host's cores
//! (`quantize_rows` splitting rows). Weights are 4096-wide rows of a cubed
//! uniform times 0.05 (tails like trained weights'); the figure is the best
//! of 3 runs. `cargo bench --bench quant`; `WGPU_TP_BENCH_WEIGHTS` sets the
//! tensor size (default 2^23 weights, 32 MB).

use std::time::Instant;

use wgpu_tp::quant::{QuantType, dequantize_rows, quantize, quantize_rows};

const K: usize = 4096;

/// Best wall time of 3 runs of `f`, in seconds.
fn best<T>(mut f: impl FnMut() -> T) -> f64 {
    (0..3)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let n: usize = std::env::var("WGPU_TP_BENCH_WEIGHTS")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(1 << 23)
        .next_multiple_of(K);
    let mut s = 0x1234_5678_9abc_def0u64;
    let x: Vec<f32> = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
            u * u * u * 0.05
        })
        .collect();
    let mb = (n * 4) as f64 / 1e6;
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    println!("{n} weights ({mb:.0} MB f32), rows of {K}, {cores} cores");
    for q in QuantType::ALL {
        // 2^15 weights is one work chunk: `quantize` keeps it on this thread.
        let one = best(|| {
            for c in x.chunks(1 << 15) {
                std::hint::black_box(quantize(q, c).unwrap());
            }
        });
        let all = best(|| quantize_rows(q, &x, n / K, K).unwrap());
        let blocks = quantize_rows(q, &x, n / K, K).unwrap();
        let deq = best(|| dequantize_rows(q, &blocks, n / K, K).unwrap());
        println!(
            "{q}: quantize {:7.1} MB/s on 1 thread, {:7.1} MB/s on {cores}; dequantize {:7.1} MB/s",
            mb / one,
            mb / all,
            mb / deq
        );
    }
}
