//! In-memory object store: owns every stored object, the global resourceVersion counter and the
//! watch history; receives create/update/patch/delete/list/watch calls from the HTTP layer and
//! emits objects, lists and watch events (broadcast to live watchers).

use crate::error::ApiError;
use crate::resources::ResourceInfo;
use crate::selector::{FieldSelector, LabelSelector};
use crate::strategy::{self, Subresource};
use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::broadcast;

/// One change recorded in the watch history.
#[derive(Debug, Clone)]
pub struct WatchEvent {
    /// resourceVersion of the change.
    pub rv: u64,
    /// Qualified resource (`pods`, `leases.coordination.k8s.io`).
    pub resource: String,
    /// Namespace ("" for cluster-scoped).
    pub namespace: String,
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub kind: &'static str,
    /// The object after the change (the last state for `DELETED`).
    pub object: Value,
    /// The object before the change, if any.
    pub previous: Option<Value>,
}

/// Patch formats accepted by PATCH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/json-patch+json`.
    Json,
    /// `application/merge-patch+json`.
    Merge,
    /// `application/strategic-merge-patch+json`.
    Strategic,
}

/// DELETE options (`metav1.DeleteOptions`).
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    /// Requested grace period.
    pub grace_period_seconds: Option<i64>,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
}

/// List parameters.
#[derive(Debug, Clone, Default)]
pub struct ListOpts {
    /// Parsed label selector.
    pub labels: LabelSelector,
    /// Parsed field selector.
    pub fields: FieldSelector,
    /// Page size (0 = all).
    pub limit: usize,
    /// Continue token from a previous page.
    pub continue_token: Option<String>,
}

type Key = (String, String, String);

/// What [`Store::watch`] returns: the backlog, the current rv and the live receiver.
pub type WatchStart = (
    Vec<Arc<WatchEvent>>,
    u64,
    broadcast::Receiver<Arc<WatchEvent>>,
);

struct Inner {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    history: VecDeque<Arc<WatchEvent>>,
    history_limit: usize,
    /// Events with an rv at or below this were dropped from history.
    compacted: u64,
    tokens: Vec<(String, crate::authn::UserInfo)>,
    ip_counter: u32,
}

/// The shared in-memory store.
pub struct Store {
    inner: Mutex<Inner>,
    events: broadcast::Sender<Arc<WatchEvent>>,
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn rfc3339_in(secs: i64) -> String {
    (chrono::Utc::now() + chrono::Duration::seconds(secs))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj["metadata"][field].as_str().filter(|s| !s.is_empty())
}

fn conflict_modified(info: &ResourceInfo, name: &str) -> ApiError {
    ApiError::conflict(
        &info.qualified(),
        name,
        "the object has been modified; please apply your changes to the latest version and try again",
    )
}

impl Store {
    /// An empty store with the default namespaces; `history_limit` bounds the watch history.
    pub fn new(history_limit: usize) -> Arc<Self> {
        let (events, _) = broadcast::channel(4096);
        let store = Arc::new(Store {
            inner: Mutex::new(Inner {
                rv: 1,
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                history_limit: history_limit.max(1),
                compacted: 1,
                tokens: Vec::new(),
                ip_counter: 10,
            }),
            events,
        });
        let ns = crate::resources::find("", "v1", "namespaces");
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            if let Some(info) = ns {
                let _ = store.create(info, "", json!({"metadata": {"name": name}}));
            }
        }
        store
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A poisoned lock only means another request panicked; the data is still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// Drops all watch history: watches from any older resourceVersion get 410 Gone.
    pub fn compact(&self) {
        let mut inner = self.lock();
        inner.history.clear();
        inner.compacted = inner.rv;
    }

    /// Records a bearer token as valid for `user`.
    pub fn add_token(&self, token: String, user: crate::authn::UserInfo) {
        self.lock().tokens.push((token, user));
    }

    /// Whether a bearer token is valid.
    pub fn token_valid(&self, token: &str) -> bool {
        self.token_user(token).is_some()
    }

