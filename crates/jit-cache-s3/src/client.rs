//! A small blocking S3 client: one signed HTTP/1.1 request per call (ureq's pooled
//! connections), a bounded body read, the server's answer classified into the cache's error
//! kinds, and the server's clock learnt from every `Date` header. Nothing is retried here.

use crate::config::{Addressing, S3Config};
use crate::date;
use crate::sigv4::{self, Canonical, Signer};
use jit_cache::{TierError, TierErrorKind};
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The most bytes of an error reply read (its XML names the code).
const ERROR_BODY_LIMIT: usize = 16 << 10;

/// An HTTP method the tier uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Get,
    Put,
    Delete,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
        }
    }
}

/// A condition on the object's current version, S3's conditional request headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Condition {
    /// Unconditional.
    None,
    /// `If-None-Match: *`: only if no object is there (create-only).
    Absent,
    /// `If-Match: <etag>`: only if that version is still there (compare-and-set).
    Version(String),
}

/// One request: an object (or the bucket, for an empty key), a query, a condition, a body, and
/// the most body bytes the caller accepts (`Range: bytes=0-<limit>` on a GET).
#[derive(Debug)]
pub(crate) struct Call<'a> {
    pub(crate) method: Method,
    pub(crate) key: &'a str,
    pub(crate) query: Vec<(String, String)>,
    pub(crate) condition: Condition,
    pub(crate) body: &'a [u8],
    /// For a GET: read at most `limit + 1` bytes (one more than accepted, to tell "too large").
    pub(crate) limit: usize,
    /// For a GET of an object: ask for `Range: bytes=0-<limit>` (a listing is not ranged).
    pub(crate) ranged: bool,
    /// A test seam: bytes sent instead of `body`, which is still what is signed and checksummed
    /// (a transfer corrupted on the way).
    #[cfg(feature = "test-server")]
    pub(crate) wire: Option<&'a [u8]>,
}

impl<'a> Call<'a> {
    pub(crate) fn get(key: &'a str, limit: usize) -> Call<'a> {
        Call {
            method: Method::Get,
            key,
            query: Vec::new(),
            condition: Condition::None,
            body: &[],
            limit,
            ranged: true,
            #[cfg(feature = "test-server")]
            wire: None,
        }
    }

    pub(crate) fn put(key: &'a str, body: &'a [u8], condition: Condition) -> Call<'a> {
        Call {
            method: Method::Put,
            key,
            query: Vec::new(),
            condition,
            body,
            limit: 0,
            ranged: false,
            #[cfg(feature = "test-server")]
            wire: None,
        }
    }

    pub(crate) fn delete(key: &'a str, condition: Condition) -> Call<'a> {
        Call {
            method: Method::Delete,
            key,
            query: Vec::new(),
            condition,
            body: &[],
            limit: 0,
            ranged: false,
            #[cfg(feature = "test-server")]
            wire: None,
        }
    }
}

/// How the server answered a request it understood.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// 2xx.
    Done,
    /// 404 `NoSuchKey`: no such object.
    NoSuchKey,
    /// 412 (or 409, a concurrent conditional write): the condition did not hold.
    ConditionFailed,
    /// 416: a range of an empty object.
    Empty,
}

/// A reply the caller interprets.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: Status,
    pub(crate) etag: Option<String>,
    /// The object's whole size (from `Content-Range`, else `Content-Length`).
    pub(crate) size: Option<u64>,
    /// At most `limit + 1` bytes of the body.
    pub(crate) body: Vec<u8>,
}

impl Reply {
    /// The body, or TooLarge when the object is longer than `limit`.
    pub(crate) fn bounded(
        self,
        op: &'static str,
        target: &str,
        limit: usize,
    ) -> Result<Vec<u8>, TierError> {
        if self.body.len() > limit || self.size.is_some_and(|s| s > limit as u64) {
            return Err(TierError::new(
                op,
                target,
                TierErrorKind::TooLarge,
                format!("longer than the {limit} bytes accepted"),
            ));
        }
        Ok(self.body)
    }
}

