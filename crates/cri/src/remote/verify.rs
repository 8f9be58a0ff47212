//! Response checks upstream's CRI client makes before trusting a status (`verifySandboxStatus`,
//! `verifyContainerStatus`). Receives protocol statuses; emits the first missing field.

use crate::api;

/// Upstream's `verifySandboxStatus`.
pub fn verify_sandbox_status(s: &api::PodSandboxStatus) -> Result<(), String> {
    if s.id.is_empty() {
        return Err("Id is not set".into());
    }
    let Some(m) = &s.metadata else {
        return Err("Metadata is not set".into());
    };
    if m.name.is_empty() || m.namespace.is_empty() || m.uid.is_empty() {
        return Err(format!(
            "Name, Namespace or Uid is not in metadata {:?}",
            (&m.name, &m.namespace, &m.uid)
        ));
    }
    if s.created_at == 0 {
        return Err(format!("CreatedAt is not set for sandbox {}", s.id));
    }
    Ok(())
}

/// Upstream's `verifyContainerStatus`.
pub fn verify_container_status(s: &api::ContainerStatus) -> Result<(), String> {
    if s.id.is_empty() {
        return Err("Id is not set".into());
    }
    let Some(m) = &s.metadata else {
        return Err("Metadata is not set".into());
    };
    if m.name.is_empty() {
        return Err(format!("Name is not in metadata of container {}", s.id));
    }
    if s.created_at == 0 {
        return Err(format!("CreatedAt is not set for container {}", s.id));
    }
    if s.image.as_ref().is_none_or(|i| i.image.is_empty()) {
        return Err(format!("Image is not set for container {}", s.id));
    }
    if s.image_ref.is_empty() {
        return Err(format!("ImageRef is not set for container {}", s.id));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container() -> api::ContainerStatus {
        api::ContainerStatus {
            id: "c1".into(),
            metadata: Some(api::ContainerMetadata {
                name: "app".into(),
                attempt: 0,
            }),
            created_at: 1,
            image: Some(api::ImageSpec {
                image: "busybox".into(),
                ..Default::default()
            }),
            image_ref: "sha256:1".into(),
            ..Default::default()
        }
    }

    #[test]
    fn container_status_needs_id_metadata_times_and_image() {
        assert_eq!(verify_container_status(&container()), Ok(()));
        type Break = fn(&mut api::ContainerStatus);
        let broken: [(Break, &str); 5] = [
            (|s| s.id.clear(), "Id is not set"),
            (|s| s.metadata = None, "Metadata is not set"),
            (|s| s.created_at = 0, "CreatedAt"),
            (|s| s.image = None, "Image is not set"),
            (|s| s.image_ref.clear(), "ImageRef is not set"),
        ];
        for (breakit, want) in broken {
            let mut s = container();
            breakit(&mut s);
            let err = verify_container_status(&s).expect_err(want);
            assert!(err.contains(want), "{err} vs {want}");
        }
    }

    #[test]
    fn sandbox_status_needs_id_full_metadata_and_creation_time() {
        let ok = api::PodSandboxStatus {
            id: "s1".into(),
            metadata: Some(api::PodSandboxMetadata {
                name: "p".into(),
                uid: "u".into(),
                namespace: "n".into(),
                attempt: 0,
            }),
            created_at: 1,
            ..Default::default()
        };
        assert_eq!(verify_sandbox_status(&ok), Ok(()));
        let mut no_uid = ok.clone();
        if let Some(m) = no_uid.metadata.as_mut() {
            m.uid.clear();
        }
        assert!(verify_sandbox_status(&no_uid).is_err());
        let mut no_time = ok;
        no_time.created_at = 0;
        assert!(verify_sandbox_status(&no_time).is_err());
    }
}
