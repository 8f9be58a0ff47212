//! The certificate/key pair store in `--cert-dir` (client-go `certificate.NewFileStore`), in
//! upstream's layout so a node can move between the Go kubelet and rkubelet: each pair is one
//! file `<prefix>-<YYYY-MM-DD-HH-MM-SS>.pem` (certificates, then the key; mode 0600) and
//! `<prefix>-current.pem` is a symlink to the pair in use, replaced atomically through
//! `<prefix>-updated.pem`. Receives new pairs; emits the current one, looked up as upstream:
//! the symlink, then the configured cert/key files, then `<prefix>.crt`/`<prefix>.key`.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};

use super::{CertError, CertKey};

/// A pair store for one prefix (`kubelet-client`, `kubelet-server`).
#[derive(Debug, Clone)]
pub struct FileStore {
    prefix: String,
    dir: PathBuf,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
}

impl FileStore {
    /// A store for `prefix` in `dir`, with `cert_file`/`key_file` as the pair to fall back to
    /// before the store holds one. Finishes an interrupted symlink swap (an `-updated` link
    /// without a `-current` one) as upstream does.
    pub fn new(
        prefix: &str,
        dir: &Path,
        cert_file: Option<PathBuf>,
        key_file: Option<PathBuf>,
    ) -> Result<Self, CertError> {
        let store = Self {
            prefix: prefix.to_owned(),
            dir: dir.to_owned(),
            cert_file,
            key_file,
        };
        store.recover()?;
        Ok(store)
    }

    /// `<dir>/<prefix>-current.pem`, the path kubeconfigs point at.
    pub fn current_path(&self) -> PathBuf {
        self.dir.join(self.file_name("current"))
    }

    fn updated_path(&self) -> PathBuf {
        self.dir.join(self.file_name("updated"))
    }

    fn file_name(&self, qualifier: &str) -> String {
        format!("{}-{qualifier}.pem", self.prefix)
    }

    fn recover(&self) -> Result<(), CertError> {
        let current = self.current_path();
        if current.exists() {
            return Ok(());
        }
        let updated = self.updated_path();
        match std::fs::symlink_metadata(&updated) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(CertError::io(&updated, e)),
            Ok(m) if !m.file_type().is_symlink() => Err(CertError::invalid(
                updated.display().to_string(),
                "expected a symlink but it is a file",
            )),
            Ok(_) => std::fs::rename(&updated, &current).map_err(|e| CertError::io(&current, e)),
        }
    }

    /// The current pair (`Ok(None)` when the store has none yet). A pair that exists but does
    /// not load is an error naming the file.
    pub fn current(&self) -> Result<Option<CertKey>, CertError> {
        let current = self.current_path();
        if current.exists() {
            let text = read(&current)?;
            return CertKey::from_pem(&current.display().to_string(), &text, &text).map(Some);
        }
        if let (Some(c), Some(k)) = (&self.cert_file, &self.key_file)
            && c.exists()
            && k.exists()
        {
            return load_pair(c, k).map(Some);
        }
        let c = self.dir.join(format!("{}.crt", self.prefix));
        let k = self.dir.join(format!("{}.key", self.prefix));
        if c.exists() && k.exists() {
            return load_pair(&c, &k).map(Some);
        }
        Ok(None)
    }

    /// Writes `pair` as `<prefix>-<time>.pem` (0600) and points `-current.pem` at it. `now`
    /// names the file, in local time as upstream.
    pub fn update(&self, pair: &CertKey, now: DateTime<Utc>) -> Result<PathBuf, CertError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| CertError::io(&self.dir, e))?;
        let stamp = now
            .with_timezone(&chrono::Local)
            .format("%Y-%m-%d-%H-%M-%S")
            .to_string();
        let path = self.dir.join(self.file_name(&stamp));
        write_private(&path, pair.combined_pem().as_bytes())?;
        // What was written must load back before it becomes current.
        let text = read(&path)?;
        CertKey::from_pem(&path.display().to_string(), &text, &text)?;
        self.update_symlink(&path)?;
        Ok(path)
    }

    fn update_symlink(&self, target: &Path) -> Result<(), CertError> {
        let current = self.current_path();
        if let Ok(m) = std::fs::symlink_metadata(&current)
            && !m.file_type().is_symlink()
        {
            return Err(CertError::invalid(
                current.display().to_string(),
                "expected a symlink but it is a file",
            ));
        }
        let updated = self.updated_path();
        match std::fs::symlink_metadata(&updated) {
            Ok(m) if !m.file_type().is_symlink() => {
                return Err(CertError::invalid(
                    updated.display().to_string(),
                    "expected a symlink but it is a file",
                ));
            }
            Ok(_) => std::fs::remove_file(&updated).map_err(|e| CertError::io(&updated, e))?,
            Err(_) => {}
        }
        let absolute = if target.is_absolute() {
            target.to_owned()
        } else {
            std::env::current_dir()
                .map_err(|e| CertError::io(target, e))?
                .join(target)
        };
        std::os::unix::fs::symlink(&absolute, &updated).map_err(|e| CertError::io(&updated, e))?;
        // rename(2) replaces the old link in one step: readers see the old or the new pair.
        std::fs::rename(&updated, &current).map_err(|e| CertError::io(&current, e))
    }
}

