//! security::capabilities: normalises the capability names of a container's
//! `securityContext.capabilities` before they reach CRI. Upstream passes the names through and
//! containerd prefixes every name with `CAP_`, so `CAP_NET_RAW` would become `CAP_CAP_NET_RAW`
//! (silently ignored on drop, a runc error on add); we accept both spellings. Receives the API
//! capabilities; emits the CRI `Capability`. Pure.

use k8s_cri::v1::Capability;
use k8s_openapi::api::core::v1::Capabilities;

/// `net_raw`, `CAP_NET_RAW`, `cap_net_raw` → `NET_RAW`; `all` → `ALL`.
pub fn normalize(name: &str) -> String {
    let upper = name.trim().to_ascii_uppercase();
    match upper.strip_prefix("CAP_") {
        Some(rest) if !rest.is_empty() => rest.to_owned(),
        _ => upper,
    }
}

/// The CRI capability lists for the API ones (upstream `convertToRuntimeCapabilities`).
pub fn to_runtime(caps: &Capabilities) -> Capability {
    let list = |names: &Option<Vec<String>>| -> Vec<String> {
        names.iter().flatten().map(|n| normalize(n)).collect()
    };
    Capability {
        add_capabilities: list(&caps.add),
        drop_capabilities: list(&caps.drop),
        add_ambient_capabilities: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_or_without_prefix() {
        #[rustfmt::skip]
        let cases = [
            ("NET_RAW", "NET_RAW"), ("CAP_NET_RAW", "NET_RAW"), ("cap_net_raw", "NET_RAW"),
            ("net_admin", "NET_ADMIN"), ("ALL", "ALL"), ("all", "ALL"), (" SYS_TIME ", "SYS_TIME"),
            ("CAP_", "CAP_"),
        ];
        for (input, want) in cases {
            assert_eq!(normalize(input), want, "{input:?}");
        }
    }

    #[test]
    fn runtime_lists_keep_order() {
        let caps = Capabilities {
            add: Some(vec!["CAP_NET_ADMIN".to_owned(), "sys_time".to_owned()]),
            drop: Some(vec!["all".to_owned()]),
        };
        assert_eq!(
            to_runtime(&caps),
            Capability {
                add_capabilities: vec!["NET_ADMIN".to_owned(), "SYS_TIME".to_owned()],
                drop_capabilities: vec!["ALL".to_owned()],
                add_ambient_capabilities: vec![],
            }
        );
        assert_eq!(to_runtime(&Capabilities::default()), Capability::default());
    }
}
