//! Multi-process tests (feature `mpi`): this binary launches itself under
//! `mpirun` at np = 2, 4 and 8, each run under a time limit, and checks what
//! every rank printed. As a worker (`WGPU_TP_MPI_WORKER=<scenario>`) it runs
//! one scenario on `MeshBuilder::mpi()`:
//! - `collectives`: every collective with uneven sizes (a rank with 0 rows
//!   included), bit-identical to the rank-order reference and, on rank 0, to
//!   a single-process mesh of the same size; bad calls are errors on every
//!   rank, after which the mesh still works;
//! - `gpt`: a GPT's loss and every gradient, then two AdamW steps, bit-identical
//!   to the single-process run at the same P, with the same communication;
//!   a quantized GGUF model's logits, loss and gradients too;
//! - `fault`: the last rank fails before a collective; the others get an
//!   error naming it within the time limit, not a hang;
//! - `axes`, `axes_fault` (`axes.rs`): named axes over processes, data
//!   parallelism bit-identical to one process, and a failing rank named
//!   with its axis (np = 4, and np = 8 for `axes`);
//! - `pipeline`, `pipeline_fault` (`pipeline.rs`): a GPT in two pipeline
//!   stages, bit-identical to one process, and a failing stage named to its
//!   neighbours (np = 4, and np = 8 for `pipeline`); `pipeline_mismatch`
//!   (np = 2): a message of another size is an error, not an abort.
//!
//! `cargo test --features mpi --test mpi` (MPI from `libopenmpi-dev openmpi-bin`).

mod axes;
mod collectives;
mod gpt;
mod launch;
mod pipeline;

use std::process::ExitCode;
use std::time::Duration;

use wgpu_tp::MeshBuilder;

fn main() -> ExitCode {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        // SAFETY: single-threaded at this point.
        unsafe { std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir()) };
    }
    match std::env::var("WGPU_TP_MPI_WORKER").ok().as_deref() {
        Some(scenario) => worker(scenario),
        None => launch::run_all(),
    }
}

/// One rank of a scenario; prints `PASS <scenario> rank r` when it holds.
/// The verdict is printed before the mesh drops, since dropping it
/// finalises MPI, which waits for every rank.
fn worker(scenario: &str) -> ExitCode {
    // Short limits, so a broken run fails in seconds rather than hanging.
    let limit = if scenario.ends_with("fault") { 3 } else { 120 };
    let mesh = match MeshBuilder::new()
        .mpi()
        .mpi_timeout(Duration::from_secs(limit))
        .build()
    {
        Ok(m) => m,
        Err(e) => {
            println!("FAIL {scenario}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = match scenario {
        "collectives" => collectives::run(&mesh),
        "gpt" => gpt::run(&mesh),
        "fault" => collectives::fault(&mesh),
        "axes" => axes::run(&mesh),
        "axes_fault" => axes::fault(&mesh),
        "pipeline" => pipeline::run(&mesh),
        "pipeline_fault" => pipeline::fault(&mesh),
        "pipeline_mismatch" => pipeline::mismatch(&mesh),
        other => Err(format!("unknown scenario {other:?}")),
    };
    match outcome {
        Ok(rank) => {
            println!("PASS {scenario} rank {rank}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("FAIL {scenario}: {e}");
            ExitCode::FAILURE
        }
    }
}
