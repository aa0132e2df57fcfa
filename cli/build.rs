//! Builds the static in-container binaries (cordon-init, cordon-probe, the fake vendor CLI) from
//! this workspace and leaves copies in OUT_DIR, where `src/image.rs` embeds them: an installed
//! `cordon` carries what its test image needs and never looks for a source tree.
//!
//! The build is the one `cordon::image::build_static_binaries` runs (same flags, same target
//! directory, `target/static`), so the tests' workspace builds and this one reuse each other.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use cordon_contract::static_build::{BINARIES, PACKAGES, PROFILE, RUSTFLAGS, TARGET, TARGET_DIR};

/// What the binaries are built from: a change to any of these rebuilds them.
const SOURCES: [&str; 9] = [
    "Cargo.toml",
    "Cargo.lock",
    "contract",
    "init",
    "mcp",
    "probes",
    "egress",
    "image/fake-claude",
    "image/fake-vendor",
];

/// Set by the cargo running this script for this script alone: a nested cargo must not take
/// them as its own configuration (clippy's wrapper, the outer flags, the outer package's facts).
const OUTER_ONLY: [&str; 10] = [
    "RUSTC_WORKSPACE_WRAPPER",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_BUILD_RUSTFLAGS",
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET",
    "TARGET",
    "HOST",
    "OUT_DIR",
    "PROFILE",
    "OPT_LEVEL",
];

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("cordon-cli build: {why}");
            ExitCode::FAILURE
        }
    }
}

fn var(name: &str) -> Result<PathBuf, String> {
    std::env::var_os(name)
        .map(PathBuf::from)
        .ok_or_else(|| format!("cargo did not set {name}"))
}

fn run() -> Result<(), String> {
    let manifest = var("CARGO_MANIFEST_DIR")?;
    let out_dir = var("OUT_DIR")?;
    let root = manifest
        .parent()
        .ok_or_else(|| format!("{} has no parent", manifest.display()))?;
    for source in SOURCES {
        let path = root.join(source);
        if !path.exists() {
            return Err(format!(
                "the in-container binaries are built from the cordon workspace, and {} is \
                 missing: build cordon-cli from a whole cordon checkout",
                path.display()
            ));
        }
        println!("cargo:rerun-if-changed={}", path.display());
    }
    let target_dir = TARGET_DIR
        .iter()
        .fold(root.to_path_buf(), |dir, part| dir.join(part));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(root)
        .args(["build", "--locked", "--quiet", "--profile", PROFILE])
        .args(["--target", TARGET]);
    for package in PACKAGES {
        command.args(["-p", package]);
    }
    for name in OUTER_ONLY {
        command.env_remove(name);
    }
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if [
            "CARGO_PKG_",
            "CARGO_CFG_",
            "CARGO_FEATURE_",
            "CARGO_MANIFEST_",
        ]
        .iter()
        .any(|prefix| name.starts_with(prefix))
        {
            command.env_remove(&*name);
        }
    }
    // glibc `+crt-static` with an explicit `--target`: proc macros and build scripts still build
    // for the host without the flag.
    command
        .env("CARGO_TARGET_DIR", &target_dir)
        .env("RUSTFLAGS", RUSTFLAGS);
    let output = command
        .output()
        .map_err(|e| format!("running cargo for the in-container binaries: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo build of the in-container binaries ({}) failed ({}):\n{}",
            PACKAGES.join(", "),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let built = target_dir.join(TARGET).join(PROFILE);
    for name in BINARIES {
        copy(&built.join(name), &out_dir.join(name))?;
    }
    Ok(())
}

/// A copy the embedding reads, so a later build into `target/static` cannot change what this
/// build of cordon carries.
fn copy(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::copy(from, to)
        .map(drop)
        .map_err(|e| format!("copying {} to {}: {e}", from.display(), to.display()))
}
