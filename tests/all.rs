//! The real-Docker suite: one test binary, so it builds and links once and shares the test image.
//! Every requirement in docs/gate.md names tests here.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]
// A test scenario reads top to bottom, however long.
#![allow(clippy::too_many_lines)]

mod suite;
