//! The contract between the cordon host controller, cordon-init and cordon-probe.
//!
//! Pure data, no I/O: protection ids ([`catalogue`]), phases and vendors ([`phase`]), the policy
//! file ([`policy`]), the init's report lines and exit codes ([`report`]), the one refusal shape
//! every layer reports ([`refusal`]) and the fixed paths inside a container ([`paths`]).

pub mod catalogue;
pub mod paths;
pub mod phase;
pub mod policy;
pub mod probe;
pub mod procfs;
pub mod refusal;
pub mod report;
pub mod seccomp;

pub use catalogue::{Id, Layers};
pub use phase::{Phase, Vendor};
pub use policy::Policy;
pub use refusal::Refusal;
pub use report::InitLine;
