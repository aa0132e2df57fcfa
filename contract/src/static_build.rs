//! How the in-container binaries are built: the host library's workspace build and the CLI's
//! build script run the same cargo build, so each finds the other's output up to date.

/// The only target the in-container binaries are built for (glibc, `+crt-static`).
pub const TARGET: &str = "x86_64-unknown-linux-gnu";
/// The cargo profile of the in-container binaries (panic = abort, stripped).
pub const PROFILE: &str = "static";
/// The flags that make them static: with an explicit `--target`, proc macros and build scripts
/// still build for the host without them.
pub const RUSTFLAGS: &str = "-C target-feature=+crt-static";
/// Where they are built, beneath the workspace.
pub const TARGET_DIR: [&str; 2] = ["target", "static"];
/// The packages built.
pub const PACKAGES: [&str; 6] = [
    "cordon-init",
    "cordon-mcp",
    "cordon-probe",
    "cordon-egress",
    "cordon-fake-claude",
    "cordon-fake-vendor",
];
/// The binaries they make, by the name cargo gives them.
pub const BINARIES: [&str; 6] = [
    "cordon-init",
    "cordon-mcp",
    "cordon-probe",
    "cordon-egress",
    "claude",
    "fake-vendor",
];
