//! The Docker engine connection: bollard over the local unix socket, every request pinned to the
//! API version the daemon reports, every call bounded by a deadline.
//!
//! bollard 0.21.1 formats request paths without the version prefix (its URL join drops it), so the
//! daemon would answer at whatever its newest API is. A request modifier puts `/vX.Y` back on every
//! request, so what we send is exactly the version the daemon said it speaks.
//!
//! [`objects`] alone creates, inspects, lists and removes what cordon makes, through the
//! [`calls::Calls`] seam (bollard in production, a recording fake in unit tests); [`pending`] is
//! the record of what one operation made or may have made, and its removal.

pub mod calls;
#[cfg(test)]
pub mod fake;
#[cfg(test)]
mod fake_tests;
pub mod objects;
pub mod pending;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bollard::{ClientVersion, Docker};

use calls::{Bollard, Calls, Faults, Faulty};

use crate::error::{Error, Result};

/// The oldest engine API cordon supports (Docker 20.10).
pub const MIN_API: ApiVersion = ApiVersion {
    major: 1,
    minor: 41,
};
/// The API that brought `VolumeOptions.Subpath` (Docker 26).
pub const SUBPATH_API: ApiVersion = ApiVersion {
    major: 1,
    minor: 45,
};
/// Default bound on one engine call.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// An engine API version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApiVersion {
    pub major: u32,
    pub minor: u32,
}

impl ApiVersion {
    /// Parse `1.41`.
    pub fn parse(text: &str) -> Option<ApiVersion> {
        let (major, minor) = text.trim().split_once('.')?;
        Some(ApiVersion {
            major: major.parse().ok()?,
            minor: minor.parse().ok()?,
        })
    }
}

impl std::fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// What the engine says about itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct EngineInfo {
    pub socket: String,
    pub version: String,
    pub api: String,
    pub min_api: String,
    pub storage_driver: String,
    pub cgroup_version: String,
    pub cgroup_driver: String,
    pub kernel: String,
    pub operating_system: String,
    pub security_options: Vec<String>,
    pub default_runtime: String,
}

/// A connected, version-pinned engine: the object calls through the [`Calls`] seam, the streams
/// and images through the pinned bollard client.
#[derive(Debug, Clone)]
pub struct Engine {
    docker: Docker,
    calls: Arc<dyn Calls>,
    faults: Arc<Faults>,
    api: ApiVersion,
    info: EngineInfo,
}

/// The unix socket to use: `DOCKER_HOST=unix://...` or the default. Anything else is refused:
/// cordon's storage and bind checks assume the daemon runs on this machine.
pub fn socket_path() -> Result<String> {
    match std::env::var("DOCKER_HOST") {
        Ok(host) if !host.is_empty() => {
            host.strip_prefix("unix://")
                .map(str::to_owned)
                .ok_or_else(|| Error::Unreachable {
                    socket: host.clone(),
                    reason: "cordon only talks to a local engine over a unix socket".into(),
                })
        }
        _ => Ok("/var/run/docker.sock".to_owned()),
    }
}

/// Rewrite a request path to carry `/vX.Y`.
pub fn pin_path(path_and_query: &str, api: ApiVersion) -> String {
    let versioned = path_and_query
        .strip_prefix("/v")
        .and_then(|rest| rest.split('/').next())
        .is_some_and(|v| ApiVersion::parse(v).is_some());
    if versioned {
        path_and_query.to_owned()
    } else {
        format!("/v{api}{path_and_query}")
    }
}

fn pinned(docker: Docker, api: ApiVersion) -> Docker {
    docker.with_request_modifier(move |mut request| {
        let uri = request.uri().clone();
        let mut parts = uri.into_parts();
        if let Some(pq) = &parts.path_and_query {
            if let Ok(new) = pin_path(pq.as_str(), api).parse() {
                parts.path_and_query = Some(new);
            }
        }
        if let Ok(uri) = http::Uri::from_parts(parts) {
            *request.uri_mut() = uri;
        }
        request
    })
}

fn connect_raw(socket: &str, api: ApiVersion) -> Result<Docker> {
    let version = ClientVersion {
        major_version: api.major as usize,
        minor_version: api.minor as usize,
    };
    Docker::connect_with_unix(socket, CALL_TIMEOUT.as_secs(), &version)
        .map(|d| pinned(d, api))
        .map_err(|e| Error::Unreachable {
            socket: socket.to_owned(),
            reason: e.to_string(),
        })
}

/// Await an engine call with a deadline, naming what it was.
pub async fn bounded<T, F>(context: &str, after: Duration, call: F) -> Result<T>
where
    F: Future<Output = std::result::Result<T, bollard::errors::Error>>,
{
    match tokio::time::timeout(after, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(source)) => Err(Error::Docker {
            context: context.to_owned(),
            source,
        }),
        Err(_) => Err(Error::Timeout {
            context: context.to_owned(),
            after,
        }),
    }
}

