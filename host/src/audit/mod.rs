//! The change audit's reads of task storage. cordon-init's `tree` roles do the reading, in a tool
//! container with both task volumes read-only, no network and a helper's hardening, without
//! following any link; the host only parses their one JSON document, with limits, and nothing
//! on the host reads agent-written content through a path.
//!
//! Every verb is a method of a [`Task`] (`ctl.task(&handle)?`: one storage handle bound to its
//! controller, its head and metadata baseline checked once). Before a writable run: the
//! declared-link snapshot ([`Task::snapshot_links`]) and the pre-launch tree check
//! ([`Task::check_tree`]), whose one-shot [`TreeCheck`] an execute or fix start redeems. After
//! it: the change manifest ([`Task::inspect`]), the diff export ([`Task::export_diff`]) and the
//! commit of what it holds ([`Task::commit`]).

pub mod check;
pub mod commit;
pub mod export;
pub mod inspect;
pub mod links;
pub(crate) mod reader;
pub mod task;

pub use check::{redeem, Masks, TreeCheck};
pub use commit::{CommitRequest, Committed};
pub use export::Export;
pub use links::refuse_through_links;
pub use reader::DEFAULT_DEADLINE;
pub use task::Task;
