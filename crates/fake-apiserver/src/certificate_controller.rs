//! The certificate controllers of kube-controller-manager (upstream
//! `pkg/controller/certificates/certificate_controller.go` running the `csrapproving` and
//! `csrsigning` handlers): owns one background task; receives CSR watch events from the store,
//! emits `/approval` updates (when auto-approval is on) and `/status` updates (certificate or
//! `Failed` condition) through the store, exactly as the controllers write through the API.

use crate::certificates;
use crate::signer::{IssuedCertificate, Signer, check_for_signer};
use crate::store::Store;
use crate::strategy::Subresource;
use base64::Engine as _;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

/// Shared state of the controllers (the task holds an `Arc`).
pub struct CertificateControllers {
    store: Arc<Store>,
    signer: Signer,
    auto_approve: AtomicBool,
    issued: Mutex<Vec<IssuedCertificate>>,
}

fn csr_info() -> &'static crate::resources::ResourceInfo {
    crate::resources::RESOURCES
        .iter()
        .find(|r| r.kind == certificates::KIND)
        .unwrap_or(&crate::resources::RESOURCES[0])
}

impl CertificateControllers {
    /// Controllers over `store` signing with `signer`.
    pub fn new(store: Arc<Store>, signer: Signer, auto_approve: bool) -> Arc<Self> {
        Arc::new(CertificateControllers {
            store,
            signer,
            auto_approve: AtomicBool::new(auto_approve),
            issued: Mutex::new(Vec::new()),
        })
    }

    /// Turns the kubelet client CSR auto-approver on or off.
    pub fn set_auto_approve(&self, on: bool) {
        self.auto_approve.store(on, Ordering::Relaxed);
    }

    /// Every certificate issued so far, oldest first.
    pub fn issued(&self) -> Vec<IssuedCertificate> {
        self.issued
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The signer (lifetime, minting test certificates).
    pub fn signer(&self) -> &Signer {
        &self.signer
    }

    /// Runs until `cancel`: every CSR change (and every CSR at start) is synced.
    pub async fn run(self: Arc<Self>, cancel: CancellationToken) {
        let info = csr_info();
        let Ok((backlog, _, mut rx)) = self.store.watch(info, None, None) else {
            return;
        };
        for ev in backlog {
            self.sync_object(&ev.object);
        }
        let resource = info.qualified();
        loop {
            let ev = tokio::select! {
                _ = cancel.cancelled() => return,
                ev = rx.recv() => ev,
            };
            match ev {
                Ok(ev) if ev.resource == resource && ev.kind != "DELETED" => {
                    self.sync_object(&ev.object);
                }
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => {
                    for csr in self.store.all(info, None) {
                        self.sync_object(&csr);
                    }
                }
                Err(RecvError::Closed) => return,
            }
        }
    }

    fn sync_object(&self, obj: &Value) {
        if let Some(name) = obj["metadata"]["name"].as_str() {
            self.sync(name);
        }
    }

    /// Level-triggered: re-reads the CSR, approves it if the approver would, then signs it if
    /// approved and not yet issued or failed.
    pub fn sync(&self, name: &str) {
        let info = csr_info();
        let Ok(mut csr) = self.store.get(info, "", name) else {
            return;
        };
        if self.auto_approve.load(Ordering::Relaxed)
            && let Some(cond) = crate::approver::decide(&csr)
        {
            let mut next = csr.clone();
            push_condition(&mut next, cond);
            match self
                .store
                .update_subresource(info, "", name, next, Subresource::Approval)
            {
                Ok(updated) => csr = updated,
                Err(e) => {
                    tracing::debug!(csr = name, error = %e, "auto-approval failed");
                    return;
                }
            }
        }
        self.sign(name, csr);
    }

    fn sign(&self, name: &str, csr: Value) {
        if !certificates::has_condition(&csr, "Approved")
            || certificates::has_condition(&csr, "Failed")
            || certificates::has_condition(&csr, "Denied")
            || certificates::certificate_pem(&csr).is_some()
        {
            return;
        }
        let signer_name = csr["spec"]["signerName"].as_str().unwrap_or_default();
        let Ok(parsed) =
            certificates::parse_request(csr["spec"]["request"].as_str().unwrap_or_default())
        else {
            return;
        };
        let usages = certificates::usages(&csr);
        let outcome = match check_for_signer(signer_name, &parsed, &usages) {
            None => return,
            Some(Err(msg)) => Err(msg),
            Some(Ok(())) => {
                let exp = csr["spec"]["expirationSeconds"].as_i64();
                match self.signer.sign(name, signer_name, &parsed, &usages, exp) {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::warn!(csr = name, error = %e, "signing failed");
                        return;
                    }
                }
            }
        };
        let mut next = csr;
        let issued = match outcome {
            Ok(issued) => {
                next["status"]["certificate"] = json!(
                    base64::engine::general_purpose::STANDARD.encode(&issued.certificate_pem)
                );
                Some(issued)
            }
            Err(msg) => {
                push_condition(
                    &mut next,
                    json!({
                        "type": "Failed",
                        "status": "True",
                        "reason": "SignerValidationFailure",
                        "message": msg,
                    }),
                );
                None
            }
        };
        let info = csr_info();
        match self
            .store
            .update_subresource(info, "", name, next, Subresource::Status)
        {
            Ok(_) => {
                if let Some(i) = issued {
                    tracing::info!(csr = name, cn = %i.common_name, not_after = %i.not_after, "issued certificate");
                    self.issued
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(i);
                }
            }
            Err(e) => tracing::debug!(csr = name, error = %e, "status update failed"),
        }
    }
}

fn push_condition(csr: &mut Value, cond: Value) {
    if !csr["status"].is_object() {
        csr["status"] = json!({});
    }
    match csr["status"]["conditions"].as_array_mut() {
        Some(a) => a.push(cond),
        None => csr["status"]["conditions"] = json!([cond]),
    }
}
