//! What counts as a container engine's socket. The host validator reads host paths (a mount's
//! target or source, a bind): any path naming an engine's socket file. Inside the container the
//! init and the probes look at the engines' socket paths (nothing may exist there) and at the
//! mount table (no socket file mounted in). Each layer checks in its own way; the rule is here.

/// Where a container engine's socket would be if one were mounted.
pub const PATHS: &[&str] = &[
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/var/run/containerd/containerd.sock",
    "/run/containerd/containerd.sock",
    "/var/run/podman/podman.sock",
    "/run/podman/podman.sock",
];

/// The engines' socket file names.
pub const NAMES: &[&str] = &["docker.sock", "containerd.sock", "podman.sock"];

/// How a socket file's name ends.
const SOCKET_SUFFIX: &str = ".sock";

/// Whether a host path (a mount's target or source, a bind's source) names an engine's socket.
pub fn names_engine_socket(path: &str) -> bool {
    NAMES.iter().any(|name| path.ends_with(name))
}

/// Whether a mountpoint inside the container is a socket file mounted in (every one of [`PATHS`]
/// is one).
pub fn is_socket_mountpoint(point: &str) -> bool {
    point.ends_with(SOCKET_SUFFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_engine_socket_path_is_named_by_both_rules() {
        for path in PATHS {
            assert!(names_engine_socket(path), "{path}");
            assert!(is_socket_mountpoint(path), "{path}");
        }
        for name in NAMES {
            assert!(is_socket_mountpoint(name), "{name}");
            assert!(
                PATHS.iter().any(|p| p.ends_with(&format!("/{name}"))),
                "{name}"
            );
        }
        assert!(names_engine_socket("/run/user/1000/podman/podman.sock"));
        assert!(!names_engine_socket("/run/cordon/egress/agent.sock"));
        assert!(is_socket_mountpoint("/run/cordon/egress/agent.sock"));
    }
}
