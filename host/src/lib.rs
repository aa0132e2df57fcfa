//! cordon: the host controller of an isolation boundary for AI coding agents.
//!
//! - [`caller_file`]: reading a file a caller named (bounded, regular files only, never blocking).
//! - [`engine`]: the Docker engine through bollard, pinned to the daemon's API version.
//! - [`image`]: the static in-container binaries and the FROM scratch test image.
//! - [`profile`]: the immutable agent container profile, its create request and the init's policy.
//! - [`validate`]: the read-back validator.
//! - [`storage`], [`launch`], [`cleanup`]: volumes, keeper, one container from create to removal.
//! - [`gate`], [`doctor`], [`bench`]: the truth table, the environment check, the launch benchmark.

pub mod archive;
pub mod bench;
pub mod caller_file;
pub mod controller;
pub mod doctor;
pub mod engine;
pub mod error;
pub mod gate;
pub mod image;
pub mod invoke;
pub mod labels;
pub mod launch;
pub mod profile;
pub mod storage;
pub mod task;
pub mod uids;
pub mod validate;

pub use controller::Controller;
pub use engine::Engine;
pub use error::{Error, Refusal, Result};
pub use profile::{Limits, Profile, ProfileSpec};