/// The S3 endpoint, signer and connection pool of one tier.
pub(crate) struct Client {
    agent: ureq::Agent,
    /// `scheme://authority`.
    base: String,
    /// The `Host` header (signed).
    host: String,
    /// `/bucket` with path-style addressing, empty with virtual-hosted.
    path_prefix: String,
    bucket: String,
    signer: Signer,
    connect_timeout: Duration,
    io_timeout: Duration,
    /// Set once the server answered anything: until then a call must finish within the connect
    /// timeout (a stopped server accepts connections and never answers).
    answered: AtomicBool,
    /// The server's clock at its latest `Date` header, and when that reply arrived.
    clock: Mutex<Option<(u64, Instant)>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .field("bucket", &self.bucket)
            .field("signer", &self.signer)
            .finish_non_exhaustive()
    }
}

impl Client {
    pub(crate) fn new(config: &S3Config, base: String, host: String) -> Client {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_connect(Some(config.connect_timeout))
            .max_idle_connections_per_host(8)
            .user_agent(concat!("jit-cache-s3/", env!("CARGO_PKG_VERSION")))
            .build()
            .new_agent();
        let path_prefix = match config.addressing {
            Addressing::Path => format!("/{}", sigv4::uri_encode(&config.bucket, true)),
            Addressing::VirtualHosted => String::new(),
        };
        Client {
            agent,
            base,
            host,
            path_prefix,
            bucket: config.bucket.clone(),
            signer: Signer {
                credentials: config.credentials.clone(),
                region: config.region.clone(),
                service: "s3",
            },
            connect_timeout: config.connect_timeout,
            io_timeout: config.io_timeout,
            answered: AtomicBool::new(false),
            clock: Mutex::new(None),
        }
    }

    /// The server's time now, in Unix milliseconds, from its latest `Date` header plus the time
    /// since (never ahead of the server's clock by more than the latency: `Date` is whole
    /// seconds, rounded down); None before any reply.
    pub(crate) fn server_now_ms(&self) -> Option<u64> {
        let clock = self.clock.lock().unwrap_or_else(|p| p.into_inner());
        clock.map(|(ms, at)| ms + at.elapsed().as_millis() as u64)
    }

