//! AWS Signature Version 4 for S3 requests (header-based, signed payload): the canonical
//! request, the string to sign, the derived key and the `Authorization` header. Tested against
//! AWS's published examples; the server's own check is the integration tests'.

use hmac::{KeyInit, Mac};
use sha2::{Digest, Sha256};

type HmacSha256 = hmac::Hmac<Sha256>;

/// An access key, its secret and an optional session token (`AWS_SESSION_TOKEN`).
#[derive(Clone)]
pub struct Credentials {
    /// The access key id (not secret: it names the key in every request).
    pub access_key_id: String,
    /// The secret key, never sent and never printed.
    pub secret_access_key: String,
    /// A temporary credential's token, sent as `x-amz-security-token`.
    pub session_token: Option<String>,
}

impl Credentials {
    /// A long-term key pair.
    pub fn new(access_key_id: impl Into<String>, secret_access_key: impl Into<String>) -> Self {
        Credentials {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            session_token: None,
        }
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// One request as the signer sees it. Header names are lower case; the path is already
/// URI-encoded ([`uri_encode_path`]); query pairs are raw and encoded here.
pub(crate) struct Canonical<'a> {
    pub(crate) method: &'a str,
    pub(crate) path: &'a str,
    pub(crate) query: &'a [(String, String)],
    pub(crate) headers: &'a [(String, String)],
    pub(crate) payload_sha256: &'a str,
}

/// Signs requests for one region and service with one set of credentials.
#[derive(Debug, Clone)]
pub(crate) struct Signer {
    pub(crate) credentials: Credentials,
    pub(crate) region: String,
    pub(crate) service: &'static str,
}

impl Signer {
    /// The `Authorization` header's value for `request` at `amz_date` (`YYYYMMDDTHHMMSSZ`),
    /// which must also be the request's `x-amz-date` header.
    pub(crate) fn authorization(&self, request: &Canonical<'_>, amz_date: &str) -> String {
        let day = &amz_date[..8.min(amz_date.len())];
        let scope = format!("{day}/{}/{}/aws4_request", self.region, self.service);
        let (canonical, signed_headers) = canonical_request(request);
        let string_to_sign = format!(
            "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
            hex(&Sha256::digest(canonical.as_bytes()))
        );
        let mut key = hmac(
            format!("AWS4{}", self.credentials.secret_access_key).as_bytes(),
            day.as_bytes(),
        );
        for part in [
            self.region.as_bytes(),
            self.service.as_bytes(),
            b"aws4_request",
        ] {
            key = hmac(&key, part);
        }
        let signature = hex(&hmac(&key, string_to_sign.as_bytes()));
        format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_headers}, Signature={signature}",
            self.credentials.access_key_id
        )
    }
}

/// The canonical request and its signed-header list.
fn canonical_request(request: &Canonical<'_>) -> (String, String) {
    let mut query: Vec<(String, String)> = request
        .query
        .iter()
        .map(|(k, v)| (uri_encode(k, true), uri_encode(v, true)))
        .collect();
    query.sort();
    let query: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut headers: Vec<(String, String)> = request
        .headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), collapse_spaces(v)))
        .collect();
    headers.sort();
    let canonical_headers: String = headers.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let signed: Vec<&str> = headers.iter().map(|(k, _)| k.as_str()).collect();
    let signed = signed.join(";");
    (
        format!(
            "{}\n{}\n{}\n{canonical_headers}\n{signed}\n{}",
            request.method,
            request.path,
            query.join("&"),
            request.payload_sha256
        ),
        signed,
    )
}

/// A header value trimmed, with runs of spaces collapsed to one (SigV4's canonical form).
fn collapse_spaces(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC takes a key of any length: `new_from_slice` cannot fail for it.
    let mut mac = match HmacSha256::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC accepts keys of every length"),
    };
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// The SHA-256 of `bytes`.
pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Lower-case hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