impl Engine {
    /// Connect, learn the daemon's API version, refuse one older than [`MIN_API`], and pin every
    /// later request to it.
    pub async fn connect() -> Result<Engine> {
        let socket = socket_path()?;
        Engine::connect_at(&socket, None).await
    }

    /// Connect to `socket`; `force_api` pins a version other than the daemon's (tests use it to
    /// prove the pin reaches the wire).
    pub async fn connect_at(socket: &str, force_api: Option<ApiVersion>) -> Result<Engine> {
        // The version endpoint answers at any version; ask it at the minimum.
        let probe = connect_raw(socket, MIN_API)?;
        let version = bounded("version", CALL_TIMEOUT, probe.version())
            .await
            .map_err(|e| Error::Unreachable {
                socket: socket.to_owned(),
                reason: e.to_string(),
            })?;
        let api_text = version.api_version.clone().unwrap_or_default();
        let api = ApiVersion::parse(&api_text).ok_or_else(|| Error::EngineTooOld {
            found: format!("{api_text:?} (unparseable)"),
            minimum: MIN_API.to_string(),
        })?;
        if api < MIN_API {
            return Err(Error::EngineTooOld {
                found: api.to_string(),
                minimum: MIN_API.to_string(),
            });
        }
        let pin = force_api.unwrap_or(api);
        let docker = connect_raw(socket, pin)?;
        let info = bounded("info", CALL_TIMEOUT, docker.info()).await?;
        let info = EngineInfo {
            socket: socket.to_owned(),
            version: version.version.unwrap_or_default(),
            api: api.to_string(),
            min_api: version.min_api_version.unwrap_or_default(),
            storage_driver: info.driver.unwrap_or_default(),
            cgroup_version: info
                .cgroup_version
                .map(|v| v.to_string())
                .unwrap_or_default(),
            cgroup_driver: info
                .cgroup_driver
                .map(|v| v.to_string())
                .unwrap_or_default(),
            kernel: info.kernel_version.unwrap_or_default(),
            operating_system: info.operating_system.unwrap_or_default(),
            security_options: info.security_options.unwrap_or_default(),
            default_runtime: info.default_runtime.unwrap_or_default(),
        };
        Ok(Engine::over(
            docker.clone(),
            Arc::new(Bollard(docker)),
            pin,
            info,
        ))
    }

    /// An engine whose object calls go to `calls`, removal faults layered over them.
    fn over(docker: Docker, calls: Arc<dyn Calls>, api: ApiVersion, info: EngineInfo) -> Engine {
        let faults = Arc::<Faults>::default();
        Engine {
            docker,
            calls: Arc::new(Faulty {
                inner: calls,
                faults: faults.clone(),
            }),
            faults,
            api,
            info,
        }
    }

    /// Make the next `count` removals of this engine (and its clones) fail with an engine
    /// refusal; 0 stops it. Tests use this to prove what cleanup does when removal fails.
    pub fn inject_removal_failures(&self, count: usize) {
        self.faults.fail_removals(count);
    }

    /// An engine whose object calls go to `calls` (a recording fake); its bollard client is never
    /// used (bollard only checks that the socket path exists).
    #[cfg(test)]
    pub(crate) fn faked(calls: Arc<dyn Calls>) -> Engine {
        let docker =
            connect_raw("/dev/null", MIN_API).expect("a unix client is made without connecting");
        Engine::over(docker, calls, MIN_API, EngineInfo::default())
    }

    /// An engine over an empty fake (unit tests of state that needs no engine call).
    #[cfg(test)]
    pub(crate) fn offline_for_tests() -> Engine {
        Engine::faked(Arc::new(fake::Recording::default()))
    }

    /// The object calls (containers, volumes, networks).
    pub fn calls(&self) -> &dyn Calls {
        self.calls.as_ref()
    }

    /// The bollard client (pinned).
    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// The API version every request carries.
    pub fn api(&self) -> ApiVersion {
        self.api
    }

    /// What the engine reported at connect time.
    pub fn info(&self) -> &EngineInfo {
        &self.info
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_get_the_pinned_version() {
        let api = ApiVersion {
            major: 1,
            minor: 41,
        };
        assert_eq!(
            pin_path("/containers/json?all=1", api),
            "/v1.41/containers/json?all=1"
        );
        assert_eq!(pin_path("/v1.41/info", api), "/v1.41/info");
        assert_eq!(pin_path("/version", api), "/v1.41/version");
        assert_eq!(pin_path("/volumes/v1", api), "/v1.41/volumes/v1");
    }

    #[test]
    fn versions_order() {
        assert!(ApiVersion::parse("1.41").unwrap() < SUBPATH_API);
        assert!(ApiVersion::parse("1.9").unwrap() < MIN_API);
        assert_eq!(ApiVersion::parse("x"), None);
    }
}
