//! The change audit's reads of task storage. cordon-init's `tree` roles do the reading, in a tool
//! container with both task volumes read-only, no network and a helper's hardening, without
//! following any link; the host only parses their one JSON document, with limits, and nothing
//! on the host reads agent-written content through a path.
//!
//! Before a writable run: the declared-link snapshot ([`snapshot_links`]) and the pre-launch tree
//! check ([`check_tree`]), whose one-shot [`TreeCheck`] an execute or fix start redeems. After
//! it: the change manifest ([`inspect`]), the diff export ([`export_diff`]) and the commit of what
//! it holds ([`commit`]). After
//! it: the change manifest ([`inspect`]), the diff export ([`export_diff`]) and the commit of what
//! it holds ([`commit`]).

pub mod check;
pub mod commit;
pub mod export;
pub mod inspect;
pub mod links;
mod reader;

pub use check::{check_tree, redeem, Masks, TreeCheck};
pub use commit::{commit, CommitRequest, Committed};
pub use export::{export_diff, Export};
pub use inspect::inspect;
pub use links::{refuse_through_links, snapshot_links};
pub use reader::DEFAULT_DEADLINE;
