//! HTTP layer: owns routing of Kubernetes API paths, authentication, query parsing and
//! response encoding; receives hyper requests, calls the store/watch modules and emits JSON
//! responses (or a chunked watch stream); pod `log` and `exec`/`attach`/`portforward` go to
//! the `logs` and `streaming` proxies.

use crate::authn::UserInfo;
use crate::error::ApiError;
use crate::resources::{self, ResourceInfo};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{DeleteOpts, ListOpts, PatchType, Store};
use crate::strategy::Subresource;
use crate::watch::{self, WatchParams};
use base64::Engine as _;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;

/// Response body type.
pub type Body = BoxBody<Bytes, Infallible>;

/// Shared state of the HTTP layer.
pub struct Api {
    /// The object store.
    pub store: Arc<Store>,
    /// Whether requests must carry a client cert or valid bearer token.
    pub require_auth: bool,
    /// Interval between progress BOOKMARKs on watches.
    pub bookmark_interval: Duration,
    /// Server URL (for discovery's serverAddressByClientCIDRs).
    pub address: String,
    /// Secret for token signatures.
    pub signing_secret: String,
    /// Request counters keyed by `VERB resource`.
    pub counters: Mutex<BTreeMap<String, u64>>,
    /// Injected faults and the request log.
    pub faults: Arc<crate::faults::Faults>,
    /// TLS client config for calling kubelets (`pods/log`).
    pub kubelet_tls: Arc<rustls::ClientConfig>,
    /// Answers of TokenReview and SubjectAccessReview.
    pub reviews: Arc<crate::reviews::Reviews>,
}

fn respond(code: u16, v: &Value) -> Response<Body> {
    let body = Full::new(Bytes::from(v.to_string())).boxed();
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

fn error_response(e: &ApiError) -> Response<Body> {
    respond(e.code, &e.to_status())
}

fn pct_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_query(q: Option<&str>) -> HashMap<String, String> {
    q.unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (pct_decode(k), pct_decode(v)),
            None => (pct_decode(p), String::new()),
        })
        .collect()
}

/// Every query parameter in order, percent-decoded (repeated keys kept: exec's `command`).
fn query_pairs(q: Option<&str>) -> Vec<(String, String)> {
    q.unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (pct_decode(k), pct_decode(v)),
            None => (pct_decode(p), String::new()),
        })
        .collect()
}

fn truthy(q: &HashMap<String, String>, k: &str) -> bool {
    matches!(q.get(k).map(String::as_str), Some("true" | "1"))
}

/// The parts of a request `dispatch` needs besides the target.
struct RequestParts<'a> {
    content_type: &'a str,
    body: &'a [u8],
    table: bool,
    user: Option<&'a UserInfo>,
}

/// A parsed resource path.
struct Target {
    info: &'static ResourceInfo,
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

fn parse_target(path: &str) -> Result<Option<Target>, ApiError> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Ok(None),
    };
    if rest.is_empty() {
        return Ok(None);
    }
    let lookup = |plural: &str| {
        resources::find(group, version, plural).ok_or_else(|| ApiError::path_not_found(path))
    };
    let owned = |s: &&str| Some((*s).to_string());
    let t = match rest {
        ["namespaces", ns, plural, tail @ ..] if *plural != "status" && *plural != "finalize" => {
            let info = lookup(plural)?;
            if !info.namespaced {
                return Err(ApiError::path_not_found(path));
            }
            match tail {
                [] => Target {
                    info,
                    namespace: owned(ns),
                    name: None,
                    sub: None,
                },
                [name] => Target {
                    info,
                    namespace: owned(ns),
                    name: owned(name),
                    sub: None,
                },
                [name, sub] => Target {
                    info,
                    namespace: owned(ns),
                    name: owned(name),
                    sub: owned(sub),
                },
                _ => return Err(ApiError::path_not_found(path)),
            }
        }
        [plural, tail @ ..] => {
            let info = lookup(plural)?;
            match tail {
                [] => Target {
                    info,
                    namespace: None,
                    name: None,
                    sub: None,
                },
                [name] if !info.namespaced => Target {
                    info,
                    namespace: None,
                    name: owned(name),
                    sub: None,
                },
                [name, sub] if !info.namespaced => Target {
                    info,
                    namespace: None,
                    name: owned(name),
                    sub: owned(sub),
                },
                _ => return Err(ApiError::path_not_found(path)),
            }
        }
        [] => return Ok(None),
    };
    Ok(Some(t))
}

