//! Rows (or blocks) split over the host's cores for (de)quantization: a
//! tensor's rows are independent, so chunks of them go to scoped threads
//! that take the next chunk when done, and the bytes come out the same as
//! on one thread.

use std::sync::Mutex;

use crate::error::Result;

/// Runs `work(first_unit, input, output)` over matching chunks of `input`
/// (`in_unit` items a unit) and `output` (`out_unit` items a unit), about
/// `chunk_items` input items a chunk, on up to
/// `std::thread::available_parallelism()` threads (one where it is unknown,
/// as in a browser). Both slices must hold the same number of units and
/// both unit sizes be non-zero. The error of the earliest failing chunk is
/// returned.
pub(crate) fn chunks<T: Sync, U: Send>(
    input: &[T],
    in_unit: usize,
    output: &mut [U],
    out_unit: usize,
    chunk_items: usize,
    work: impl Fn(usize, &[T], &mut [U]) -> Result<()> + Sync,
) -> Result<()> {
    let units = input.len() / in_unit;
    let per_chunk = (chunk_items / in_unit).max(1);
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(units.div_ceil(per_chunk));
    if threads <= 1 {
        return work(0, input, output);
    }
    let tasks = Mutex::new(
        input
            .chunks(per_chunk * in_unit)
            .zip(output.chunks_mut(per_chunk * out_unit))
            .enumerate(),
    );
    let failed: Mutex<Option<(usize, crate::error::Error)>> = Mutex::new(None);
    let run = || {
        loop {
            // A poisoned lock means another worker panicked; the scope
            // re-raises that panic, so carrying on is harmless.
            let next = tasks.lock().unwrap_or_else(|e| e.into_inner()).next();
            let Some((i, (x, y))) = next else { break };
            if let Err(e) = work(i * per_chunk, x, y) {
                let mut f = failed.lock().unwrap_or_else(|e| e.into_inner());
                if f.as_ref().is_none_or(|(j, _)| i < *j) {
                    *f = Some((i, e));
                }
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 1..threads {
            // A thread that cannot be started leaves its share to the others.
            let _ = std::thread::Builder::new().spawn_scoped(s, run);
        }
        run();
    });
    match failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}
