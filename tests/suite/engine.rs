//! The engine connection: version pinned on the wire.

use cordon::engine::{socket_path, ApiVersion, Engine};
use cordon_tests::controller;

/// Requests carry the pinned version: pinning a version the daemon does not speak makes it refuse.
#[tokio::test]
async fn requests_carry_the_pinned_api_version() {
    let ctl = controller().await;
    let engine = ctl.engine().clone();
    assert_eq!(
        engine.api().to_string(),
        engine.info().api,
        "pinned to what the daemon reports"
    );
    let too_new = ApiVersion {
        major: 1,
        minor: 99,
    };
    let err = Engine::connect_at(&socket_path().unwrap(), Some(too_new))
        .await
        .expect_err("a daemon below 1.99 must refuse /v1.99 requests");
    assert!(err.to_string().contains("1.99"), "{err}");
}

/// A non-unix DOCKER_HOST is refused with a reason, not tried.
#[tokio::test]
async fn tcp_docker_host_is_refused() {
    let err = Engine::connect_at("tcp://127.0.0.1:2375", None)
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("unreachable"), "{err}");
}
