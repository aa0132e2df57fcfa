//! cordon: the host controller of an isolation boundary for AI coding agents. A runner creates one
//! [`Controller`] and passes it to every call; the library keeps no process-wide state.
//!
//! The modules, bottom to top (each imports only from the layers below it):
//!
//! - [`error`], [`uids`], [`labels`], [`archive`], [`caller_file`]: the error type and its stable
//!   ids; per-allocation uids; ownership labels and object names; the one tar writer; files a
//!   caller names.
//! - [`custody`]: the vendor credential, and where it goes: the agent's sentinel, the invocation's
//!   CA, the proxy's vault (nothing else holds the key).
//! - [`engine`]: the Docker connection pinned to the daemon's API; `engine::objects` alone
//!   creates, inspects, lists and removes containers, volumes and networks; `engine::pending`
//!   records what an operation made (or may have made) and removes it.
//! - [`kept`]: the metadata copies as seeded the controller keeps for the audit.
//! - [`controller`]: the engine connection and this runner's registries.
//! - [`profile`], [`validate`], [`image`]: the immutable agent profile and the init's policy; the
//!   read-back validator; the static in-container binaries and the FROM scratch test image.
//! - [`launch`]: one container from create to removal, and an invocation's own volumes.
//! - [`storage`], [`task`]: task storage (volumes and keeper); seeding, removal, recovery.
//! - [`repo`] (the `cordon-repo` crate, engine-free): git knowledge. The staging copy and the tree
//!   rules the seeder applies; the scratch copy of the metadata, the rules and the build of the
//!   commit the audit makes.
//! - [`audit`]: the change audit's reads of task storage (the in-container tree reader): the
//!   declared-link snapshot, the pre-launch tree check and its one-shot capability.
//! - [`command`]: approved commands on the host: each call decided and recorded, and what it
//!   returns to the model (the output held to its bound and escaped).
//! - [`invoke`]: capture, start, supervise, settle one invocation.
//!
//! The proof harness (the gate's truth table, the benchmarks, doctor, the fake vendor's test CA
//! and DNS script) is its own crate, `cordon-proof`, on this library's public API: nothing of it
//! is linked into a runner.

// Tests may run long (a scenario reads top to bottom); production functions stay under the limit.
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod archive;
pub mod audit;
pub mod caller_file;
pub mod command;
pub mod controller;
pub mod custody;
pub mod engine;
pub mod error;
pub mod image;
pub mod invoke;
pub mod kept;
pub mod labels;
pub mod launch;
pub mod profile;
pub mod storage;
pub mod task;
pub mod uids;
pub mod validate;

pub use controller::Controller;
/// The repository side (engine-free), for a runner that names its types.
pub use cordon_repo as repo;
pub use engine::Engine;
pub use error::{Error, Refusal, Result};
pub use profile::{Limits, Profile, ProfileSpec};
