//! The crate's one error type. Every variant says what went wrong and what to do.

use std::fmt;

use crate::element::DType;

/// Result alias used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A shape written as `[a, b, c]` in messages.
#[derive(Clone, PartialEq, Eq)]
pub struct Shape(pub Vec<usize>);

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl From<&[usize]> for Shape {
    fn from(s: &[usize]) -> Self {
        Shape(s.to_vec())
    }
}

impl From<Vec<usize>> for Shape {
    fn from(s: Vec<usize>) -> Self {
        Shape(s)
    }
}

/// Everything that can go wrong in wgpu-tp.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    // ---- adapters and devices ----
    /// No adapter matched the request.
    #[error(
        "no GPU adapter found{detail}. Install a driver: on Debian/Ubuntu `apt-get install mesa-vulkan-drivers` gives the lavapipe (Vulkan) software adapter, and Mesa's `libegl1 libgl1-mesa-dri` give llvmpipe (GL); or unset WGPU_BACKEND / WGPU_ADAPTER_NAME"
    )]
    NoAdapter {
        /// What was asked for, e.g. " for backend GL named \"foo\"".
        detail: String,
    },
    /// `WGPU_BACKEND` or a builder option named no backend wgpu knows.
    #[error("unknown backend {0:?}: use one of vulkan, metal, dx12, gl (comma-separated)")]
    UnknownBackend(String),
    /// `request_device` failed.
    #[error("could not open a device on adapter {adapter:?}: {message}")]
    RequestDevice {
        /// Adapter name.
        adapter: String,
        /// wgpu's message.
        message: String,
    },
    /// The device was lost (driver reset, out of memory, destroyed).
    #[error(
        "device of rank {rank} was lost: {message}. Build a new Mesh; tensors of the old one cannot be used"
    )]
    DeviceLost {
        /// Rank whose device was lost.
        rank: usize,
        /// wgpu's reason.
        message: String,
    },
    /// wgpu reported a validation or out-of-memory error.
    #[error("wgpu error on rank {rank}: {message}")]
    Wgpu {
        /// Rank on which it happened.
        rank: usize,
        /// wgpu's message.
        message: String,
    },
    /// A shader failed to compile on this device.
    #[error("shader {name} failed to compile: {message}")]
    Shader {
        /// Shader family name.
        name: &'static str,
        /// Compiler message.
        message: String,
    },

    // ---- shapes and arguments ----
    /// Operand shapes do not fit the operation.
    #[error("{op}: shape mismatch, expected {expected}, got {got}")]
    ShapeMismatch {
        /// Operation name.
        op: &'static str,
        /// What was expected (a shape or a description).
        expected: String,
        /// What was given.
        got: String,
    },
    /// A tensor holds the wrong element type.
    #[error("{op}: expected a tensor of {expected}, got {got}")]
    DTypeMismatch {
        /// Operation name.
        op: &'static str,
        /// Expected dtype.
        expected: DType,
        /// Given dtype.
        got: DType,
    },
    /// Host data does not have as many elements as the shape says.
    #[error("{op}: shape {shape} needs {expected} elements, but {got} were given")]
    DataLength {
        /// Operation name.
        op: &'static str,
        /// Shape asked for.
        shape: Shape,
        /// Elements the shape needs.
        expected: usize,
        /// Elements given.
        got: usize,
    },
    /// An index (token id, target, dimension, rank) is out of range.
    #[error("{op}: {what} {value} is out of range 0..{bound}")]
    OutOfRange {
        /// Operation name.
        op: &'static str,
        /// What the index is ("token id", "dim", "rank").
        what: &'static str,
        /// The offending value.
        value: i64,
        /// Exclusive upper bound.
        bound: usize,
    },
    /// Operands live on different ranks (or meshes) where one rank is required.
    #[error(
        "{op}: operands live on different ranks ({a} and {b}); move data between ranks with a collective"
    )]
    RankMismatch {
        /// Operation name.
        op: &'static str,
        /// One rank.
        a: usize,
        /// Other rank.
        b: usize,
    },
    /// A size exceeds a device limit.
    #[error(
        "{op}: {what} needs {needed} bytes but the device allows {limit} ({limit_name}); split the tensor or use a smaller batch"
    )]
    TooLarge {
        /// Operation name.
        op: &'static str,
        /// What is too large.
        what: &'static str,
        /// Bytes needed.
        needed: u64,
        /// The limit.
        limit: u64,
        /// wgpu's name of the limit.
        limit_name: &'static str,
    },
    /// What a model or tensor would allocate is more than the memory there is.
    #[error(
        "{op}: {what} needs {needed} bytes ({needed_gib:.2} GiB) but {pool} has {available} bytes ({available_gib:.2} GiB); use a smaller configuration or more memory (more ranks on separate devices or hosts)",
        needed_gib = *needed as f64 / (1u64 << 30) as f64,
        available_gib = *available as f64 / (1u64 << 30) as f64
    )]
    OutOfMemory {
        /// Operation name.
        op: &'static str,
        /// What would be allocated.
        what: String,
        /// Bytes needed (saturated at `u64::MAX`).
        needed: u64,
        /// Bytes available there.
        available: u64,
        /// Where: the host's available memory, for a CPU adapter.
        pool: String,
    },
    /// A kernel needs more of a per-pipeline resource than the device allows.
    #[error(
        "{op}: needs {needed} for {limit_name} but the device allows {limit}; open the mesh on an adapter with higher limits (e.g. wgpu::Limits::default(), WebGPU's) or avoid this operation"
    )]
    DeviceLimit {
        /// The kernel (`family::entry`).
        op: String,
        /// wgpu's name of the limit.
        limit_name: &'static str,
        /// What the kernel needs.
        needed: u64,
        /// What the device allows.
        limit: u64,
    },
    /// The adapter lacks a feature the operation needs (e.g. f16 without
    /// `SHADER_F16`).
    #[error(
        "{op}: {what} needs the {feature} feature, which adapter {adapter:?} does not have; {hint}"
    )]
    Unsupported {
        /// Operation name.
        op: &'static str,
        /// What was asked for.
        what: &'static str,
        /// wgpu's name of the missing feature.
        feature: &'static str,
        /// The adapter's name.
        adapter: String,
        /// What to do instead.
        hint: &'static str,
    },
    /// A blocking call in a browser (wasm32), where nothing may wait for the
    /// GPU: results come back only through the `async` form.
    #[error(
        "{op} waits for the device, which a browser page cannot do: call {op}_async(...).await instead"
    )]
    WouldBlock {
        /// The blocking operation.
        op: &'static str,
    },
    /// A collective over processes did not complete in time: some ranks
    /// failed, stopped, or run a different sequence of collectives.
    #[error(
        "{op}{group}: ranks {missing:?} did not arrive within {seconds:.1} s (rank {rank} waited); a process failed or runs a different sequence of collectives. Raise the limit with MeshBuilder::mpi_timeout or WGPU_TP_MPI_TIMEOUT (seconds) if it is only slow"
    )]
    Timeout {
        /// The collective.
        op: &'static str,
        /// Ranks whose messages did not arrive.
        missing: Vec<usize>,
        /// The time limit that ran out.
        seconds: f64,
        /// The rank that reports it.
        rank: usize,
        /// The sub-mesh it ran on, when not the whole mesh: its axes and
        /// world ranks (empty otherwise).
        group: String,
    },
    /// MPI failed or is not available.
    #[error("MPI: {0}")]
    Mpi(String),
    /// A bad argument that is not a shape or a range.
    #[error("{op}: {message}")]
    InvalidArgument {
        /// Operation name.
        op: &'static str,
        /// What is wrong and what to do.
        message: String,
    },
    /// Reading or writing a checkpoint failed.
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    /// A tokenizer file is missing, unreadable or malformed, or text could
    /// not be encoded.
    #[error("tokenizer {file}: {message}")]
    Tokenizer {
        /// The file (or directory) concerned.
        file: String,
        /// What went wrong and what to do.
        message: String,
    },
    /// An I/O error (checkpoint files).
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// Shorthand for [`Error::ShapeMismatch`].
    pub(crate) fn shape(op: &'static str, expected: impl fmt::Debug, got: impl fmt::Debug) -> Self {
        Error::ShapeMismatch {
            op,
            expected: format!("{expected:?}"),
            got: format!("{got:?}"),
        }
    }

    /// [`Error::Unsupported`] for an f16 tensor on an adapter without `SHADER_F16`.
    pub(crate) fn no_f16(op: &'static str, adapter: &str) -> Self {
        Error::Unsupported {
            op,
            what: "an f16 tensor",
            feature: "SHADER_F16",
            adapter: adapter.to_string(),
            hint: "keep this model in f32, or use an adapter that has it (Mesa >= 24 lavapipe, Metal, most desktop Vulkan/DX12 GPUs; `cargo run --example devices` lists them)",
        }
    }

    /// Shorthand for [`Error::InvalidArgument`].
    pub(crate) fn invalid(op: &'static str, message: impl Into<String>) -> Self {
        Error::InvalidArgument {
            op,
            message: message.into(),
        }
    }
}
