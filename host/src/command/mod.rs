//! Approved commands: the runner's list checked for an invocation, the command containers the
//! dispatcher makes, and what each call returns to the model.

pub mod ledger;
pub mod output;
pub mod relay;
pub mod stream;
