//! The kubelet-managed `/etc/hosts` of a pod (upstream `managedHostsFileContent` /
//! `nodeHostsFileContent`): loopback entries, the pod's IPs with its hostname (and FQDN), then
//! the `hostAliases` section; hostNetwork pods get the node's file plus their aliases. Pure.

use k8s_openapi::api::core::v1::HostAlias;

const HEADER: &str = "# Kubernetes-managed hosts file.\n";
const ALIASES_HEADER: &str = "\n# Entries added by HostAliases.\n";

/// Content for a pod with its own network namespace.
pub fn managed_content(
    pod_ips: &[String],
    hostname: &str,
    domain: &str,
    aliases: &[HostAlias],
) -> String {
    let mut s = String::from(HEADER);
    s.push_str("127.0.0.1\tlocalhost\n");
    s.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
    s.push_str("fe00::0\tip6-localnet\n");
    s.push_str("fe00::0\tip6-mcastprefix\n");
    s.push_str("fe00::1\tip6-allnodes\n");
    s.push_str("fe00::2\tip6-allrouters\n");
    for ip in pod_ips {
        if domain.is_empty() {
            s.push_str(&format!("{ip}\t{hostname}\n"));
        } else {
            s.push_str(&format!("{ip}\t{hostname}.{domain}\t{hostname}\n"));
        }
    }
    s.push_str(&aliases_section(aliases));
    s
}

/// Content for a hostNetwork pod: the node's hosts file plus the aliases.
pub fn node_content(node_hosts: &str, aliases: &[HostAlias]) -> String {
    let mut s = String::from(HEADER);
    s.push_str(node_hosts);
    if !node_hosts.is_empty() && !node_hosts.ends_with('\n') {
        s.push('\n');
    }
    s.push_str(&aliases_section(aliases));
    s
}

fn aliases_section(aliases: &[HostAlias]) -> String {
    if aliases.is_empty() {
        return String::new();
    }
    let mut s = String::from(ALIASES_HEADER);
    for a in aliases {
        let names = a.hostnames.clone().unwrap_or_default();
        s.push_str(&format!("{}\t{}\n", a.ip, names.join("\t")));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn managed_file_matches_upstream_layout() {
        let aliases = vec![HostAlias {
            ip: "10.1.2.3".into(),
            hostnames: Some(vec!["foo.local".into(), "bar.local".into()]),
        }];
        let got = managed_content(
            &["10.88.0.5".into()],
            "web",
            "sub.ns.svc.cluster.local",
            &aliases,
        );
        assert_eq!(
            got,
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n10.88.0.5\tweb.sub.ns.svc.cluster.local\tweb\n\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar.local\n"
        );
        let plain = managed_content(&["10.88.0.5".into()], "web", "", &[]);
        assert!(plain.ends_with("fe00::2\tip6-allrouters\n10.88.0.5\tweb\n"));
        let host = node_content("127.0.0.1 localhost", &aliases);
        assert!(host.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1 localhost\n\n# Entries added by HostAliases.\n"));
    }
}
