//! The certificates API through the real kubectl: `get csr` (server-side table),
//! `certificate approve|deny` (typed client, `approval` subresource), a bootstrap-token
//! kubeconfig (what it may and may not do) and `auth whoami` with an issued certificate.

use crate::common;

use base64::Engine as _;
use common::{kubectl, kubectl_with, ok, ok_stdin, start};
use fake_apiserver::{BootstrapToken, KubeconfigAuth, Options};
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::process::Command;

fn client_csr(name: &str, node: &str) -> (String, String) {
    let key = KeyPair::generate().expect("key");
    let mut p = CertificateParams::new(Vec::<String>::new()).expect("params");
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name
        .push(DnType::CommonName, format!("system:node:{node}"));
    p.distinguished_name
        .push(DnType::OrganizationName, "system:nodes");
    let pem = p.serialize_request(&key).expect("csr").pem().expect("pem");
    let obj = json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(pem),
            "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
            "usages": ["digital signature", "client auth"],
            "expirationSeconds": 86400,
        },
    });
    (obj.to_string(), key.serialize_pem())
}

fn cert_of(csr: &Value) -> Option<String> {
    let b = csr["status"]["certificate"].as_str()?;
    String::from_utf8(base64::engine::general_purpose::STANDARD.decode(b).ok()?).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_approve_and_deny_csrs() {
    let (s, _dir) = start(Options::default()).await;
    let (c1, key1) = client_csr("csr-one", "n1");
    ok_stdin(&s, &c1, &["create", "-f", "-"]).await;
    let (c2, _) = client_csr("csr-two", "n2");
    ok_stdin(&s, &c2, &["create", "-f", "-"]).await;

    let table = ok(&s, &["get", "csr"]).await.stdout;
    let header = table.lines().next().unwrap_or_default();
    for col in [
        "NAME",
        "AGE",
        "SIGNERNAME",
        "REQUESTOR",
        "REQUESTEDDURATION",
        "CONDITION",
    ] {
        assert!(header.contains(col), "{table}");
    }
    let row = table
        .lines()
        .find(|l| l.starts_with("csr-one"))
        .unwrap_or_else(|| panic!("{table}"));
    for cell in [
        "kubernetes.io/kube-apiserver-client-kubelet",
        "admin",
        "24h",
        "Pending",
    ] {
        assert!(row.contains(cell), "{row}");
    }

    let out = ok(&s, &["certificate", "approve", "csr-one"]).await;
    assert!(
        out.stdout
            .contains("certificatesigningrequest.certificates.k8s.io/csr-one approved"),
        "{}",
        out.stdout
    );
    let issued = s
        .wait_for(Duration::from_secs(10), |s| {
            s.csr("csr-one").filter(|c| cert_of(c).is_some())
        })
        .await
        .expect("issued after kubectl certificate approve");
    let approved = &issued["status"]["conditions"][0];
    assert_eq!(approved["reason"], "KubectlApprove");
    assert_eq!(
        approved["message"],
        "This CSR was approved by kubectl certificate approve."
    );
    let row = ok(&s, &["get", "csr", "csr-one"]).await.stdout;
    assert!(row.contains("Approved,Issued"), "{row}");
    // Approving again is a no-op.
    ok(&s, &["certificate", "approve", "csr-one"]).await;
    assert_eq!(
        s.csr("csr-one").expect("csr")["status"]["conditions"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );

    let out = ok(&s, &["certificate", "deny", "csr-two"]).await;
    assert!(out.stdout.contains("csr-two denied"), "{}", out.stdout);
    let row = ok(&s, &["get", "csr", "csr-two"]).await.stdout;
    assert!(row.contains("Denied"), "{row}");
    let refused = kubectl(&s, &["certificate", "approve", "csr-two"]).await;
    assert!(!refused.ok);
    assert!(
        refused.stderr.contains("is already Denied"),
        "{}",
        refused.stderr
    );

    // Metadata patches (kubectl label: strategic merge) and delete work on the main resource.
    ok(&s, &["label", "csr", "csr-two", "team=nodes"]).await;
    let two = s.csr("csr-two").expect("csr-two");
    assert_eq!(two["metadata"]["labels"]["team"], "nodes");
    assert_eq!(two["status"]["conditions"][0]["type"], "Denied");
    let out = ok(&s, &["delete", "csr", "csr-two"]).await;
    assert!(out.stdout.contains("deleted"), "{}", out.stdout);
    assert!(s.csr("csr-two").is_none());

    // The issued certificate is a working kubeconfig credential.
    let cert = cert_of(&issued).expect("cert");
    let kc = fake_apiserver::tls::kubeconfig(
        &s.url,
        s.ca_pem.as_deref(),
        KubeconfigAuth::ClientCert,
        Some((&cert, &key1)),
        "",
    );
    let path = s.kubeconfig_path.with_file_name("node.kubeconfig");
    std::fs::write(&path, kc).expect("write kubeconfig");
    let who = kubectl_with(&s, &path, None, &["auth", "whoami", "-o", "json"]).await;
    assert!(who.ok, "{}", who.stderr);
    let who = who.json();
    assert_eq!(who["status"]["userInfo"]["username"], "system:node:n1");
    assert_eq!(
        who["status"]["userInfo"]["groups"],
        json!(["system:nodes", "system:authenticated"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_with_a_bootstrap_token_kubeconfig() {
    let (s, dir) = start(Options {
        csr_auto_approve: true,
        ..Options::default()
    })
    .await;
    let token = BootstrapToken::new("07401b", "f395accd246ae52d");
    s.create_bootstrap_token(&token).expect("token secret");
    let boot = dir.path().join("bootstrap-kubelet.conf");
    s.write_bootstrap_kubeconfig(&boot, &token.token())
        .expect("bootstrap kubeconfig");

    let (c, _) = client_csr("node-csr-abc", "worker-1");
    let created = kubectl_with(&s, &boot, Some(&c), &["create", "-f", "-", "-o", "json"]).await;
    assert!(created.ok, "{}", created.stderr);
    assert_eq!(
        created.json()["spec"]["username"],
        "system:bootstrap:07401b"
    );
    let listed = kubectl_with(&s, &boot, None, &["get", "csr"]).await;
    assert!(listed.ok, "{}", listed.stderr);
    assert!(
        listed.stdout.contains("system:bootstrap:07401b"),
        "{}",
        listed.stdout
    );
    s.wait_for(Duration::from_secs(10), |s| {
        s.csr("node-csr-abc").filter(|c| cert_of(c).is_some())
    })
    .await
    .expect("auto-approved and issued");
    let row = ok(&s, &["get", "csr", "node-csr-abc"]).await.stdout;
    assert!(row.contains("Approved,Issued"), "{row}");

    let (c2, _) = client_csr("node-csr-def", "worker-1");
    s.set_csr_auto_approve(false);
    assert!(
        kubectl_with(&s, &boot, Some(&c2), &["create", "-f", "-"])
            .await
            .ok
    );
    for args in [
        &["certificate", "approve", "node-csr-def"][..],
        &["delete", "csr", "node-csr-def"],
        &["get", "secrets", "-n", "kube-system"],
        &["get", "nodes"],
    ] {
        let out = kubectl_with(&s, &boot, None, args).await;
        assert!(!out.ok, "{args:?} must be forbidden: {}", out.stdout);
        assert!(
            out.stderr.contains("Forbidden") || out.stderr.contains("forbidden"),
            "{args:?}: {}",
            out.stderr
        );
    }
    let pending = s.csr("node-csr-def").expect("csr");
    assert!(pending["status"]["conditions"].is_null(), "{pending}");
    let bad = dir.path().join("bad.conf");
    s.write_bootstrap_kubeconfig(&bad, "07401b.0000000000000000")
        .expect("write");
    let out = kubectl_with(&s, &bad, None, &["get", "csr"]).await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains("Unauthorized") || out.stderr.contains("provide credentials"),
        "{}",
        out.stderr
    );
}

/// The binary's certificate flags: a bootstrap token Secret and kubeconfig, the auto-approver
/// and the signing duration, checked with kubectl alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_bootstraps_a_node_client_certificate_with_its_flags() {
    assert!(Path::new(common::KUBECTL).exists(), "kubectl is required");
    let dir = tempfile::tempdir().expect("tempdir");
    let kc = dir.path().join("admin.conf");
    let boot = dir.path().join("bootstrap-kubelet.conf");
    let mut child = Command::new(env!("CARGO_BIN_EXE_fake-apiserver"))
        .args(["--port", "0", "--csr-auto-approve"])
        .args(["--cluster-signing-duration", "45s"])
        .args(["--bootstrap-token", "07401b.f395accd246ae52d"])
        .arg("--write-bootstrap-kubeconfig")
        .arg(&boot)
        .arg("--write-kubeconfig")
        .arg(&kc)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn fake-apiserver");
    let ready = async {
        while !kc.exists() || !boot.exists() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), ready)
        .await
        .expect("kubeconfigs written");
    let run = |cfg: &Path, args: &[&str], stdin: Option<String>| {
        let mut cmd = Command::new(common::KUBECTL);
        cmd.arg("--kubeconfig")
            .arg(cfg)
            .args(args)
            .env("HOME", dir.path())
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        async move {
            let mut child = cmd.spawn().expect("kubectl");
            if let Some(input) = stdin {
                use tokio::io::AsyncWriteExt;
                let mut si = child.stdin.take().expect("stdin");
                si.write_all(input.as_bytes()).await.expect("write");
            }
            tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
                .await
                .expect("kubectl in time")
                .expect("kubectl output")
        }
    };
    let (csr, _) = client_csr("node-csr-bin", "worker-9");
    let out = run(&boot, &["create", "-f", "-"], Some(csr)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut cert = None;
    for _ in 0..100 {
        let out = run(&kc, &["get", "csr", "node-csr-bin", "-o", "json"], None).await;
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if let Some(c) = cert_of(&v) {
            assert_eq!(v["spec"]["username"], "system:bootstrap:07401b");
            cert = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let cert = cert.expect("issued by the auto-approver and signer");
    let (_, block) = x509_parser::pem::parse_x509_pem(cert.as_bytes()).expect("pem");
    let x = block.parse_x509().expect("x509");
    let life = x.validity().not_after.timestamp() - x.validity().not_before.timestamp();
    assert!(
        (45..=50).contains(&life),
        "--cluster-signing-duration 45s: {life} s"
    );
    let status = common::terminate(&mut child).await;
    assert!(status.success(), "{status:?}");
}
