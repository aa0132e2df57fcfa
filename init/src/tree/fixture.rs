//! The tree reader's test fixture: a repository laid out as cordon seeds it (`git` builds each
//! commit and index; files 0644 or 0755, directories 0755, links as links, a gitlink as an empty
//! directory, the metadata at `<root>/.git`, HEAD detached), shared by the check's and the
//! inspection's tests.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

pub(super) const GITLINK_OID: &str = "1111111111111111111111111111111111111111";

pub(super) fn scratch(name: &str) -> PathBuf {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!(
        "cordon-tree-{name}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// A repository laid out as cordon seeds it.
pub(super) struct Fixture {
    pub(super) root: PathBuf,
    pub(super) gitlinks: Vec<Vec<u8>>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = Command::new("chmod")
            .args(["-R", "u+rwx"])
            .arg(&self.root)
            .status();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

impl Fixture {
    pub(super) fn new(name: &str) -> Fixture {
        let fixture = Fixture {
            root: scratch(name),
            gitlinks: Vec::new(),
        };
        fixture.git(&["init", "-q"]);
        fixture
    }

    pub(super) fn work(&self) -> &Path {
        &self.root
    }

    pub(super) fn meta(&self) -> PathBuf {
        self.root.join(".git")
    }

    pub(super) fn at(&self, path: impl AsRef<OsStr>) -> PathBuf {
        self.root.join(Path::new(path.as_ref()))
    }

    pub(super) fn git(&self, args: &[&str]) -> String {
        self.git_os(&args.iter().map(OsStr::new).collect::<Vec<_>>())
    }

    pub(super) fn git_os(&self, args: &[&OsStr]) -> String {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(["-c", "init.defaultBranch=main", "-c", "core.autocrlf=false"])
            // No background gc to outlive the fixture.
            .args(["-c", "gc.auto=0", "-c", "maintenance.auto=false"])
            .args(args)
            .current_dir(&self.root)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.root)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .expect("git runs");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    pub(super) fn parent_dirs(&self, path: &Path) {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("parent dirs");
        }
    }

    pub(super) fn file(&self, path: impl AsRef<OsStr>, content: &str) -> &Fixture {
        self.file_mode(path, content, 0o644)
    }

    pub(super) fn executable(&self, path: impl AsRef<OsStr>, content: &str) -> &Fixture {
        self.file_mode(path, content, 0o755)
    }

    pub(super) fn file_mode(&self, path: impl AsRef<OsStr>, content: &str, mode: u32) -> &Fixture {
        let path = self.at(path);
        self.parent_dirs(&path);
        std::fs::write(&path, content).expect("write");
        chmod(&path, mode);
        self
    }

    pub(super) fn link(&self, path: impl AsRef<OsStr>, target: impl AsRef<OsStr>) -> &Fixture {
        let path = self.at(path);
        self.parent_dirs(&path);
        symlink(Path::new(target.as_ref()), &path).expect("symlink");
        self
    }

    pub(super) fn dir(&self, path: impl AsRef<OsStr>) -> &Fixture {
        let path = self.at(path);
        std::fs::create_dir_all(&path).expect("mkdir");
        self
    }

    pub(super) fn rm(&self, path: impl AsRef<OsStr>) -> &Fixture {
        let path = self.at(path);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path).expect("rm -r"),
            _ => std::fs::remove_file(&path).expect("rm"),
        }
        self
    }

    pub(super) fn gitlink(&mut self, path: impl AsRef<OsStr>) -> &mut Fixture {
        self.gitlinks.push(path.as_ref().as_bytes().to_vec());
        self
    }

    /// Commit what is there (and the gitlinks), seed the index as cordon does (`git read-tree`),
    /// detach HEAD, lay each gitlink out as an empty directory; the commit id.
    pub(super) fn seed(&self) -> String {
        self.git(&["add", "-A"]);
        for gitlink in &self.gitlinks {
            let mut info = format!("160000,{GITLINK_OID},").into_bytes();
            info.extend_from_slice(gitlink);
            self.git_os(&[
                OsStr::new("update-index"),
                OsStr::new("--add"),
                OsStr::new("--cacheinfo"),
                OsStr::from_bytes(&info),
            ]);
        }
        self.git(&["commit", "-q", "--allow-empty", "-m", "base"]);
        let commit = self.git(&["rev-parse", "HEAD"]);
        std::fs::remove_file(self.meta().join("index")).expect("rm index");
        self.git(&["read-tree", &commit]);
        std::fs::write(self.meta().join("HEAD"), format!("{commit}\n")).expect("HEAD");
        for gitlink in &self.gitlinks {
            let path = self.at(OsStr::from_bytes(gitlink));
            std::fs::create_dir_all(&path).expect("gitlink dir");
            chmod(&path, 0o755);
        }
        commit
    }
}

pub(super) fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

pub(super) fn mkfifo(path: &Path) {
    let name = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("name");
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o644) }, 0, "mkfifo");
}