/// The key a request is logged under: `VERB resource[/subresource]` as the counters use
/// (`LIST`/`WATCH` for collection GETs), `VERB /path` for anything else.
fn request_key(method: &Method, path: &str, query: Option<&str>) -> String {
    let trimmed = path.trim_end_matches('/');
    match parse_target(trimmed) {
        Ok(Some(t)) => {
            let verb = match (method, &t.name) {
                (&Method::GET, None) if truthy(&parse_query(query), "watch") => "WATCH",
                (&Method::GET, None) => "LIST",
                (m, _) => m.as_str(),
            };
            let sub = t.sub.map(|s| format!("/{s}")).unwrap_or_default();
            format!("{verb} {}{sub}", t.info.qualified())
        }
        _ => format!("{method} {path}"),
    }
}

fn list_opts(info: &ResourceInfo, q: &HashMap<String, String>) -> Result<ListOpts, ApiError> {
    let labels = LabelSelector::parse(q.get("labelSelector").map_or("", String::as_str))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let fields = FieldSelector::parse(q.get("fieldSelector").map_or("", String::as_str), info.kind)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let limit = match q.get("limit") {
        Some(l) if !l.is_empty() => l
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
        _ => 0,
    };
    let continue_token = q.get("continue").filter(|c| !c.is_empty()).cloned();
    Ok(ListOpts {
        labels,
        fields,
        limit,
        continue_token,
    })
}

fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    if body.starts_with(crate::proto::MAGIC) {
        return crate::proto::decode_envelope(body).map_err(|e| {
            ApiError::unsupported_media_type(&format!("application/vnd.kubernetes.protobuf: {e}"))
        });
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

impl Api {
    fn count(&self, key: String) {
        let mut c = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        *c.entry(key).or_default() += 1;
    }

    /// Who sent `req` (upstream's union authenticator: a verified client certificate first,
    /// then a bearer token: the admin token, TokenRequest tokens, bootstrap tokens). Without
    /// authentication required, everyone is `system:unsecured` in `system:masters`.
    fn authenticate(
        &self,
        req: &Request<Incoming>,
        cert_user: Option<UserInfo>,
    ) -> Option<UserInfo> {
        if !self.require_auth {
            return Some(UserInfo::new(
                "system:unsecured",
                vec![crate::authn::MASTERS.to_owned()],
            ));
        }
        if cert_user.is_some() {
            return cert_user;
        }
        // Upstream's bearer token authenticator: scheme case-insensitive, then the token.
        let token = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))?
            .1
            .trim();
        if let Some(u) = self.store.token_user(token) {
            return Some(u);
        }
        match crate::authn::authenticate_bootstrap_token(&self.store, token, chrono::Utc::now()) {
            Ok(u) => Some(u),
            Err(e) => {
                tracing::debug!(error = %e, "bearer token rejected");
                None
            }
        }
    }

    /// Serves one request; `cert_user` is the identity of a verified client certificate.
    pub async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
        cert_user: Option<UserInfo>,
    ) -> Response<Body> {
        let path = req.uri().path().to_string();
        let open = matches!(
            path.as_str(),
            "/healthz" | "/livez" | "/readyz" | "/version"
        );
        let arrived = tokio::time::Instant::now();
        let key = request_key(req.method(), &path, req.uri().query());
        let faults = self.faults.clone();
        let _in_flight = faults.enter();
        let resp = self.handle_inner(req, cert_user, open).await;
        faults.record(arrived, key, resp.status().as_u16());
        resp
    }

    async fn handle_inner(
        self: Arc<Self>,
        mut req: Request<Incoming>,
        cert_user: Option<UserInfo>,
        open: bool,
    ) -> Response<Body> {
        let path = req.uri().path().to_string();
        if !open {
            let latency = self.faults.latency();
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
        }
        let user = self.authenticate(&req, cert_user);
        if !open {
            let Some(user) = &user else {
                return error_response(&ApiError::unauthorized());
            };
            let q = parse_query(req.uri().query());
            let attrs = crate::authz::attributes(req.method().as_str(), &path, &q);
            if let Err(e) = crate::authz::authorize(user, &attrs) {
                return error_response(&e);
            }
        }
        if let Some(u) = user {
            req.extensions_mut().insert(u);
        }
        if !open && let Some(failure) = self.faults.failure() {
            return failure.response();
        }
        match self.route(req).await {
            Ok(r) => r,
            Err(e) => error_response(&e),
        }
    }

    async fn route(&self, req: Request<Incoming>) -> Result<Response<Body>, ApiError> {
        let path = req.uri().path().trim_end_matches('/').to_string();
        let q = parse_query(req.uri().query());
        let method = req.method().clone();
        let doc = match path.as_str() {
            "/healthz" | "/livez" | "/readyz" => {
                let mut r = Response::new(Full::new(Bytes::from_static(b"ok")).boxed());
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("text/plain"),
                );
                return Ok(r);
            }
            "/openapi/v2" => {
                // An empty protobuf `openapi_v2.Document`: kubectl's client-side validation and
                // apply then treat every kind as schemaless.
                let mut r = Response::new(Full::new(Bytes::new()).boxed());
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("application/octet-stream"),
                );
                return Ok(r);
            }
            "/version" => Some(resources::version_doc()),
            "/api" => Some(resources::core_versions(&self.address)),
            "/apis" => Some(resources::group_list()),
            _ => None,
        };
        if let Some(d) = doc {
            return Ok(respond(200, &d));
        }
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        match segs.as_slice() {
            ["api", v] => {
                return resources::resource_list("", v)
                    .map(|d| respond(200, &d))
                    .ok_or_else(|| ApiError::path_not_found(&path));
            }
            ["apis", g] => {
                return resources::group_doc(g)
                    .map(|d| respond(200, &d))
                    .ok_or_else(|| ApiError::path_not_found(&path));
            }
            ["apis", g, v] => {
                return resources::resource_list(g, v)
                    .map(|d| respond(200, &d))
                    .ok_or_else(|| ApiError::path_not_found(&path));
            }
            _ => {}
        }
        if let ["apis", g, "v1", plural] = segs.as_slice()
            && let Some((_, _, plural, _)) = crate::reviews::REVIEW_RESOURCES
                .iter()
                .find(|(rg, _, rp, _)| rg == g && rp == plural)
        {
            return self.review(method, plural, req).await;
        }
        let Some(t) = parse_target(&path)? else {
            return Err(ApiError::path_not_found(&path));
        };
        if t.info.kind == "Pod"
            && let (Some(ns), Some(name), Some(sub @ ("exec" | "attach" | "portforward"))) =
                (&t.namespace, &t.name, t.sub.as_deref())
        {
            if method != Method::GET && method != Method::POST {
                return Err(ApiError::method_not_allowed(method.as_str()));
            }
            self.count(format!("{method} pods/{sub}"));
            let query = query_pairs(req.uri().query());
            return crate::streaming::proxy(
                &self.store,
                self.kubelet_tls.clone(),
                ns,
                name,
                sub,
                &query,
                req,
            )
            .await;
        }
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default()
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        let table = req
            .headers()
            .get(header::ACCEPT)
            .and_then(|h| h.to_str().ok())
            .is_some_and(crate::table::wants_table);
        let user = req.extensions().get::<UserInfo>().cloned();
        let body = req
            .into_body()
            .collect()
            .await
            .map_err(|e| ApiError::bad_request(format!("reading request body: {e}")))?
            .to_bytes();
        let verb = match (&method, &t.name) {
            (&Method::GET, None) if truthy(&q, "watch") => "WATCH",
            (&Method::GET, None) => "LIST",
            (m, _) => m.as_str(),
        };
        let sub = t
            .sub
            .as_deref()
            .map(|s| format!("/{s}"))
            .unwrap_or_default();
        self.count(format!("{verb} {}{sub}", t.info.qualified()));
        if method == Method::GET
            && t.info.kind == "Pod"
            && t.sub.as_deref() == Some("log")
            && let (Some(ns), Some(name)) = (&t.namespace, &t.name)
        {
            return crate::logs::proxy(&self.store, self.kubelet_tls.clone(), ns, name, &q).await;
        }
        let request = RequestParts {
            content_type: &content_type,
            body: &body,
            table,
            user: user.as_ref(),
        };
        self.dispatch(method, t, q, request)
    }

    /// TokenReview / SubjectAccessReview: create only, answered from `reviews`, never stored.
    async fn review(
        &self,
        method: Method,
        plural: &str,
        req: Request<Incoming>,
    ) -> Result<Response<Body>, ApiError> {
        self.count(format!("{method} {plural}"));
        if method != Method::POST {
            return Err(ApiError::method_not_allowed(method.as_str()));
        }
        let user = req.extensions().get::<UserInfo>().cloned();
        let body = req
            .into_body()
            .collect()
            .await
            .map_err(|e| ApiError::bad_request(format!("reading request body: {e}")))?
            .to_bytes();
        let obj = parse_body(&body)?;
        let out = if plural == "tokenreviews" {
            self.reviews.token_review(obj)?
        } else if plural == "selfsubjectreviews" {
            crate::reviews::self_subject_review(obj, user.as_ref())?
        } else {
            self.reviews.subject_access_review(obj)?
        };
        Ok(respond(201, &out))
    }

    fn dispatch(
        &self,
        method: Method,
        t: Target,
        q: HashMap<String, String>,
        request: RequestParts<'_>,
    ) -> Result<Response<Body>, ApiError> {
        let RequestParts {
            content_type,
            body,
            table,
            user,
        } = request;
        // events.k8s.io/v1 Events share the core Event storage, converted at this edge.
        let v1_events = crate::events::is_events_v1(t.info);
        let info = crate::events::storage(t.info);
        let out = |v: Value| {
            if v1_events {
                crate::events::to_v1(&v)
            } else {
                v
            }
        };
        let input = |v: Value| {
            if v1_events {
                crate::events::to_core(&v)
            } else {
                v
            }
        };
        let out_list = |mut list: Value| {
            if v1_events {
                list["apiVersion"] = json!(t.info.api_version());
                if let Some(items) = list.get_mut("items").and_then(Value::as_array_mut) {
                    for item in items {
                        *item = crate::events::to_v1(item);
                    }
                }
            }
            list
        };
        if method != Method::GET && q.get("dryRun").is_some_and(|d| !d.is_empty()) {
            // Refuse rather than silently persisting a dry-run write.
            return Err(ApiError::bad_request(
                "dryRun is not supported by this fake API server",
            ));
        }
        let ns = t.namespace.clone().unwrap_or_default();
        let ns_ref = if info.namespaced { ns.as_str() } else { "" };
        if info.kind == "Pod" && t.sub.as_deref() == Some("resize") {
            let name = t.name.unwrap_or_default();
            if name.is_empty() {
                return Err(ApiError::method_not_allowed(method.as_str()));
            }
            let at = (ns.as_str(), name.as_str());
            return self.pod_subresource(method, info, at, content_type, body, Subresource::Resize);
        }
        let status_sub = match t.sub.as_deref() {
            None => false,
            Some("status") if info.has_status => true,
            Some("approval") if info.kind == crate::certificates::KIND => {
                let name = t.name.unwrap_or_default();
                let sub = Subresource::Approval;
                return self.pod_subresource(method, info, ("", &name), content_type, body, sub);
            }
            Some("ephemeralcontainers") if info.kind == "Pod" && info.group.is_empty() => {
                let name = t.name.unwrap_or_default();
                let at = (ns_ref, name.as_str());
                let sub = Subresource::EphemeralContainers;
                return self.pod_subresource(method, info, at, content_type, body, sub);
            }
            Some("token") if info.plural == "serviceaccounts" && method == Method::POST => {
                let name = t.name.unwrap_or_default();
                return self.token_request(info, &ns, &name, body);
            }
            Some(other) => {
                return Err(ApiError::path_not_found(&format!(
                    "{}/{other}",
                    info.plural
                )));
            }
        };
        match (method, t.name) {
            (Method::GET, None) => {
                let opts = list_opts(info, &q)?;
                let ns_filter = t.namespace.filter(|_| info.namespaced);
                if truthy(&q, "watch") {
                    return self.watch(t.info, ns_filter, opts, &q, table);
                }
                let list = self.store.list(info, ns_filter.as_deref(), &opts)?;
                if table {
                    let items = list["items"].as_array().cloned().unwrap_or_default();
                    let meta = list["metadata"].clone();
                    return Ok(respond(200, &crate::table::render(info.kind, &items, meta)));
                }
                Ok(respond(200, &out_list(list)))
            }
            (Method::GET, Some(name)) => {
                let obj = self.store.get(info, ns_ref, &name)?;
                if table && !status_sub {
                    let meta = json!({"resourceVersion": obj["metadata"]["resourceVersion"]});
                    return Ok(respond(200, &crate::table::render(info.kind, &[obj], meta)));
                }
                Ok(respond(200, &out(obj)))
            }
            (Method::POST, None) => {
                let mut obj = input(parse_body(body)?);
                if info.kind == crate::certificates::KIND && obj.is_object() {
                    crate::certificates::prepare_for_create(&mut obj, user);
                }
                Ok(respond(201, &out(self.store.create(info, ns_ref, obj)?)))
            }
            (Method::PUT, Some(name)) => {
                let obj = input(parse_body(body)?);
                let updated = self.store.update(info, ns_ref, &name, obj, status_sub)?;
                Ok(respond(200, &out(updated)))
            }
            (Method::PATCH, Some(name)) => {
                let ptype = patch_type(content_type)?;
                let patch = parse_body(body)?;
                if v1_events {
                    return Ok(respond(
                        200,
                        &out(self.patch_converted(info, ns_ref, &name, ptype, &patch)?),
                    ));
                }
                Ok(respond(
                    200,
                    &self
                        .store
                        .patch(info, ns_ref, &name, ptype, &patch, status_sub)?,
                ))
            }
            (Method::DELETE, Some(name)) => {
                let opts = delete_opts(&q, body)?;
                let (obj, removed) = self.store.delete(info, ns_ref, &name, &opts)?;
                if info.kind == "Pod" || !removed {
                    return Ok(respond(200, &out(obj)));
                }
                Ok(respond(200, &success_status(info, &name, &obj)))
            }
            (Method::DELETE, None) => {
                let lopts = list_opts(info, &q)?;
                let dopts = delete_opts(&q, body)?;
                let ns_filter = t.namespace.filter(|_| info.namespaced);
                let list = self.store.list(info, ns_filter.as_deref(), &lopts)?;
                for item in list["items"].as_array().into_iter().flatten() {
                    let n = item["metadata"]["name"].as_str().unwrap_or_default();
                    let ins = item["metadata"]["namespace"].as_str().unwrap_or_default();
                    match self.store.delete(info, ins, n, &dopts) {
                        Ok(_) => {}
                        Err(e) if e.code == 404 => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(respond(200, &out_list(list)))
            }
            (m, _) => Err(ApiError::method_not_allowed(m.as_str())),
        }
    }

    /// A pod subresource with its own write rules: `pods/{name}/ephemeralcontainers` (upstream
    /// `EphemeralContainersREST`: only `spec.ephemeralContainers` changes, as `kubectl debug`
    /// sends it) and `pods/{name}/resize` (only containers' `resources`/`resizePolicy`). GET
    /// returns the pod; PUT and PATCH (JSON, merge, strategic merge) go through the store's
    /// update with the subresource's strategy, preconditions and validation included.
    fn pod_subresource(
        &self,
        method: Method,
        info: &ResourceInfo,
        (ns, name): (&str, &str),
        content_type: &str,
        body: &[u8],
        sub: Subresource,
    ) -> Result<Response<Body>, ApiError> {
        match method {
            Method::GET => Ok(respond(200, &self.store.get(info, ns, name)?)),
            Method::PUT => {
                let obj = parse_body(body)?;
                let updated = self.store.update_subresource(info, ns, name, obj, sub)?;
                Ok(respond(200, &updated))
            }
            Method::PATCH => {
                let ptype = patch_type(content_type)?;
                let patch = parse_body(body)?;
                let updated = self
                    .store
                    .patch_subresource(info, ns, name, ptype, &patch, sub)?;
                Ok(respond(200, &updated))
            }
            m => Err(ApiError::method_not_allowed(m.as_str())),
        }
    }

    /// PATCH of an `events.k8s.io/v1` Event: applied to the converted form, stored as core.
    fn patch_converted(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        ptype: PatchType,
        patch: &Value,
    ) -> Result<Value, ApiError> {
        let old = self.store.get(info, ns, name)?;
        let current = crate::events::to_v1(&old);
        let invalid = |e: String| ApiError::invalid("Event", name, &e);
        let patched =
            match ptype {
                PatchType::Json => crate::jsonpatch::json_patch(&current, patch)
                    .map_err(|e| invalid(e.to_string()))?,
                PatchType::Merge => crate::jsonpatch::merge_patch(&current, patch),
                PatchType::Strategic => crate::smp::apply("Event", &current, patch)
                    .map_err(|e| invalid(e.to_string()))?,
            };
        let mut core = crate::events::to_core(&patched);
        if core["metadata"]["resourceVersion"].is_null() {
            core["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
        }
        self.store.update(info, ns, name, core, false)
    }

    fn watch(
        &self,
        info: &'static ResourceInfo,
        namespace: Option<String>,
        list: ListOpts,
        q: &HashMap<String, String>,
        table: bool,
    ) -> Result<Response<Body>, ApiError> {
        let send_initial_events = truthy(q, "sendInitialEvents");
        let bookmarks = truthy(q, "allowWatchBookmarks");
        if send_initial_events
            && (q.get("resourceVersionMatch").map(String::as_str) != Some("NotOlderThan")
                || !bookmarks)
        {
            return Err(ApiError::invalid(
                "ListOptions",
                "",
                "sendInitialEvents: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan and allowWatchBookmarks",
            ));
        }
        let timeout = match q.get("timeoutSeconds") {
            Some(t) => Some(Duration::from_secs(t.parse().map_err(|_| {
                ApiError::bad_request(format!("invalid timeoutSeconds {t:?}"))
            })?)),
            None => None,
        };
        let params = WatchParams {
            namespace,
            list,
            resource_version: q.get("resourceVersion").cloned(),
            bookmarks,
            send_initial_events,
            timeout,
            bookmark_interval: self.bookmark_interval,
            table,
        };
        let rx = watch::start(&self.store, info, params)?;
        let stream =
            crate::faults::UntilDropped::new(ReceiverStream::new(rx), self.faults.watch_token())
                .map(|b| Ok::<_, Infallible>(Frame::data(b)));
        let mut resp = Response::new(BodyExt::boxed(StreamBody::new(stream)));
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
        Ok(resp)
    }

    fn token_request(
        &self,
        sa_info: &ResourceInfo,
        ns: &str,
        name: &str,
        body: &[u8],
    ) -> Result<Response<Body>, ApiError> {
        let sa = self.store.get(sa_info, ns, name)?;
        let req = if body.is_empty() {
            json!({})
        } else {
            parse_body(body)?
        };
        let expiration = req["spec"]["expirationSeconds"].as_i64().unwrap_or(3600);
        if expiration < 600 {
            return Err(ApiError::invalid(
                "TokenRequest",
                name,
                "spec.expirationSeconds: Invalid value: may not specify a duration less than 10 minutes",
            ));
        }
        let now = chrono::Utc::now();
        let exp = now + chrono::Duration::seconds(expiration);
        let audiences = match &req["spec"]["audiences"] {
            Value::Array(a) if !a.is_empty() => Value::Array(a.clone()),
            _ => json!(["https://kubernetes.default.svc.cluster.local"]),
        };
        let mut k8s = json!({"namespace": ns, "serviceaccount": {"name": name, "uid": sa["metadata"]["uid"]}});
        let bound = &req["spec"]["boundObjectRef"];
        if let Some(kind) = bound["kind"].as_str() {
            k8s[kind.to_lowercase()] = json!({"name": bound["name"], "uid": bound["uid"]});
        }
        let claims = json!({
            "aud": audiences,
            "exp": exp.timestamp(),
            "iat": now.timestamp(),
            "nbf": now.timestamp(),
            "iss": "https://kubernetes.default.svc.cluster.local",
            "jti": format!("{}", self.store.next_serial()),
            "sub": format!("system:serviceaccount:{ns}:{name}"),
            "kubernetes.io": k8s,
        });
        let enc =
            |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        let signing_input = format!(
            "{}.{}",
            enc(&json!({"alg": "RS256", "kid": "fake"})),
            enc(&claims)
        );
        let sig = Sha256::digest(format!("{signing_input}.{}", self.signing_secret).as_bytes());
        let token = format!(
            "{signing_input}.{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sig)
        );
        let mut sa_user = UserInfo::new(
            format!("system:serviceaccount:{ns}:{name}"),
            vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{ns}"),
            ],
        );
        sa_user.uid = sa["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        self.store.add_token(token.clone(), sa_user);
        let mut spec = req["spec"].clone();
        spec["audiences"] = audiences;
        spec["expirationSeconds"] = json!(expiration);
        Ok(respond(
            201,
            &json!({
                "kind": "TokenRequest",
                "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"name": name, "namespace": ns, "creationTimestamp": null},
                "spec": spec,
                "status": {
                    "token": token,
                    "expirationTimestamp": exp.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                },
            }),
        ))
    }
}

/// The patch type a PATCH's content type names.
fn patch_type(content_type: &str) -> Result<PatchType, ApiError> {
    match content_type {
        "application/json-patch+json" => Ok(PatchType::Json),
        "application/merge-patch+json" => Ok(PatchType::Merge),
        "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
        other => Err(ApiError::unsupported_media_type(other)),
    }
}

fn success_status(info: &ResourceInfo, name: &str, obj: &Value) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": name,
            "group": info.group,
            "kind": info.plural,
            "uid": obj["metadata"]["uid"],
        },
    })
}

