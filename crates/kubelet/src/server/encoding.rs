//! Response content-coding of the `/metrics*` endpoints, as upstream's Prometheus handler does
//! it. Receives a request's `Accept-Encoding` header values and a rendered exposition; emits the
//! chosen coding (gzip or identity) and the encoded body. Nothing here fails the request: an
//! unparsable header means identity, and a compressor error falls back to the plain body.

use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;
use http::HeaderMap;
use http::header::ACCEPT_ENCODING;

/// The content coding a response is sent with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    Identity,
    Gzip,
}

/// A quality value of RFC 9110 §12.4.2 in thousandths (`q=0.5` is 500): `0`, `0.ddd`, `1` or
/// `1.000`, at most three decimals. `None` for anything else (the element is then ignored).
fn parse_qvalue(v: &str) -> Option<u16> {
    let (int, frac) = match v.split_once('.') {
        Some((i, f)) => (i, f),
        None => (v, ""),
    };
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let thousandths = frac
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(3)
        .fold(0u16, |acc, b| acc * 10 + u16::from(b - b'0'));
    match int {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// One `coding *( OWS ";" OWS param )` element: the coding (lower-cased) and its weight
/// (1000 without `q`). `None` when the element is empty or its `q` is malformed.
fn parse_element(element: &str) -> Option<(String, u16)> {
    let mut parts = element.split(';');
    let coding = parts.next()?.trim();
    if coding.is_empty() {
        return None;
    }
    let mut q = 1000;
    for param in parts {
        let Some((name, value)) = param.split_once('=') else {
            // A parameter without a value is not valid syntax: do not guess.
            return None;
        };
        if name.trim().eq_ignore_ascii_case("q") {
            q = parse_qvalue(value.trim())?;
        }
    }
    Some((coding.to_ascii_lowercase(), q))
}

/// Chooses the coding for a request with these headers. gzip when the client accepts it with
/// a non-zero weight (named as `gzip` or `x-gzip`, or through `*` when gzip is not named) that
/// is not lower than an explicitly listed `identity`; identity otherwise, including when the
/// header is absent, not visible ASCII, or malformed.
pub fn negotiate(headers: &HeaderMap) -> Coding {
    let mut gzip: Option<u16> = None;
    let mut star: Option<u16> = None;
    let mut identity: Option<u16> = None;
    for value in headers.get_all(ACCEPT_ENCODING) {
        let Ok(value) = value.to_str() else {
            return Coding::Identity;
        };
        for (coding, q) in value.split(',').filter_map(parse_element) {
            // The highest weight wins when a coding is listed twice.
            let slot = match coding.as_str() {
                "gzip" | "x-gzip" => &mut gzip,
                "*" => &mut star,
                "identity" => &mut identity,
                _ => continue,
            };
            *slot = Some(slot.map_or(q, |old| old.max(q)));
        }
    }
    let gzip_q = gzip.or(star).unwrap_or(0);
    if gzip_q > 0 && gzip_q >= identity.unwrap_or(0) {
        Coding::Gzip
    } else {
        Coding::Identity
    }
}

/// gzip of `body`. The fast level: a 110-pod `/metrics/cadvisor` (~600 KiB of highly repetitive
/// text) still shrinks ~15×, for a fraction of the default level's CPU on every scrape.
/// `None` only if the in-memory compressor fails, in which case the caller sends identity.
pub fn gzip(body: &[u8]) -> Option<Vec<u8>> {
    let mut enc = GzEncoder::new(Vec::with_capacity(body.len() / 8), Compression::fast());
    enc.write_all(body).ok()?;
    enc.finish().ok()
}

#[cfg(test)]
mod tests {

    use super::*;
    use http::HeaderValue;
    use std::io::Read;

    fn with(values: &[&[u8]]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(ACCEPT_ENCODING, HeaderValue::from_bytes(v).unwrap());
        }
        h
    }

    fn chosen(v: &str) -> Coding {
        negotiate(&with(&[v.as_bytes()]))
    }

    #[test]
    fn gzip_when_accepted() {
        assert_eq!(negotiate(&HeaderMap::new()), Coding::Identity);
        for v in [
            "gzip",
            "GZIP",
            "x-gzip",
            "deflate, gzip, br, zstd",
            "gzip;q=0.5",
            "gzip ; q=1.000",
            "*",
            "br, *;q=0.1",
            "identity;q=0.5, gzip",
            "identity, gzip",
        ] {
            assert_eq!(chosen(v), Coding::Gzip, "{v}");
        }
        for v in ["", "identity", "br, deflate", "zstd"] {
            assert_eq!(chosen(v), Coding::Identity, "{v}");
        }
        // Values split over several header lines count together.
        assert_eq!(negotiate(&with(&[b"br", b"gzip"])), Coding::Gzip);
    }

    #[test]
    fn q_zero_and_odd_headers_mean_identity() {
        for v in [
            "gzip;q=0",
            "gzip;q=0.000",
            "gzip;Q=0",
            "*;q=0",
            "gzip;q=0, *",
            "*, gzip;q=0",
            "identity;q=1, gzip;q=0.5",
            // Malformed weights: the element is ignored rather than guessed.
            "gzip;q=2",
            "gzip;q=1.5",
            "gzip;q=0.0001",
            "gzip;q=-1",
            "gzip;q=",
            "gzip;q=abc",
            "gzip;q",
            "gzip;;",
            "gzip;q=0x1",
            ",,,;;;===",
            "gzipp",
            "g zip",
            "gzip-ish",
        ] {
            assert_eq!(chosen(v), Coding::Identity, "{v}");
        }
        // A coding listed twice keeps its best weight, as a lenient reader would.
        assert_eq!(chosen("gzip;q=0, gzip;q=0.2"), Coding::Gzip);
        // Not visible ASCII: identity, no error.
        assert_eq!(negotiate(&with(&[b"gzip\xff"])), Coding::Identity);
    }

    #[test]
    fn a_huge_header_is_parsed_in_one_pass_without_failing() {
        let many = "x;q=0.1, ".repeat(10_000) + "gzip";
        assert_eq!(chosen(&many), Coding::Gzip);
        let zeros = format!("gzip;q=0.{}", "0".repeat(10_000));
        assert_eq!(chosen(&zeros), Coding::Identity);
    }

    #[test]
    fn gzip_round_trips() {
        let body = "container_cpu_usage_seconds_total{pod=\"p\"} 1\n".repeat(1000);
        let z = gzip(body.as_bytes()).unwrap();
        assert!(z.len() * 10 < body.len(), "{} vs {}", z.len(), body.len());
        let mut out = String::new();
        flate2::read::GzDecoder::new(&z[..])
            .read_to_string(&mut out)
            .unwrap();
        assert_eq!(out, body);
        assert!(gzip(b"").is_some());
    }
}
