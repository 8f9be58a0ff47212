//! Kubeconfig validity and the kubeconfig written from the bootstrap one.

use super::*;
use crate::certificate::testutil::TestCa;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

fn kubeconfig_with_files(cert: &Path, key: &Path) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: https://127.0.0.1:6443}}\nusers:\n- name: u\n  user: {{client-certificate: {}, client-key: {}}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
        cert.display(),
        key.display()
    )
}

#[test]
fn kubeconfig_validity_follows_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(!client_config_still_valid(&d.join("missing")));
    let ca = TestCa::new();
    let (cert, key) = ca.issue(
        "system:node:n1",
        &["system:nodes"],
        Duration::from_secs(600),
    );
    let c = write(d, "c.pem", &cert);
    let k = write(d, "k.pem", &key);
    let kc = write(d, "kubelet.conf", &kubeconfig_with_files(&c, &k));
    assert!(client_config_still_valid(&kc));
    // Relative paths are relative to the kubeconfig.
    let rel = write(
        d,
        "rel.conf",
        &kubeconfig_with_files(Path::new("c.pem"), Path::new("k.pem")),
    );
    assert!(client_config_still_valid(&rel));
    // Expired.
    let (old, old_key) = ca.issue_at(
        "system:node:n1",
        &[],
        SystemTime::now() - Duration::from_secs(1000),
        Duration::from_secs(10),
    );
    let oc = write(d, "old.pem", &old);
    let ok = write(d, "old.key", &old_key);
    assert!(!client_config_still_valid(&write(
        d,
        "old.conf",
        &kubeconfig_with_files(&oc, &ok)
    )));
    // Key of another certificate, missing file, token only, garbage: all "bootstrap".
    assert!(!client_config_still_valid(&write(
        d,
        "mixed.conf",
        &kubeconfig_with_files(&c, &ok)
    )));
    assert!(!client_config_still_valid(&write(
        d,
        "gone.conf",
        &kubeconfig_with_files(&d.join("nope"), &k)
    )));
    let token = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: https://127.0.0.1:6443}\nusers:\n- name: u\n  user: {token: abc.def}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n";
    assert!(!client_config_still_valid(&write(d, "token.conf", token)));
    assert!(!client_config_still_valid(&write(d, "junk.conf", "{{{{")));
}

#[tokio::test]
async fn written_kubeconfig_points_at_the_current_pem_with_the_bootstrap_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = TestCa::new();
    write(d, "ca.crt", &ca.ca_pem);
    let bootstrap = write(
        d,
        "bootstrap-kubelet.conf",
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kubernetes\n  cluster: {server: https://10.0.0.1:6443, certificate-authority: ca.crt}\nusers:\n- name: tls-bootstrap-token-user\n  user: {token: abcdef.0123456789abcdef}\ncontexts:\n- name: tls-bootstrap-token-user@kubernetes\n  context: {cluster: kubernetes, user: tls-bootstrap-token-user}\ncurrent-context: tls-bootstrap-token-user@kubernetes\n",
    );
    let out = d.join("etc/kubelet.conf");
    let pem = d.join("pki/kubelet-client-current.pem");
    write_kubeconfig_from_bootstrap(&bootstrap, &out, &pem).unwrap();
    assert_eq!(
        std::fs::metadata(&out).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(!text.contains("abcdef"), "the token is not copied: {text}");
    let kc = Kubeconfig::read_from(&out).unwrap();
    assert_eq!(kc.current_context.as_deref(), Some("default-context"));
    let cluster = current_cluster(&kc).unwrap();
    assert_eq!(cluster.server.as_deref(), Some("https://10.0.0.1:6443"));
    assert_eq!(
        cluster.certificate_authority.as_deref(),
        Some(d.join("ca.crt").to_str().unwrap())
    );
    let user = current_user(&kc).unwrap();
    assert_eq!(user.client_certificate.as_deref(), pem.to_str());
    assert_eq!(user.client_key.as_deref(), pem.to_str());
    let ctx = &kc.contexts[0].context.as_ref().unwrap();
    assert_eq!(ctx.namespace.as_deref(), Some("default"));
    // Not valid until the certificate exists.
    assert!(!client_config_still_valid(&out));
    // A bootstrap kubeconfig without a server is refused by name.
    let bad = write(
        d,
        "bad.conf",
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {}\ncontexts:\n- name: x\n  context: {cluster: c}\ncurrent-context: x\n",
    );
    let err = write_kubeconfig_from_bootstrap(&bad, &out, &pem)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("bad.conf") && err.contains("no server"),
        "{err}"
    );
}

/// kubeadm removes `bootstrap-kubelet.conf` after the join but keeps passing
/// `--bootstrap-kubeconfig`: a valid kubeconfig starts without it; an invalid one names it.
#[tokio::test]
async fn missing_bootstrap_kubeconfig_is_fine_while_the_kubeconfig_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = TestCa::new();
    let (cert, key) = ca.issue(
        "system:node:n1",
        &["system:nodes"],
        Duration::from_secs(600),
    );
    let c = write(d, "c.pem", &cert);
    let k = write(d, "k.pem", &key);
    let kc = write(d, "kubelet.conf", &kubeconfig_with_files(&c, &k));
    let opts = ClientOptions {
        kubeconfig: kc,
        bootstrap_kubeconfig: Some(d.join("bootstrap-kubelet.conf")),
        cert_dir: d.join("pki"),
        node_name: "n1".into(),
        rotate: true,
        settings: ClientSettings::default(),
        timings: Timings::default(),
    };
    let api = api_client(&opts).await.unwrap();
    let current = api.certificates.unwrap().current().unwrap();
    assert_eq!(current.info.common_name, "system:node:n1");

    let invalid = ClientOptions {
        kubeconfig: d.join("missing.conf"),
        ..opts
    };
    let Err(err) = api_client(&invalid).await else {
        panic!("no kubeconfig and no bootstrap kubeconfig must fail");
    };
    assert!(err.to_string().contains("bootstrap-kubelet.conf"), "{err}");
}