    /// The user a (non-bootstrap) bearer token authenticates as.
    pub fn token_user(&self, token: &str) -> Option<crate::authn::UserInfo> {
        self.lock()
            .tokens
            .iter()
            .find(|(t, _)| t == token)
            .map(|(_, u)| u.clone())
    }

    fn record(
        &self,
        inner: &mut Inner,
        info: &ResourceInfo,
        kind: &'static str,
        object: Value,
        previous: Option<Value>,
    ) {
        let ev = Arc::new(WatchEvent {
            rv: inner.rv,
            resource: info.qualified(),
            namespace: meta_str(&object, "namespace")
                .unwrap_or_default()
                .to_string(),
            kind,
            object,
            previous,
        });
        inner.history.push_back(ev.clone());
        while inner.history.len() > inner.history_limit {
            if let Some(old) = inner.history.pop_front() {
                inner.compacted = old.rv;
            }
        }
        // No receivers is fine: nobody is watching.
        let _ = self.events.send(ev);
    }

    fn key(info: &ResourceInfo, ns: &str, name: &str) -> Key {
        let ns = if info.namespaced { ns } else { "" };
        (info.qualified(), ns.to_string(), name.to_string())
    }

    /// Reads one object.
    pub fn get(&self, info: &ResourceInfo, ns: &str, name: &str) -> Result<Value, ApiError> {
        self.lock()
            .objects
            .get(&Self::key(info, ns, name))
            .cloned()
            .ok_or_else(|| ApiError::not_found(&info.qualified(), name))
    }

    /// All objects of a resource (optionally in one namespace), in key order.
    pub fn all(&self, info: &ResourceInfo, ns: Option<&str>) -> Vec<Value> {
        let res = info.qualified();
        self.lock()
            .objects
            .iter()
            .filter(|((r, n, _), _)| *r == res && ns.is_none_or(|ns| ns == n))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Lists objects as `<Kind>List` with the list resourceVersion, selectors and paging.
    pub fn list(
        &self,
        info: &ResourceInfo,
        ns: Option<&str>,
        opts: &ListOpts,
    ) -> Result<Value, ApiError> {
        let inner = self.lock();
        let (list_rv, start_after) = match &opts.continue_token {
            Some(tok) => {
                let (rv, key) = decode_continue(tok)?;
                if rv < inner.compacted {
                    return Err(ApiError::gone(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                    ));
                }
                (rv, Some(key))
            }
            None => (inner.rv, None),
        };
        let res = info.qualified();
        let mut items = Vec::new();
        let mut next = None;
        let mut matching = inner
            .objects
            .iter()
            .filter(|((r, n, _), _)| *r == res && ns.is_none_or(|ns| ns == n))
            .filter(|(k, _)| {
                start_after
                    .as_ref()
                    .is_none_or(|s| (&k.1, &k.2) > (&s.0, &s.1))
            })
            .filter(|(_, v)| opts.labels.matches(v) && opts.fields.matches(v));
        for (k, v) in matching.by_ref() {
            items.push(v.clone());
            if opts.limit > 0 && items.len() == opts.limit {
                next = Some((k.1.clone(), k.2.clone()));
                break;
            }
        }
        let remaining = matching.count();
        let mut metadata = json!({"resourceVersion": list_rv.to_string()});
        if let Some((n, name)) = next.filter(|_| remaining > 0) {
            metadata["continue"] = json!(encode_continue(list_rv, &n, &name));
            metadata["remainingItemCount"] = json!(remaining);
        }
        Ok(json!({
            "kind": format!("{}List", info.kind),
            "apiVersion": info.api_version(),
            "metadata": metadata,
            "items": items,
        }))
    }

    /// Creates an object: 409 if it exists, 404 if its namespace does not.
    pub fn create(&self, info: &ResourceInfo, ns: &str, mut obj: Value) -> Result<Value, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        if !obj["metadata"].is_object() {
            obj["metadata"] = json!({});
        }
        let mut inner = self.lock();
        if info.namespaced {
            match meta_str(&obj, "namespace") {
                Some(body_ns) if body_ns != ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => obj["metadata"]["namespace"] = json!(ns),
            }
            let ns_key = ("namespaces".to_string(), String::new(), ns.to_string());
            if !inner.objects.contains_key(&ns_key) {
                return Err(ApiError::not_found("namespaces", ns));
            }
        } else if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("namespace");
        }
        if meta_str(&obj, "name").is_none()
            && let Some(prefix) = meta_str(&obj, "generateName").map(str::to_string)
        {
            let suffix = short_hash(&format!("{}/{}", inner.rv, prefix));
            obj["metadata"]["name"] = json!(format!("{prefix}{suffix}"));
        }
        let name = meta_str(&obj, "name").unwrap_or_default().to_string();
        let key = Self::key(info, ns, &name);
        if !name.is_empty() && inner.objects.contains_key(&key) {
            return Err(ApiError::already_exists(&info.qualified(), &name));
        }
        obj["kind"] = json!(info.kind);
        obj["apiVersion"] = json!(info.api_version());
        let ip = {
            inner.ip_counter += 1;
            let n = inner.ip_counter;
            move || format!("10.96.{}.{}", (n >> 8) & 255, n & 255)
        };
        strategy::default_on_create(info, &mut obj, ip);
        strategy::validate(info, &obj)?;
        if info.kind == "Pod" {
            crate::ephemeral::validate_create(&obj)?;
        }
        if info.kind == crate::certificates::KIND {
            crate::certificates::validate_create(&obj)?;
        }
        inner.rv += 1;
        let rv = inner.rv;
        let meta = &mut obj["metadata"];
        meta["uid"] = json!(new_uid(rv, &name));
        meta["creationTimestamp"] = json!(now_rfc3339());
        meta["generation"] = json!(1);
        meta["resourceVersion"] = json!(rv.to_string());
        for f in ["deletionTimestamp", "deletionGracePeriodSeconds"] {
            if let Some(m) = meta.as_object_mut() {
                m.remove(f);
            }
        }
        inner.objects.insert(key, obj.clone());
        self.record(&mut inner, info, "ADDED", obj.clone(), None);
        Ok(obj)
    }

