//! Layer 3, `src/comm/`: collectives on both transports.

mod collectives;