    /// Sends `call` and classifies the answer: transport failures and every status but 2xx,
    /// 404 `NoSuchKey`, 409/412 and 416 are errors of `op` on `target`.
    pub(crate) fn send(
        &self,
        op: &'static str,
        target: &str,
        call: &Call<'_>,
    ) -> Result<Reply, TierError> {
        let unavailable =
            |message: String| TierError::new(op, target, TierErrorKind::Unavailable, message);
        let path = match (call.key, self.path_prefix.as_str()) {
            ("", "") => "/".to_string(),
            ("", bucket) => bucket.to_string(),
            (key, bucket) => format!("{bucket}/{}", sigv4::uri_encode_path(key)),
        };
        let query: Vec<String> = call
            .query
            .iter()
            .map(|(k, v)| {
                format!(
                    "{}={}",
                    sigv4::uri_encode(k, true),
                    sigv4::uri_encode(v, true)
                )
            })
            .collect();
        let url = if query.is_empty() {
            format!("{}{path}", self.base)
        } else {
            format!("{}{path}?{}", self.base, query.join("&"))
        };
        let payload_digest = sigv4::sha256(call.body);
        let payload_sha256 = sigv4::hex(&payload_digest);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let amz_date = date::amz_date(now);
        let mut headers: Vec<(String, String)> = vec![
            ("host".into(), self.host.clone()),
            ("x-amz-content-sha256".into(), payload_sha256.clone()),
            ("x-amz-date".into(), amz_date.clone()),
        ];
        if let Some(token) = &self.signer.credentials.session_token {
            headers.push(("x-amz-security-token".into(), token.clone()));
        }
        if call.method == Method::Put {
            // The server refuses an upload whose bytes do not hash to this (a corrupted
            // transfer); x-amz-content-sha256 alone is not checked by every server.
            headers.push((
                "x-amz-checksum-sha256".into(),
                sigv4::base64(&payload_digest),
            ));
        }
        // Signed: `host` and every `x-amz-*` header, as S3 requires. The conditions and the
        // range are not (SigV4 leaves them optional), so that a proxy that drops them is one the
        // conditional-write probe can see.
        let mut unsigned: Vec<(String, String)> = Vec::new();
        match &call.condition {
            Condition::None => {}
            Condition::Absent => unsigned.push(("if-none-match".into(), "*".into())),
            Condition::Version(etag) => unsigned.push(("if-match".into(), etag.clone())),
        }
        if call.method == Method::Get && call.ranged {
            unsigned.push(("range".into(), format!("bytes=0-{}", call.limit)));
        }
        let authorization = self.signer.authorization(
            &Canonical {
                method: call.method.name(),
                path: &path,
                query: &call.query,
                headers: &headers,
                payload_sha256: &payload_sha256,
            },
            &amz_date,
        );
        headers.push(("authorization".into(), authorization));
        headers.extend(unsigned);
        let (timeout, which) = if self.answered.load(Ordering::Relaxed) {
            (self.io_timeout, "the I/O timeout")
        } else {
            (
                self.connect_timeout,
                "the connect timeout, which bounds a first request",
            )
        };
        let sent = match call.method {
            Method::Get | Method::Delete => {
                let mut request = if call.method == Method::Get {
                    self.agent.get(&url)
                } else {
                    self.agent.delete(&url)
                };
                for (name, value) in &headers {
                    request = request.header(name.as_str(), value.as_str());
                }
                request
                    .config()
                    .timeout_per_call(Some(timeout))
                    .build()
                    .call()
            }
            Method::Put => {
                let mut request = self.agent.put(&url);
                for (name, value) in &headers {
                    request = request.header(name.as_str(), value.as_str());
                }
                #[cfg(feature = "test-server")]
                let body = call.wire.unwrap_or(call.body);
                #[cfg(not(feature = "test-server"))]
                let body = call.body;
                request
                    .config()
                    .timeout_per_call(Some(timeout))
                    .build()
                    .send(body)
            }
        };
        let response = sent.map_err(|e| match e {
            ureq::Error::Timeout(_) => unavailable(format!(
                "no answer from {} within {} ms ({which})",
                self.base,
                timeout.as_millis()
            )),
            ureq::Error::Io(_) | ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => {
                unavailable(format!("{}: {e}", self.base))
            }
            other => TierError::new(
                op,
                target,
                TierErrorKind::Protocol,
                format!("{}: {other}", self.base),
            ),
        })?;
        self.answered.store(true, Ordering::Relaxed);
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        if let Some(secs) = header("date").as_deref().and_then(date::parse_http_date) {
            let mut clock = self.clock.lock().unwrap_or_else(|p| p.into_inner());
            *clock = Some((secs * 1000, Instant::now()));
        }
        let etag = header("etag");
        let size = header("content-range")
            .and_then(|r| r.rsplit_once('/').and_then(|(_, total)| total.parse().ok()))
            .or_else(|| header("content-length").and_then(|l| l.parse().ok()));
        // A GET's body up to one byte past the limit; any other reply's (an error document, an
        // empty PUT reply) up to a small bound, so that its connection can be reused.
        let wanted = if (200..300).contains(&status) && call.method == Method::Get {
            call.limit.saturating_add(1)
        } else {
            ERROR_BODY_LIMIT
        };
        let mut body = Vec::new();
        response
            .into_body()
            .into_reader()
            .take(wanted as u64)
            .read_to_end(&mut body)
            .map_err(|e| unavailable(format!("read the reply from {}: {e}", self.base)))?;
        let status = match status {
            200..=299 => Status::Done,
            409 | 412 => Status::ConditionFailed,
            416 => Status::Empty,
            404 => match error_code(&body).as_deref() {
                Some("NoSuchKey") | None => Status::NoSuchKey,
                _ => return Err(self.refusal(op, target, status, &body)),
            },
            _ => return Err(self.refusal(op, target, status, &body)),
        };
        Ok(Reply {
            status,
            etag,
            size,
            body,
        })
    }

