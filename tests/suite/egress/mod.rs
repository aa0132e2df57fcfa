//! The egress proxy end to end. `hostile`: with no engine, the real proxy
//! ([`cordon_egress::proxy`]) on a real unix socket, its real resolver asking the fake vendor's
//! scripted DNS server, and the fake vendor's TLS server behind a mapping, every one of them on
//! 127.0.0.1. `engine`: the invocation's network and proxy on the real engine.

mod engine;
mod hostile;
