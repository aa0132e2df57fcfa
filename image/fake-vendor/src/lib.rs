//! The fake vendor endpoint (being built).
