//! cordon-proof: the harness that proves the cordon library's boundary holds, and measures it. It
//! uses the library as a runner does (a [`cordon::Controller`], its public modules) and brings
//! the fake vendor's test CA and scripted DNS server, which the library a runner embeds never
//! links.
//!
//! - [`gate`]: the truth table: every protection removed in its own case, the probes' verdicts
//!   against the expected ones.
//! - [`bench`], [`bench_egress`], [`bench_claude`], [`bench_check`], [`bench_audit`]: the
//!   benchmarks (invocation and task storage; the egress path, the real CLI and the tree check and
//!   audit in their own).
//! - [`doctor`]: the environment check.
//! - [`fake_api`]: the fake Messages API standing in for the vendor's API host
//!   (`cordon run --fake-vendor`, the real-CLI suite, the gate and the bench).

// Tests may run long (a scenario reads top to bottom); production functions stay under the limit.
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod bench;
pub mod bench_all;
pub mod bench_audit;
pub mod bench_check;
pub mod bench_claude;
pub mod bench_command;
pub mod bench_egress;
pub mod bench_snapshot;
pub mod bench_terminate;
pub mod doctor;
pub mod fake_api;
pub mod gate;
