//! Test fixtures of file-system behaviour, for this crate's tests and (feature `test-util`)
//! other crates': a size-limited tmpfs that can be filled to ENOSPC and freed again.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// A tmpfs of `size` mounted on a fresh temporary directory for the test's lifetime (the
/// kubelet's unit tests run as root; a mount that fails fails the test).
pub struct Tmpfs {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    pub fn new(size: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mnt");
        std::fs::create_dir(&path).unwrap();
        let data = std::ffi::CString::new(format!("size={size},mode=0755")).unwrap();
        rustix::mount::mount(
            "tmpfs",
            &path,
            "tmpfs",
            rustix::mount::MountFlags::empty(),
            data.as_c_str(),
        )
        .unwrap_or_else(|e| panic!("mounting a tmpfs on {} (needs root): {e}", path.display()));
        Self { path, _dir: dir }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Fills the file system with a file `fill` until the next write fails with ENOSPC.
    pub fn fill(&self) {
        let mut f = std::fs::File::create(self.path.join("fill")).unwrap();
        let block = vec![0xa5u8; 4096];
        loop {
            match f.write(&block) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("filling {}: {e}", self.path.display()),
            }
        }
    }

    pub fn free(&self) {
        std::fs::remove_file(self.path.join("fill")).unwrap();
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = rustix::mount::unmount(&self.path, rustix::mount::UnmountFlags::DETACH);
    }
}