fn delete_opts(q: &HashMap<String, String>, body: &[u8]) -> Result<DeleteOpts, ApiError> {
    let b = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        parse_body(body)?
    };
    let mut grace = b["gracePeriodSeconds"].as_i64();
    if let Some(g) = q.get("gracePeriodSeconds") {
        grace = Some(
            g.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds {g:?}")))?,
        );
    }
    Ok(DeleteOpts {
        grace_period_seconds: grace,
        uid: b["preconditions"]["uid"].as_str().map(str::to_string),
        resource_version: b["preconditions"]["resourceVersion"]
            .as_str()
            .map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse() {
        let t = parse_target("/api/v1/namespaces/default/pods/p1/status")
            .expect("ok")
            .expect("target");
        assert_eq!(t.info.plural, "pods");
        assert_eq!(t.namespace.as_deref(), Some("default"));
        assert_eq!(t.name.as_deref(), Some("p1"));
        assert_eq!(t.sub.as_deref(), Some("status"));
        let t = parse_target("/api/v1/namespaces/default")
            .expect("ok")
            .expect("t");
        assert_eq!(
            (t.info.plural, t.name.as_deref()),
            ("namespaces", Some("default"))
        );
        let t = parse_target("/api/v1/namespaces/x/status")
            .expect("ok")
            .expect("t");
        assert_eq!(t.sub.as_deref(), Some("status"));
        let t = parse_target("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n")
            .expect("ok")
            .expect("t");
        assert_eq!(t.info.kind, "Lease");
        assert!(parse_target("/api/v1/widgets").is_err());
        assert!(parse_target("/api/v1/namespaces/a/nodes").is_err());
    }

    #[test]
    fn query_decoding() {
        let q = parse_query(Some("labelSelector=app%3Dweb%2Ctier+in+%28a%29&watch=1"));
        assert_eq!(q["labelSelector"], "app=web,tier in (a)");
        assert!(truthy(&q, "watch"));
    }
}
