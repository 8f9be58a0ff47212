//! The operator commands' client of the kubelet's local socket: owns one HTTP/1.1 request at
//! a time over a fresh unix connection; receives a kubelet API path; emits the decoded JSON
//! body or an error that says what to do (kubelet not running, not root, refused).

use std::path::{Path, PathBuf};

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach the kubelet at {}: {source} (is rkubelet running?)", socket.display())]
    Unreachable {
        socket: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot reach the kubelet at {}: {source} (the socket is root-only: run as root)", socket.display())]
    PermissionDenied {
        socket: PathBuf,
        source: std::io::Error,
    },
    #[error("talking to the kubelet at {}: {message}", socket.display())]
    Http { socket: PathBuf, message: String },
    #[error("the kubelet answered {status} for {path}: {body}")]
    Status {
        path: String,
        status: u16,
        body: String,
    },
    #[error("decoding the kubelet's answer for {path}: {source}")]
    Decode {
        path: String,
        source: serde_json::Error,
    },
}

/// A client of one kubelet socket.
#[derive(Debug, Clone)]
pub struct Client {
    socket: PathBuf,
}

impl Client {
    pub fn new(socket: &Path) -> Self {
        Self {
            socket: socket.to_path_buf(),
        }
    }

    /// GETs `path` and returns the body (any non-200 status is an error with the body).
    pub async fn get(&self, path: &str) -> Result<Bytes, ClientError> {
        let http = |e: &dyn std::fmt::Display| ClientError::Http {
            socket: self.socket.clone(),
            message: e.to_string(),
        };
        let stream = tokio::net::UnixStream::connect(&self.socket)
            .await
            .map_err(|source| match source.kind() {
                std::io::ErrorKind::PermissionDenied => ClientError::PermissionDenied {
                    socket: self.socket.clone(),
                    source,
                },
                _ => ClientError::Unreachable {
                    socket: self.socket.clone(),
                    source,
                },
            })?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| http(&e))?;
        let driver = tokio::spawn(conn);
        let req = http::Request::get(path)
            .header(http::header::HOST, "localhost")
            .body(Empty::<Bytes>::new())
            .map_err(|e| http(&e))?;
        let result = async {
            let resp = sender.send_request(req).await.map_err(|e| http(&e))?;
            let status = resp.status();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| http(&e))?
                .to_bytes();
            if status != http::StatusCode::OK {
                return Err(ClientError::Status {
                    path: path.to_owned(),
                    status: status.as_u16(),
                    body: String::from_utf8_lossy(&body).trim_end().to_owned(),
                });
            }
            Ok(body)
        }
        .await;
        drop(sender);
        driver.abort();
        let _ = driver.await;
        result
    }

    /// GETs `path` and decodes its JSON body.
    pub async fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let body = self.get(path).await?;
        serde_json::from_slice(&body).map_err(|source| ClientError::Decode {
            path: path.to_owned(),
            source,
        })
    }
}

/// Percent-encodes one path segment (names are DNS labels; anything else is escaped).
pub fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
