//! Minimal Kubernetes protobuf decoding: owns turning the `k8s\0`-prefixed protobuf bodies that
//! kubectl's typed clients send (`create namespace|configmap|secret|serviceaccount|token`,
//! `certificate approve|deny`, `auth whoami`) into JSON; receives a request body, emits a JSON object or an error naming the kind.

use base64::Engine as _;
use serde_json::{Map, Value, json};

/// A protobuf body that could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ProtoError {
    /// Wire-format error.
    #[error("malformed protobuf body: {0}")]
    Malformed(&'static str),
    /// A kind this server does not decode from protobuf.
    #[error(
        "protobuf bodies for kind {0:?} are not supported; send JSON (e.g. `kubectl create -f`)"
    )]
    UnsupportedKind(String),
}

/// The magic prefix of Kubernetes protobuf envelopes.
pub const MAGIC: &[u8] = b"k8s\0";

enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

fn varint(buf: &[u8], pos: &mut usize) -> Result<u64, ProtoError> {
    let mut out = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf
            .get(*pos)
            .ok_or(ProtoError::Malformed("truncated varint"))?;
        *pos += 1;
        out |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(out);
        }
    }
    Err(ProtoError::Malformed("varint too long"))
}

fn fields(buf: &[u8]) -> Result<Vec<(u64, Wire<'_>)>, ProtoError> {
    let mut pos = 0;
    let mut out = Vec::new();
    while pos < buf.len() {
        let key = varint(buf, &mut pos)?;
        let (tag, wt) = (key >> 3, key & 7);
        match wt {
            0 => out.push((tag, Wire::Varint(varint(buf, &mut pos)?))),
            1 => pos += 8,
            5 => pos += 4,
            2 => {
                let len = usize::try_from(varint(buf, &mut pos)?)
                    .map_err(|_| ProtoError::Malformed("length overflow"))?;
                let end = pos
                    .checked_add(len)
                    .filter(|e| *e <= buf.len())
                    .ok_or(ProtoError::Malformed("truncated field"))?;
                out.push((tag, Wire::Bytes(&buf[pos..end])));
                pos = end;
            }
            _ => return Err(ProtoError::Malformed("unsupported wire type")),
        }
    }
    if pos > buf.len() {
        return Err(ProtoError::Malformed("truncated fixed field"));
    }
    Ok(out)
}

