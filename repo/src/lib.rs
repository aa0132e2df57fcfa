//! cordon's repository side: git knowledge, engine-free. It never reaches a container or the
//! engine (bollard is not among its dependencies, so the compiler keeps it so); the library
//! (`cordon`) moves the bytes between task storage and these functions.
//!
//! The modules, bottom to top:
//!
//! - [`error`], [`unusable`]: this side's error type (the library takes each variant onto its own)
//!   and why a repository cannot be seeded.
//! - [`git`]: hardened git, only ever on a repository cordon made itself.
//! - Seeding: [`source`] opens the runner's repository without following a link; [`verify`]
//!   checks a hard-linked metadata file is what its name says; [`tree`] the seeded tree's rules
//!   (links, names, what it needs); [`clone`] the staging copy that brings them together;
//!   [`loose`] reads its loose blobs back for the checkout, checked as [`verify`] checks.
//! - The commit: [`scratch`] the controller-owned copy of the task's metadata and base's tree;
//!   [`portable`] and [`paths`] the rules every committed path must meet; [`special`] what
//!   `.gitmodules` and `.gitattributes` may say; [`build`] the fast-import stream, the commit,
//!   fsck and the bundle.

// Tests may run long (a scenario reads top to bottom); production functions stay under the limit.
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod build;
pub mod clone;
pub mod error;
pub mod git;
pub mod loose;
pub mod paths;
pub mod portable;
pub mod scratch;
pub mod source;
pub mod special;
pub mod tree;
pub mod unusable;
pub mod verify;

#[cfg(test)]
mod test_repo;

pub use error::{Error, Result};
pub use unusable::Unusable;
