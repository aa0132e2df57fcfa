//! The contract between the cordon host controller, cordon-init and cordon-probe.
//!
//! Pure data, no I/O: protection ids ([`catalogue`]), phases and vendors ([`phase`]), the policy
//! file ([`policy`]), the init's report lines and exit codes ([`report`]), the one refusal shape
//! every layer reports ([`refusal`]) and the fixed paths inside a container ([`paths`]) and how the in-container binaries are built
//! ([`static_build`]); the tree reader's requests, answers, limits and pin rules ([`tree`]); the post-run audit's
//! answer, manifest and name rule ([`audit`]).
//!
//! The facts more than one layer checks, each with its own algorithm, are here as data: the
//! capability sets ([`capabilities`]), what an engine socket is ([`engine_socket`]), the link
//! bound ([`paths::MAX_LINK_HOPS`]), the egress forwarder, proxy rules and probe fixture
//! ([`egress`]); and the one Landlock ABI query ([`landlock`], a syscall the
//! init and the probes both make; with [`paths::wait_for_policy`], the only I/O here).

// Tests may run long (a scenario reads top to bottom); production functions stay under the limit.
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod audit;
pub mod capabilities;
pub mod catalogue;
pub mod command;
pub mod credential;
pub mod egress;
pub mod engine_socket;
pub mod landlock;
pub mod paths;
pub mod phase;
pub mod policy;
pub mod probe;
pub mod procfs;
pub mod refusal;
pub mod report;
pub mod seccomp;
pub mod static_build;
pub mod tree;

pub use catalogue::{Id, Layers};
pub use phase::{Phase, Vendor};
pub use policy::Policy;
pub use refusal::Refusal;
pub use report::InitLine;