    /// Replaces an object (PUT), enforcing resourceVersion and uid preconditions.
    pub fn update(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        obj: Value,
        status_sub: bool,
    ) -> Result<Value, ApiError> {
        let mut inner = self.lock();
        self.update_locked(&mut inner, info, ns, name, obj, Self::sub(status_sub))
    }

    fn sub(status_sub: bool) -> Subresource {
        if status_sub {
            Subresource::Status
        } else {
            Subresource::Main
        }
    }

    /// [`Store::update`] through any subresource (e.g. `pods/ephemeralcontainers`).
    pub fn update_subresource(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        obj: Value,
        sub: Subresource,
    ) -> Result<Value, ApiError> {
        let mut inner = self.lock();
        self.update_locked(&mut inner, info, ns, name, obj, sub)
    }

    fn update_locked(
        &self,
        inner: &mut Inner,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        mut obj: Value,
        sub: Subresource,
    ) -> Result<Value, ApiError> {
        if !obj.is_object() || !obj["metadata"].is_object() {
            return Err(ApiError::bad_request(
                "the request body must be an object with metadata",
            ));
        }
        if meta_str(&obj, "name").is_some_and(|n| n != name) {
            return Err(ApiError::bad_request(
                "the name of the object does not match the name on the URL",
            ));
        }
        if info.namespaced && meta_str(&obj, "namespace").is_some_and(|n| n != ns) {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        obj["metadata"]["name"] = json!(name);
        let key = Self::key(info, ns, name);
        let old = inner
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&info.qualified(), name))?;
        if let Some(rv) = meta_str(&obj, "resourceVersion")
            && Some(rv) != meta_str(&old, "resourceVersion")
        {
            return Err(conflict_modified(info, name));
        }
        if let Some(uid) = meta_str(&obj, "uid") {
            let old_uid = meta_str(&old, "uid").unwrap_or_default();
            if uid != old_uid {
                return Err(ApiError::conflict(
                    &info.qualified(),
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {old_uid}"
                    ),
                ));
            }
        }
        let mut new = strategy::prepare_subresource_update(info, &old, obj, sub)?;
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
        if new == old {
            return Ok(old);
        }
        inner.rv += 1;
        new["metadata"]["resourceVersion"] = json!(inner.rv.to_string());
        let finalizers_empty = new["metadata"]["finalizers"]
            .as_array()
            .is_none_or(|f| f.is_empty());
        let grace_zero = new["metadata"]["deletionGracePeriodSeconds"]
            .as_i64()
            .is_none_or(|g| g == 0);
        if !new["metadata"]["deletionTimestamp"].is_null() && finalizers_empty && grace_zero {
            inner.objects.remove(&key);
            self.record(inner, info, "DELETED", new.clone(), Some(old));
            return Ok(new);
        }
        inner.objects.insert(key, new.clone());
        self.record(inner, info, "MODIFIED", new.clone(), Some(old));
        Ok(new)
    }

    /// Patches an object atomically (read, apply, update).
    pub fn patch(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        ptype: PatchType,
        patch: &Value,
        status_sub: bool,
    ) -> Result<Value, ApiError> {
        self.patch_subresource(info, ns, name, ptype, patch, Self::sub(status_sub))
    }

    /// [`Store::patch`] through any subresource: the patch applies to the whole stored
    /// object, the subresource's rules pick what of the result is kept.
    pub fn patch_subresource(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        ptype: PatchType,
        patch: &Value,
        sub: Subresource,
    ) -> Result<Value, ApiError> {
        let mut inner = self.lock();
        let key = Self::key(info, ns, name);
        let old = inner
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&info.qualified(), name))?;
        let invalid = |e: String| ApiError::invalid(info.kind, name, &e);
        let mut patched = match ptype {
            PatchType::Json => crate::jsonpatch::json_patch(&old, patch)
                .map_err(|e| ApiError::invalid(info.kind, name, &e.to_string()))?,
            PatchType::Merge => crate::jsonpatch::merge_patch(&old, patch),
            PatchType::Strategic => {
                crate::smp::apply(info.kind, &old, patch).map_err(|e| invalid(e.to_string()))?
            }
        };
        // A resourceVersion in a patch is a precondition; an absent one means "latest".
        if meta_str(&patched, "resourceVersion") == meta_str(&old, "resourceVersion")
            || patched["metadata"]["resourceVersion"].is_null()
        {
            patched["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
        }
        self.update_locked(&mut inner, info, ns, name, patched, sub)
    }

    /// Deletes an object, gracefully for scheduled pods. Returns the object's final state and
    /// whether it was removed from the store.
    pub fn delete(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<(Value, bool), ApiError> {
        let mut inner = self.lock();
        let key = Self::key(info, ns, name);
        let old = inner
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&info.qualified(), name))?;
        let old_uid = meta_str(&old, "uid").unwrap_or_default();
        if let Some(uid) = opts.uid.as_deref().filter(|u| *u != old_uid) {
            return Err(ApiError::conflict(
                &info.qualified(),
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {old_uid}"
                ),
            ));
        }
        if let Some(rv) = opts.resource_version.as_deref()
            && Some(rv) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::conflict(
                &info.qualified(),
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(&old, "resourceVersion").unwrap_or_default()
                ),
            ));
        }
        let mut grace = 0;
        if info.kind == "Pod" {
            grace = opts
                .grace_period_seconds
                .or_else(|| old["spec"]["terminationGracePeriodSeconds"].as_i64())
                .unwrap_or(30);
            let phase = old["status"]["phase"].as_str().unwrap_or_default();
            if old["spec"]["nodeName"].as_str().is_none_or(str::is_empty)
                || phase == "Succeeded"
                || phase == "Failed"
            {
                grace = 0;
            }
            grace = grace.max(0);
            if let Some(existing) = old["metadata"]["deletionGracePeriodSeconds"].as_i64()
                && grace >= existing
                && existing > 0
            {
                return Ok((old, false));
            }
        }
        let has_finalizers = old["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        inner.rv += 1;
        let mut new = old.clone();
        new["metadata"]["resourceVersion"] = json!(inner.rv.to_string());
        if grace > 0 || has_finalizers {
            new["metadata"]["deletionTimestamp"] = json!(rfc3339_in(grace));
            new["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
            inner.objects.insert(key, new.clone());
            self.record(&mut inner, info, "MODIFIED", new.clone(), Some(old));
            return Ok((new, false));
        }
        inner.objects.remove(&key);
        self.record(&mut inner, info, "DELETED", new.clone(), Some(old));
        if info.kind == "Namespace" {
            let contained: Vec<Key> = inner
                .objects
                .keys()
                .filter(|(_, n, _)| n == name)
                .cloned()
                .collect();
            for k in contained {
                let Some(mut obj) = inner.objects.remove(&k) else {
                    continue;
                };
                let Some(child) = crate::resources::RESOURCES
                    .iter()
                    .find(|r| r.qualified() == k.0)
                else {
                    continue;
                };
                inner.rv += 1;
                obj["metadata"]["resourceVersion"] = json!(inner.rv.to_string());
                self.record(&mut inner, child, "DELETED", obj, None);
            }
        }
        Ok((new, true))
    }

    /// Starts a watch: returns the backlog (history after `from`, or synthetic ADDED events for
    /// the current state when `from` is None), the current resourceVersion and a live receiver.
    pub fn watch(
        &self,
        info: &ResourceInfo,
        ns: Option<&str>,
        from: Option<u64>,
    ) -> Result<WatchStart, ApiError> {
        let inner = self.lock();
        let res = info.qualified();
        let in_scope = |ev: &WatchEvent| ev.resource == res && ns.is_none_or(|n| n == ev.namespace);
        let backlog = match from {
            Some(rv) => {
                if rv < inner.compacted {
                    return Err(ApiError::gone(format!(
                        "too old resource version: {rv} ({})",
                        inner.compacted
                    )));
                }
                if rv > inner.rv {
                    return Err(ApiError::too_large_resource_version(rv, inner.rv));
                }
                inner
                    .history
                    .iter()
                    .filter(|ev| ev.rv > rv && in_scope(ev))
                    .cloned()
                    .collect()
            }
            None => inner
                .objects
                .iter()
                .filter(|((r, n, _), _)| *r == res && ns.is_none_or(|ns| ns == n))
                .map(|((_, n, _), v)| {
                    Arc::new(WatchEvent {
                        rv: v["metadata"]["resourceVersion"]
                            .as_str()
                            .and_then(|s| s.parse().ok())
                            .unwrap_or(0),
                        resource: res.clone(),
                        namespace: n.clone(),
                        kind: "ADDED",
                        object: v.clone(),
                        previous: None,
                    })
                })
                .collect(),
        };
        Ok((backlog, inner.rv, self.events.subscribe()))
    }

    /// Allocates a pod-style IP-free unique token id (used by TokenRequest).
    pub fn next_serial(&self) -> u64 {
        let mut inner = self.lock();
        inner.ip_counter += 1;
        u64::from(inner.ip_counter)
    }
}

fn short_hash(s: &str) -> String {
    let h = Sha256::digest(s.as_bytes());
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    h.iter()
        .take(5)
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect()
}

fn new_uid(rv: u64, name: &str) -> String {
    let nanos = chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default();
    let h = hex::encode(Sha256::digest(format!("{rv}/{name}/{nanos}").as_bytes()));
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

fn encode_continue(rv: u64, ns: &str, name: &str) -> String {
    let raw = json!({"rv": rv, "ns": ns, "name": name}).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

fn decode_continue(tok: &str) -> Result<(u64, (String, String)), ApiError> {
    let bad = || ApiError::bad_request(format!("continue key is not valid: {tok:?}"));
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(tok)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let rv = v["rv"].as_u64().ok_or_else(bad)?;
    let ns = v["ns"].as_str().ok_or_else(bad)?.to_string();
    let name = v["name"].as_str().ok_or_else(bad)?.to_string();
    Ok((rv, (ns, name)))
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