#[derive(Clone, Copy)]
enum Kind {
    Str,
    Int,
    Bool,
    Msg(&'static [F]),
    MapStr,
    MapBytes,
    RepStr,
    RepMsg(&'static [F]),
    /// `bytes`, base64 in JSON.
    Bytes,
    /// `metav1.Time` (seconds = 1, nanos = 2), RFC 3339 in JSON.
    Time,
    /// `map<string, ExtraValue>` (ExtraValue: repeated string items = 1).
    MapRepStr,
}

type F = (u64, &'static str, Kind);

const OWNER_REF: &[F] = &[
    (1, "kind", Kind::Str),
    (3, "name", Kind::Str),
    (4, "uid", Kind::Str),
    (5, "apiVersion", Kind::Str),
    (6, "controller", Kind::Bool),
    (7, "blockOwnerDeletion", Kind::Bool),
];
const OBJECT_META: &[F] = &[
    (1, "name", Kind::Str),
    (2, "generateName", Kind::Str),
    (3, "namespace", Kind::Str),
    (5, "uid", Kind::Str),
    (6, "resourceVersion", Kind::Str),
    (7, "generation", Kind::Int),
    (11, "labels", Kind::MapStr),
    (12, "annotations", Kind::MapStr),
    (13, "ownerReferences", Kind::RepMsg(OWNER_REF)),
    (14, "finalizers", Kind::RepStr),
];
const NAMESPACE: &[F] = &[
    (1, "metadata", Kind::Msg(OBJECT_META)),
    (2, "spec", Kind::Msg(&[(1, "finalizers", Kind::RepStr)])),
];
const CONFIGMAP: &[F] = &[
    (1, "metadata", Kind::Msg(OBJECT_META)),
    (2, "data", Kind::MapStr),
    (3, "binaryData", Kind::MapBytes),
    (4, "immutable", Kind::Bool),
];
const SECRET: &[F] = &[
    (1, "metadata", Kind::Msg(OBJECT_META)),
    (2, "data", Kind::MapBytes),
    (3, "type", Kind::Str),
    (4, "stringData", Kind::MapStr),
    (5, "immutable", Kind::Bool),
];
const OBJECT_REF: &[F] = &[
    (1, "kind", Kind::Str),
    (2, "namespace", Kind::Str),
    (3, "name", Kind::Str),
    (4, "uid", Kind::Str),
    (5, "apiVersion", Kind::Str),
];
const SERVICE_ACCOUNT: &[F] = &[
    (1, "metadata", Kind::Msg(OBJECT_META)),
    (2, "secrets", Kind::RepMsg(OBJECT_REF)),
    (
        3,
        "imagePullSecrets",
        Kind::RepMsg(&[(1, "name", Kind::Str)]),
    ),
    (4, "automountServiceAccountToken", Kind::Bool),
];
const BOUND_REF: &[F] = &[
    (1, "kind", Kind::Str),
    (2, "apiVersion", Kind::Str),
    (3, "name", Kind::Str),
    (4, "uid", Kind::Str),
];
const TOKEN_REQUEST: &[F] = &[
    (1, "metadata", Kind::Msg(OBJECT_META)),
    (
        2,
        "spec",
        Kind::Msg(&[
            (1, "audiences", Kind::RepStr),
            (3, "boundObjectRef", Kind::Msg(BOUND_REF)),
            (4, "expirationSeconds", Kind::Int),
        ]),
    ),
];

const CSR_CONDITION: &[F] = &[
    (1, "type", Kind::Str),
    (6, "status", Kind::Str),
    (2, "reason", Kind::Str),
    (3, "message", Kind::Str),
    (4, "lastUpdateTime", Kind::Time),
    (5, "lastTransitionTime", Kind::Time),
];
const CSR: &[F] = &[
    (1, "metadata", Kind::Msg(OBJECT_META)),
    (
        2,
        "spec",
        Kind::Msg(&[
            (1, "request", Kind::Bytes),
            (7, "signerName", Kind::Str),
            (8, "expirationSeconds", Kind::Int),
            (5, "usages", Kind::RepStr),
            (2, "username", Kind::Str),
            (3, "uid", Kind::Str),
            (4, "groups", Kind::RepStr),
            (6, "extra", Kind::MapRepStr),
        ]),
    ),
    (
        3,
        "status",
        Kind::Msg(&[
            (1, "conditions", Kind::RepMsg(CSR_CONDITION)),
            (2, "certificate", Kind::Bytes),
        ]),
    ),
];

fn time(b: &[u8]) -> Result<Value, ProtoError> {
    let mut secs = 0i64;
    for (tag, w) in fields(b)? {
        if let (1, Wire::Varint(v)) = (tag, w) {
            secs = v as i64;
        }
    }
    let t = chrono::DateTime::from_timestamp(secs, 0)
        .ok_or(ProtoError::Malformed("time out of range"))?;
    Ok(json!(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)))
}

fn extra_entry(b: &[u8]) -> Result<(String, Value), ProtoError> {
    let mut key = String::new();
    let mut items = Vec::new();
    for (tag, w) in fields(b)? {
        match (tag, w) {
            (1, Wire::Bytes(k)) => key = String::from_utf8_lossy(k).into_owned(),
            (2, Wire::Bytes(v)) => {
                for (t, w2) in fields(v)? {
                    if let (1, Wire::Bytes(item)) = (t, w2) {
                        items.push(string(item));
                    }
                }
            }
            _ => {}
        }
    }
    Ok((key, Value::Array(items)))
}

fn string(b: &[u8]) -> Value {
    Value::String(String::from_utf8_lossy(b).into_owned())
}

fn map_entry(b: &[u8], bytes_value: bool) -> Result<(String, Value), ProtoError> {
    let mut key = String::new();
    let mut val = json!("");
    for (tag, w) in fields(b)? {
        match (tag, w) {
            (1, Wire::Bytes(k)) => key = String::from_utf8_lossy(k).into_owned(),
            (2, Wire::Bytes(v)) if bytes_value => {
                val = json!(base64::engine::general_purpose::STANDARD.encode(v));
            }
            (2, Wire::Bytes(v)) => val = string(v),
            _ => {}
        }
    }
    Ok((key, val))
}

fn decode(buf: &[u8], schema: &[F]) -> Result<Value, ProtoError> {
    let mut out = Map::new();
    for (tag, w) in fields(buf)? {
        let Some((_, name, kind)) = schema.iter().find(|(t, _, _)| *t == tag) else {
            continue;
        };
        let name = (*name).to_string();
        match (*kind, w) {
            // proto2 sends unset optional strings and ints as empty/zero; JSON omits them.
            (Kind::Str | Kind::Bytes, Wire::Bytes([])) | (Kind::Int, Wire::Varint(0)) => {}
            (Kind::Str, Wire::Bytes(b)) => {
                out.insert(name, string(b));
            }
            (Kind::Int, Wire::Varint(v)) => {
                // int64 fields travel as two's complement varints.
                out.insert(name, json!(v as i64));
            }
            (Kind::Bool, Wire::Varint(v)) => {
                out.insert(name, json!(v != 0));
            }
            (Kind::Msg(s), Wire::Bytes(b)) => {
                out.insert(name, decode(b, s)?);
            }
            (Kind::MapStr | Kind::MapBytes, Wire::Bytes(b)) => {
                let (k, v) = map_entry(b, matches!(kind, Kind::MapBytes))?;
                let entry = out.entry(name).or_insert_with(|| json!({}));
                entry[k] = v;
            }
            (Kind::RepStr, Wire::Bytes(b)) => push(&mut out, name, string(b)),
            (Kind::Bytes, Wire::Bytes(b)) => {
                out.insert(
                    name,
                    json!(base64::engine::general_purpose::STANDARD.encode(b)),
                );
            }
            (Kind::Time, Wire::Bytes(b)) => {
                out.insert(name, time(b)?);
            }
            (Kind::MapRepStr, Wire::Bytes(b)) => {
                let (k, v) = extra_entry(b)?;
                let entry = out.entry(name).or_insert_with(|| json!({}));
                entry[k] = v;
            }
            (Kind::RepMsg(s), Wire::Bytes(b)) => push(&mut out, name, decode(b, s)?),
            _ => return Err(ProtoError::Malformed("field has an unexpected wire type")),
        }
    }
    Ok(Value::Object(out))
}

fn push(out: &mut Map<String, Value>, name: String, v: Value) {
    if let Value::Array(a) = out.entry(name).or_insert_with(|| json!([])) {
        a.push(v);
    }
}

/// Decodes a `k8s\0` protobuf envelope into a JSON object with `apiVersion` and `kind`.
pub fn decode_envelope(body: &[u8]) -> Result<Value, ProtoError> {
    let rest = body
        .strip_prefix(MAGIC)
        .ok_or(ProtoError::Malformed("missing k8s protobuf prefix"))?;
    let mut api_version = String::new();
    let mut kind = String::new();
    let mut raw: &[u8] = &[];
    for (tag, w) in fields(rest)? {
        match (tag, w) {
            (1, Wire::Bytes(tm)) => {
                for (t, w2) in fields(tm)? {
                    match (t, w2) {
                        (1, Wire::Bytes(b)) => {
                            api_version = String::from_utf8_lossy(b).into_owned()
                        }
                        (2, Wire::Bytes(b)) => kind = String::from_utf8_lossy(b).into_owned(),
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    let schema = match kind.as_str() {
        "Namespace" => NAMESPACE,
        "ConfigMap" => CONFIGMAP,
        "Secret" => SECRET,
        "ServiceAccount" => SERVICE_ACCOUNT,
        "TokenRequest" => TOKEN_REQUEST,
        "CertificateSigningRequest" => CSR,
        "SelfSubjectReview" => &[(1, "metadata", Kind::Msg(OBJECT_META))],
        _ => return Err(ProtoError::UnsupportedKind(kind)),
    };
    let mut obj = decode(raw, schema)?;
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    if obj.get("metadata").is_none() {
        obj["metadata"] = json!({});
    }
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tag: u64, wt: u64) -> Vec<u8> {
        enc_varint((tag << 3) | wt)
    }

    fn enc_varint(mut v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }

    fn bytes(tag: u64, b: &[u8]) -> Vec<u8> {
        let mut out = key(tag, 2);
        out.extend(enc_varint(b.len() as u64));
        out.extend_from_slice(b);
        out
    }

    #[test]
    fn decodes_a_csr_approval_as_kubectl_sends_it() {
        let varint = |tag: u64, v: u64| [key(tag, 0), enc_varint(v)].concat();
        let time = bytes(4, &[varint(1, 1_764_000_000), varint(2, 5)].concat());
        let cond = [
            bytes(1, b"Approved"),
            bytes(6, b"True"),
            bytes(2, b"KubectlApprove"),
            bytes(3, b"ok"),
            time,
        ]
        .concat();
        let extra = [
            bytes(1, b"k"),
            bytes(2, &[bytes(1, b"a"), bytes(1, b"b")].concat()),
        ]
        .concat();
        let spec = [
            bytes(1, b"PEM"),
            bytes(7, b"kubernetes.io/kubelet-serving"),
            varint(8, 3600),
            bytes(5, b"server auth"),
            bytes(2, b"system:node:n1"),
            bytes(4, b"system:nodes"),
            bytes(6, &extra),
        ]
        .concat();
        let raw = [
            bytes(1, &[bytes(1, b"csr-1"), bytes(6, b"42")].concat()),
            bytes(2, &spec),
            bytes(3, &[bytes(1, &cond), bytes(2, b"")].concat()),
        ]
        .concat();
        let type_meta = [
            bytes(1, b"certificates.k8s.io/v1"),
            bytes(2, b"CertificateSigningRequest"),
        ]
        .concat();
        let body = [MAGIC.to_vec(), bytes(1, &type_meta), bytes(2, &raw)].concat();
        let obj = decode_envelope(&body).expect("decode");
        assert_eq!(
            obj,
            json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
                "metadata": {"name": "csr-1", "resourceVersion": "42"},
                "spec": {"request": "UEVN", "signerName": "kubernetes.io/kubelet-serving",
                    "expirationSeconds": 3600, "usages": ["server auth"],
                    "username": "system:node:n1", "groups": ["system:nodes"],
                    "extra": {"k": ["a", "b"]}},
                "status": {"conditions": [{"type": "Approved", "status": "True",
                    "reason": "KubectlApprove", "message": "ok",
                    "lastUpdateTime": "2025-11-24T16:00:00Z"}]}})
        );
    }

    #[test]
    fn decodes_a_configmap_envelope() {
        let meta = [
            bytes(1, b"cm"),
            bytes(11, &[bytes(1, b"a"), bytes(2, b"b")].concat()),
        ]
        .concat();
        let raw = [
            bytes(1, &meta),
            bytes(2, &[bytes(1, b"k"), bytes(2, b"v")].concat()),
            key(4, 0),
            vec![1],
        ]
        .concat();
        let type_meta = [bytes(1, b"v1"), bytes(2, b"ConfigMap")].concat();
        let body = [MAGIC.to_vec(), bytes(1, &type_meta), bytes(2, &raw)].concat();
        let obj = decode_envelope(&body).expect("decode");
        assert_eq!(
            obj,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "cm", "labels": {"a": "b"}},
                   "data": {"k": "v"}, "immutable": true})
        );
        let pod = [
            MAGIC.to_vec(),
            bytes(1, &[bytes(1, b"v1"), bytes(2, b"Pod")].concat()),
        ]
        .concat();
        assert!(matches!(
            decode_envelope(&pod),
            Err(ProtoError::UnsupportedKind(_))
        ));
        assert!(decode_envelope(b"k8s\0\x0a\xff").is_err());
    }
}