/// Standard base64 with padding (RFC 4648), for `x-amz-checksum-sha256`.
pub(crate) fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// RFC 3986 percent-encoding of everything but the unreserved characters (and `/` unless
/// `slash` is set), upper-case hex: SigV4's `UriEncode`.
pub(crate) fn uri_encode(text: &str, slash: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'_' | b'.' | b'~')
            || (b == b'/' && !slash)
        {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// An object path encoded once, as S3 signs it (its slashes kept).
pub(crate) fn uri_encode_path(path: &str) -> String {
    uri_encode(path, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SHA-256 of the empty payload, hex.
    const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    /// The example key of AWS's S3 SigV4 documentation ("Examples: Signature Calculations").
    fn s3_example() -> Signer {
        Signer {
            credentials: Credentials::new(
                "AKIAIOSFODNN7EXAMPLE",
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            ),
            region: "us-east-1".into(),
            service: "s3",
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn signature(authorization: &str) -> &str {
        authorization
            .rsplit_once("Signature=")
            .map_or("", |(_, s)| s)
    }

    #[test]
    fn aws_s3_example_get_object_with_a_range() {
        let headers = headers(&[
            ("host", "examplebucket.s3.amazonaws.com"),
            ("range", "bytes=0-9"),
            ("x-amz-content-sha256", EMPTY_SHA256),
            ("x-amz-date", "20130524T000000Z"),
        ]);
        let request = Canonical {
            method: "GET",
            path: &uri_encode_path("/test.txt"),
            query: &[],
            headers: &headers,
            payload_sha256: EMPTY_SHA256,
        };
        let auth = s3_example().authorization(&request, "20130524T000000Z");
        assert_eq!(
            signature(&auth),
            "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
        assert!(
            auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "),
            "{auth}"
        );
    }

    #[test]
    fn aws_s3_example_put_object_with_an_encoded_key() {
        let payload = sha256(b"Welcome to Amazon S3.");
        let payload = hex(&payload);
        assert_eq!(
            payload,
            "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072"
        );
        let headers = headers(&[
            ("date", "Fri, 24 May 2013 00:00:00 GMT"),
            ("host", "examplebucket.s3.amazonaws.com"),
            ("x-amz-content-sha256", &payload),
            ("x-amz-date", "20130524T000000Z"),
            ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
        ]);
        let path = uri_encode_path("/test$file.text");
        assert_eq!(path, "/test%24file.text");
        let request = Canonical {
            method: "PUT",
            path: &path,
            query: &[],
            headers: &headers,
            payload_sha256: &payload,
        };
        assert_eq!(
            signature(&s3_example().authorization(&request, "20130524T000000Z")),
            "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"
        );
    }

    #[test]
    fn aws_s3_examples_with_query_strings() {
        let headers = headers(&[
            ("host", "examplebucket.s3.amazonaws.com"),
            ("x-amz-content-sha256", EMPTY_SHA256),
            ("x-amz-date", "20130524T000000Z"),
        ]);
        for (query, expected) in [
            (
                vec![("lifecycle".to_string(), String::new())],
                "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543",
            ),
            (
                // Given out of order: the canonical query is sorted.
                vec![
                    ("prefix".to_string(), "J".to_string()),
                    ("max-keys".to_string(), "2".to_string()),
                ],
                "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7",
            ),
        ] {
            let request = Canonical {
                method: "GET",
                path: "/",
                query: &query,
                headers: &headers,
                payload_sha256: EMPTY_SHA256,
            };
            assert_eq!(
                signature(&s3_example().authorization(&request, "20130524T000000Z")),
                expected,
                "{query:?}"
            );
        }
    }

    #[test]
    fn aws_test_suite_get_vanilla() {
        // The SigV4 test suite's `get-vanilla` (service "service", its own example key).
        let signer = Signer {
            credentials: Credentials::new(
                "AKIDEXAMPLE",
                "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            ),
            region: "us-east-1".into(),
            service: "service",
        };
        let headers = headers(&[
            ("host", "example.amazonaws.com"),
            ("x-amz-date", "20150830T123600Z"),
        ]);
        let request = Canonical {
            method: "GET",
            path: "/",
            query: &[],
            headers: &headers,
            payload_sha256: EMPTY_SHA256,
        };
        assert_eq!(
            signature(&signer.authorization(&request, "20150830T123600Z")),
            "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        );
    }

    #[test]
    fn encodings_follow_their_rfcs() {
        // RFC 4648's test vectors.
        for (input, expected) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), expected, "{input:?}");
        }
        assert_eq!(
            base64(&sha256(b"payload")),
            "I59Z7VXnN8dxR89VrQwbAwttfudIp0JpUvm4UtWpNeU=",
            "what the server echoed for this body"
        );
        assert_eq!(uri_encode("a b/c~d", true), "a%20b%2Fc~d");
        assert_eq!(uri_encode_path("/p/x y"), "/p/x%20y");
        assert_eq!(collapse_spaces("  a   b "), "a b");
        assert_eq!(hex(&[0, 15, 255]), "000fff");
    }

    #[test]
    fn credentials_never_print_the_secret() {
        let mut credentials = Credentials::new("AK", "very-secret");
        credentials.session_token = Some("token-secret".into());
        let shown = format!("{credentials:?}");
        assert!(
            !shown.contains("very-secret") && !shown.contains("token-secret"),
            "{shown}"
        );
    }
}