fn read(path: &Path) -> Result<String, CertError> {
    std::fs::read_to_string(path).map_err(|e| CertError::io(path, e))
}

fn load_pair(cert: &Path, key: &Path) -> Result<CertKey, CertError> {
    let what = format!("{} / {}", cert.display(), key.display());
    CertKey::from_pem(&what, &read(cert)?, &read(key)?)
}

/// Replaces `path` with `data`, mode 0600, atomically and flushed to disk
/// ([`crate::nofollow::atomic_write`]): a crash or a full disk leaves the old file whole.
pub fn write_private(path: &Path, data: &[u8]) -> Result<(), CertError> {
    crate::nofollow::atomic_write(path, data, crate::nofollow::WriteOptions::durable(0o600))
        .map_err(|e| CertError::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificate::testutil::TestCa;
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;

    fn pair(ca: &TestCa, cn: &str) -> CertKey {
        let (c, k) = ca.issue(cn, &["system:nodes"], Duration::from_secs(3600));
        CertKey::from_pem("t", &c, &k).unwrap()
    }

    #[test]
    fn update_writes_a_private_timestamped_file_and_swaps_the_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let pki = dir.path().join("pki");
        let store = FileStore::new("kubelet-client", &pki, None, None).unwrap();
        assert!(store.current().unwrap().is_none());
        let ca = TestCa::new();
        let t1: DateTime<Utc> = "2026-11-26T08:00:00Z".parse().unwrap();
        let first = store.update(&pair(&ca, "system:node:a"), t1).unwrap();
        let name = first.file_name().unwrap().to_str().unwrap().to_owned();
        assert!(
            name.starts_with("kubelet-client-2026-11-26-") && name.ends_with(".pem"),
            "{name}"
        );
        assert_eq!(
            std::fs::metadata(&first).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let link = pki.join("kubelet-client-current.pem");
        assert_eq!(std::fs::read_link(&link).unwrap(), first);
        assert_eq!(
            store.current().unwrap().unwrap().info.common_name,
            "system:node:a"
        );
        let second = store
            .update(
                &pair(&ca, "system:node:b"),
                t1 + chrono::Duration::seconds(30),
            )
            .unwrap();
        assert_ne!(first, second);
        assert_eq!(std::fs::read_link(&link).unwrap(), second);
        assert!(first.exists(), "old pairs stay, as upstream");
        assert_eq!(
            store.current().unwrap().unwrap().info.common_name,
            "system:node:b"
        );
        assert!(!pki.join("kubelet-client-updated.pem").exists());
        // The file is certificates then key, as the Go kubelet writes it.
        let text = std::fs::read_to_string(&second).unwrap();
        let cert_at = text.find("BEGIN CERTIFICATE").unwrap();
        let key_at = text.find("PRIVATE KEY-----").unwrap();
        assert!(cert_at < key_at);
    }

    #[test]
    fn current_falls_back_to_configured_files_then_prefix_files() {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new();
        let p = pair(&ca, "from-files");
        let (c, k) = (dir.path().join("c.crt"), dir.path().join("c.key"));
        std::fs::write(&c, &p.cert_pem).unwrap();
        std::fs::write(&k, &p.key_pem).unwrap();
        let store = FileStore::new(
            "kubelet-server",
            dir.path(),
            Some(c.clone()),
            Some(k.clone()),
        )
        .unwrap();
        assert_eq!(
            store.current().unwrap().unwrap().info.common_name,
            "from-files"
        );
        let q = pair(&ca, "prefix-files");
        std::fs::write(dir.path().join("kubelet-server.crt"), &q.cert_pem).unwrap();
        std::fs::write(dir.path().join("kubelet-server.key"), &q.key_pem).unwrap();
        let store = FileStore::new("kubelet-server", dir.path(), None, None).unwrap();
        assert_eq!(
            store.current().unwrap().unwrap().info.common_name,
            "prefix-files"
        );
    }

    #[test]
    fn interrupted_swap_is_recovered_and_a_regular_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new();
        let target = dir.path().join("kubelet-client-2026.pem");
        std::fs::write(&target, pair(&ca, "x").combined_pem()).unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join("kubelet-client-updated.pem")).unwrap();
        let store = FileStore::new("kubelet-client", dir.path(), None, None).unwrap();
        assert_eq!(store.current().unwrap().unwrap().info.common_name, "x");
        assert!(!dir.path().join("kubelet-client-updated.pem").exists());

        // Hostile: the current path is a regular file, not a link; the store will not
        // overwrite it.
        let other = tempfile::tempdir().unwrap();
        std::fs::write(other.path().join("kubelet-client-current.pem"), "x").unwrap();
        let store = FileStore::new("kubelet-client", other.path(), None, None).unwrap();
        let err = store
            .update(&pair(&ca, "y"), Utc::now())
            .unwrap_err()
            .to_string();
        assert!(err.contains("expected a symlink but it is a file"), "{err}");
        // A corrupt current pair names the file.
        std::fs::remove_file(other.path().join("kubelet-client-current.pem")).unwrap();
        let junk = other.path().join("junk.pem");
        std::fs::write(&junk, "-----BEGIN CERTIFICATE-----\nAAAA\n").unwrap();
        std::os::unix::fs::symlink(&junk, other.path().join("kubelet-client-current.pem")).unwrap();
        let err = store.current().unwrap_err().to_string();
        assert!(err.contains("kubelet-client-current.pem"), "{err}");
    }

    #[test]
    fn write_private_replaces_whole_files_and_never_writes_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubelet.conf");
        std::fs::write(&kubeconfig, "old: config\n").unwrap();
        std::fs::set_permissions(&kubeconfig, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&kubeconfig, b"new: config\n").unwrap();
        assert_eq!(std::fs::read(&kubeconfig).unwrap(), b"new: config\n");
        assert_eq!(
            std::fs::metadata(&kubeconfig).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // A link in the file's place (or at the temporary name) is replaced, not followed.
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        std::fs::remove_file(&kubeconfig).unwrap();
        std::os::unix::fs::symlink(&victim, &kubeconfig).unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join(".kubelet.conf.tmp")).unwrap();
        write_private(&kubeconfig, b"newer\n").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(std::fs::symlink_metadata(&kubeconfig).unwrap().is_file());
        // A full disk keeps the old file and names it.
        let fs = crate::nofollow::testutil::Tmpfs::new("128k");
        let pem = fs.path().join("kubelet-client-current.pem");
        write_private(&pem, b"old pair").unwrap();
        fs.fill();
        let err = write_private(&pem, &vec![b'x'; 32 * 1024])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("kubelet-client-current.pem") && err.contains("No space left"),
            "{err}"
        );
        assert_eq!(std::fs::read(&pem).unwrap(), b"old pair");
    }
}
