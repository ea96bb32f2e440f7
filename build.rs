//! A hash of the kernels' code (`shaders/`, `src/kernels/` and the tuner,
//! `src/device/tune.rs`), built into the crate as `WGPU_TP_KERNELS_HASH`:
//! kernel choices measured and kept on disk are keyed by it, so they are
//! measured again when the code they timed changes, not only with the
//! crate's version.

use std::path::{Path, PathBuf};

fn main() {
    let mut files = vec![PathBuf::from("src/device/tune.rs")];
    println!("cargo:rerun-if-changed=src/device/tune.rs");
    for dir in ["shaders", "src/kernels"] {
        println!("cargo:rerun-if-changed={dir}");
        collect(Path::new(dir), &mut files);
    }
    files.sort();
    // FNV-1a: stable across Rust releases, unlike std's hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for f in &files {
        let name = f.to_string_lossy().into_owned().into_bytes();
        for b in name.into_iter().chain(std::fs::read(f).unwrap_or_default()) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    println!("cargo:rustc-env=WGPU_TP_KERNELS_HASH={h:016x}");
}

/// Every WGSL and Rust file under `dir`, recursively (not editors' backups).
fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|x| x == "wgsl" || x == "rs") {
            out.push(path);
        }
    }
}
