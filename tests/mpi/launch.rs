//! Launching the scenarios under `mpirun` with a time limit each.

use std::io::Read;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// Generous for 4 oversubscribed ranks on 2 cores with a cold shader cache.
const LIMIT: Duration = Duration::from_secs(600);

pub fn run_all() -> ExitCode {
    let mut failed = 0;
    let runs = [2, 4].into_iter().flat_map(|np| {
        let with_axes: &[&str] = if np == 4 {
            &["axes", "axes_fault", "pipeline", "pipeline_fault"]
        } else {
            &["pipeline_mismatch"]
        };
        ["collectives", "gpt", "fault"]
            .iter()
            .chain(with_axes)
            .map(move |s| (np, *s))
    });
    for (np, scenario) in runs.chain([(8, "axes"), (8, "pipeline")]) {
        {
            let t = Instant::now();
            match run(np, scenario) {
                Ok(()) => println!(
                    "ok   mpi {scenario} np={np} ({:.1} s)",
                    t.elapsed().as_secs_f64()
                ),
                Err(e) => {
                    failed += 1;
                    println!("FAIL mpi {scenario} np={np}: {e}");
                }
            }
        }
    }
    if failed > 0 {
        println!("{failed} MPI run(s) failed");
        return ExitCode::FAILURE;
    }
    println!("all MPI runs passed");
    ExitCode::SUCCESS
}

/// `mpirun` on one host, loopback only, allowed as root and oversubscribed.
fn mpirun(np: usize) -> Command {
    let mut c = Command::new("mpirun");
    c.args(["-np", &np.to_string(), "--oversubscribe"])
        .args(["--mca", "pml", "ob1", "--mca", "btl", "self,vader"])
        // Containers often forbid cross-memory attach.
        .args(["--mca", "btl_vader_single_copy_mechanism", "none"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        // One lavapipe thread per rank, so np ranks do not fight for cores.
        .env("LP_NUM_THREADS", "1");
    c
}

fn run(np: usize, scenario: &str) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    // Files the ranks share (one host): a fresh directory per run.
    let tmp = std::env::temp_dir().join(format!(
        "wgpu-tp-mpi-{}-{np}-{scenario}",
        std::process::id()
    ));
    std::fs::create_dir_all(&tmp).map_err(|e| e.to_string())?;
    let mut child = mpirun(np)
        .args(["-x", "WGPU_TP_MPI_WORKER", "-x", "WGPU_TP_MPI_TMP"])
        .env("WGPU_TP_MPI_TMP", &tmp)
        .arg(exe)
        .env("WGPU_TP_MPI_WORKER", scenario)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start mpirun ({e}); install openmpi-bin"))?;
    // Read both pipes while it runs, so a chatty run cannot block on them.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_string(&mut text);
            }
            text
        })
    };
    let out_reader = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err_reader = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
            break s;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("still running after {LIMIT:?}: a hang"));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = std::fs::remove_dir_all(&tmp);
    let out = out_reader.join().unwrap_or_default();
    let err = err_reader.join().unwrap_or_default();
    let passes = (0..np)
        .filter(|r| out.contains(&format!("PASS {scenario} rank {r}\n")))
        .count();
    let fault = scenario.ends_with("fault");
    let want = if fault { np - 1 } else { np };
    let ok = passes == want && (fault || status.success());
    if !ok {
        return Err(format!(
            "{passes} of {want} ranks passed (exit {status}):\n{out}\n{err}"
        ));
    }
    if fault && !out.contains(&format!("FAILED on purpose rank {}", np - 1)) {
        return Err(format!("the failing rank did not report:\n{out}\n{err}"));
    }
    Ok(())
}
