//! hostPath type checks (upstream `volume/hostpath` `checkType`): DirectoryOrCreate and
//! FileOrCreate create what is missing; every other type must already be what it says, with
//! upstream's error messages. Pure file-system inspection.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct HostPathError(pub String);

/// Checks (and for the `*OrCreate` types, creates) `path` for hostPath `type_`.
pub fn check_type(path: &Path, type_: Option<&str>) -> Result<(), HostPathError> {
    let p = path.display();
    let meta = std::fs::metadata(path).ok();
    let fail = |what: &str| {
        Err(HostPathError(format!(
            "hostPath type check failed: {p} is not {what}"
        )))
    };
    match type_.unwrap_or("") {
        "" => Ok(()),
        "DirectoryOrCreate" if meta.is_none() => std::fs::create_dir_all(path)
            .and_then(|()| std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)))
            .map_err(|e| {
                HostPathError(format!(
                    "hostPath type check failed: creating directory {p}: {e}"
                ))
            }),
        "DirectoryOrCreate" | "Directory" => match meta {
            Some(m) if m.is_dir() => Ok(()),
            _ => fail("a directory"),
        },
        "FileOrCreate" if meta.is_none() => {
            if let Some(parent) = path.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(path)
                .and_then(|_| {
                    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
                })
                .map_err(|e| {
                    HostPathError(format!(
                        "hostPath type check failed: creating file {p}: {e}"
                    ))
                })
        }
        "FileOrCreate" | "File" => match meta {
            Some(m) if m.is_file() => Ok(()),
            _ => fail("a file"),
        },
        "Socket" => match meta {
            Some(m) if m.file_type().is_socket() => Ok(()),
            _ => fail("a socket file"),
        },
        "CharDevice" => match meta {
            Some(m) if m.file_type().is_char_device() => Ok(()),
            _ => fail("a character device"),
        },
        "BlockDevice" => match meta {
            Some(m) if m.file_type().is_block_device() => Ok(()),
            _ => fail("a block device"),
        },
        other => Err(HostPathError(format!("{other} is an invalid volume type"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_checks_follow_upstream() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let file = d.join("f");
        std::fs::write(&file, "x").unwrap();
        let new_dir = d.join("new/dir");
        let new_file = d.join("new2/file");
        assert_eq!(check_type(&new_dir, Some("DirectoryOrCreate")), Ok(()));
        assert!(new_dir.is_dir());
        assert_eq!(check_type(&new_file, Some("FileOrCreate")), Ok(()));
        assert!(new_file.is_file());
        assert_eq!(check_type(d, Some("Directory")), Ok(()));
        assert_eq!(check_type(&file, Some("File")), Ok(()));
        assert_eq!(check_type(&file, None), Ok(()));
        assert_eq!(check_type(&d.join("missing"), None), Ok(()));
        let cases = [
            (file.clone(), "Directory", "is not a directory"),
            (file.clone(), "DirectoryOrCreate", "is not a directory"),
            (d.to_path_buf(), "File", "is not a file"),
            (d.join("missing"), "File", "is not a file"),
            (file.clone(), "Socket", "is not a socket file"),
            (file.clone(), "CharDevice", "is not a character device"),
            (file.clone(), "BlockDevice", "is not a block device"),
        ];
        for (path, t, want) in cases {
            let err = check_type(&path, Some(t)).unwrap_err().0;
            assert_eq!(
                err,
                format!("hostPath type check failed: {} {want}", path.display()),
                "{t}"
            );
        }
        assert_eq!(
            check_type(Path::new("/dev/null"), Some("CharDevice")),
            Ok(())
        );
        assert_eq!(
            check_type(d, Some("Weird")).unwrap_err().0,
            "Weird is an invalid volume type"
        );
    }
}