    /// An error reply as the cache's error, with a message that says what to fix.
    fn refusal(&self, op: &'static str, target: &str, status: u16, body: &[u8]) -> TierError {
        let code = error_code(body).unwrap_or_default();
        let message = xml_element(body, "Message").unwrap_or_default();
        let (kind, advice) = match (status, code.as_str()) {
            (_, "NoSuchBucket") => (
                TierErrorKind::Protocol,
                format!(
                    "bucket `{}` does not exist at {}: create it, or fix JIT_CACHE_REMOTE / AWS_ENDPOINT_URL",
                    self.bucket, self.base
                ),
            ),
            (_, "SignatureDoesNotMatch") => (
                TierErrorKind::Protocol,
                "the server refused the request's signature: check AWS_SECRET_ACCESS_KEY (and AWS_REGION)".into(),
            ),
            (_, "InvalidAccessKeyId") => (
                TierErrorKind::Protocol,
                "the server does not know this access key: check AWS_ACCESS_KEY_ID".into(),
            ),
            (_, "ExpiredToken" | "InvalidToken" | "TokenRefreshRequired") => (
                TierErrorKind::Protocol,
                "the session token was refused: renew AWS_SESSION_TOKEN".into(),
            ),
            (_, "RequestTimeTooSkewed") => (
                TierErrorKind::Protocol,
                "this host's clock is too far from the server's: fix the clock (NTP)".into(),
            ),
            (_, "AuthorizationHeaderMalformed" | "PermanentRedirect") | (301, _) => (
                TierErrorKind::Protocol,
                "the bucket lives elsewhere: check AWS_REGION and AWS_ENDPOINT_URL".into(),
            ),
            (_, "BadDigest" | "XAmzContentSHA256Mismatch" | "InvalidDigest") => (
                TierErrorKind::Protocol,
                "the server refused the upload: its bytes do not match their checksum (corrupted on the way)".into(),
            ),
            (_, "AccessDenied" | "AllAccessDisabled") | (403, _) => (
                TierErrorKind::Denied,
                "this identity may not do that".into(),
            ),
            (507, _) | (_, "QuotaExceeded" | "InsufficientStorage") => {
                (TierErrorKind::Full, "the store is full".into())
            }
            (500..=599, _) => (
                TierErrorKind::Unavailable,
                "the server failed or is overloaded".into(),
            ),
            _ => (TierErrorKind::Protocol, "unexpected answer".into()),
        };
        let detail = if code.is_empty() {
            format!("HTTP {status}")
        } else if message.is_empty() {
            format!("HTTP {status} {code}")
        } else {
            format!("HTTP {status} {code}: {message}")
        };
        TierError::new(op, target, kind, format!("{advice} ({detail})"))
    }
}

/// The `<Code>` of an S3 error document.
fn error_code(body: &[u8]) -> Option<String> {
    xml_element(body, "Code")
}

/// The text of the first `<name>...</name>` in an XML document, unescaped.
pub(crate) fn xml_element(body: &[u8], name: &str) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let open = format!("<{name}>");
    let start = text.find(&open)? + open.len();
    let end = start + text[start..].find(&format!("</{name}>"))?;
    Some(xml_unescape(&text[start..end]))
}

/// Every `<name>...</name>` text of an XML document, unescaped, in order.
pub(crate) fn xml_elements(body: &[u8], name: &str) -> Vec<String> {
    let Ok(mut text) = std::str::from_utf8(body) else {
        return Vec::new();
    };
    let (open, close) = (format!("<{name}>"), format!("</{name}>"));
    let mut out = Vec::new();
    while let Some(start) = text.find(&open) {
        let rest = &text[start + open.len()..];
        let Some(end) = rest.find(&close) else {
            break;
        };
        out.push(xml_unescape(&rest[..end]));
        text = &rest[end + close.len()..];
    }
    out
}

/// XML's predefined entities and numeric character references.
fn xml_unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let tail = &rest[amp..];
        let Some(semi) = tail.find(';') else {
            out.push_str(tail);
            return out;
        };
        let entity = &tail[1..semi];
        let decoded = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| entity.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match decoded {
            Some(c) => out.push(c),
            None => out.push_str(&tail[..=semi]),
        }
        rest = &tail[semi + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_documents_give_their_code_and_message() {
        let body = br#"<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>"#;
        assert_eq!(error_code(body).as_deref(), Some("NoSuchBucket"));
        assert_eq!(
            xml_element(body, "Message").as_deref(),
            Some("The specified bucket does not exist")
        );
        assert_eq!(error_code(b"not xml"), None);
    }

    #[test]
    fn listings_give_every_key_unescaped() {
        let body = br#"<ListBucketResult><Contents><Key>a/b&amp;c</Key><ETag>&#34;x&#34;</ETag></Contents><Contents><Key>d</Key></Contents><NextContinuationToken>t=1</NextContinuationToken></ListBucketResult>"#;
        assert_eq!(xml_elements(body, "Key"), ["a/b&c", "d"]);
        assert_eq!(xml_elements(body, "ETag"), ["\"x\""]);
        assert_eq!(
            xml_element(body, "NextContinuationToken").as_deref(),
            Some("t=1")
        );
        assert_eq!(xml_unescape("&lt;&#x41;&unknown;&"), "<A&unknown;&");
    }
}
