//! The fake vendor endpoint for tests: a TLS (and plain) HTTP/1.1 server that answers for the
//! vendor's name, and a scripted DNS server, so the egress path can be exercised end to end
//! without a packet leaving the machine.
//!
//! The HTTP server is also a fake Anthropic Messages API (`messages`): `POST /v1/messages`
//! answers a real vendor CLI as a scripted model would, streaming or not, the scenario picked by a
//! marker in the prompt (`[[cordon-scenario NAME]]`, `[[cordon-script JSON]]`).
//!
//! Each runs in its own FROM-scratch container as the `fake-vendor` binary, or in-process in Rust
//! tests. Both record what they were asked (`tls::Server::seen` and `tls::Server::messages`,
//! `dns::Server::queries`); the binary also prints each record as one JSON line on stdout
//! (`{"tls_request":..}`, `{"messages_request":..}` a `messages::MessagesRecord`,
//! `{"dns_query":..}`), so a container's log can be asserted on.

// Tests may run long (a scenario reads top to bottom); production functions stay under the limit.
#![cfg_attr(test, allow(clippy::too_many_lines))]

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

pub mod ca;
pub mod dns;
pub mod hello;
pub mod messages;
pub mod tls;

/// Why a server could not be set up, or an argument was refused.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// rcgen refused the names or failed to sign.
    #[error("generating the test CA: {0}")]
    Ca(String),
    /// The certificate chain or key PEM is unusable.
    #[error("the TLS identity: {0}")]
    Identity(String),
    /// rustls refused the identity (for example, a key that does not match the certificate).
    #[error("the TLS configuration: {0}")]
    Tls(String),
    /// A DNS `--answer` argument that does not parse.
    #[error("bad DNS answer {arg:?}: {reason}")]
    Answer { arg: String, reason: String },
    /// `tls::start` was called outside a tokio runtime, where its task could not be spawned.
    #[error("no tokio runtime: start the server from within one")]
    NoRuntime,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Whether records are echoed on stdout: only the binary turns it on, so in-process tests keep a
/// quiet stdout (their spawned tasks' output would not be captured by the test harness).
static ECHO: AtomicBool = AtomicBool::new(false);

/// Print every recorded DNS query and TLS request as one JSON line on stdout from now on (what the
/// `fake-vendor` binary does).
pub fn echo_to_stdout(on: bool) {
    ECHO.store(on, Ordering::Relaxed);
}

/// One `{"KEY": VALUE}` line on stdout, if echoing. A closed stdout is not a reason to stop
/// serving, so write errors are ignored.
pub(crate) fn echo(key: &str, value: &impl serde::Serialize) {
    if !ECHO.load(Ordering::Relaxed) {
        return;
    }
    // Serialized directly, not through a serde_json map (which sorts keys): fields stay in their
    // declared order, as documented.
    let (Ok(key), Ok(value)) = (serde_json::to_string(key), serde_json::to_string(value)) else {
        return;
    };
    let line = format!("{{{key}:{value}}}");
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// A lock that a panicking holder elsewhere does not make unusable: the data (a log of records)
/// is valid at every step.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
