//! Where the tier is and who it is: `s3://bucket/prefix`, the endpoint, the region and the
//! credentials, from arguments or the standard `AWS_*` environment variables.

use crate::sigv4::Credentials;
use jit_cache_remote::Error;
use std::time::Duration;

/// The endpoint (`http://127.0.0.1:8333`); `AWS_ENDPOINT_URL_S3` is read first. Unset: AWS.
pub const ENDPOINT_ENV: &str = "AWS_ENDPOINT_URL";
/// The service-specific endpoint, read before [`ENDPOINT_ENV`].
pub const S3_ENDPOINT_ENV: &str = "AWS_ENDPOINT_URL_S3";
/// The region (`AWS_DEFAULT_REGION` is read next; default `us-east-1`).
pub const REGION_ENV: &str = "AWS_REGION";
/// The region's older variable.
pub const DEFAULT_REGION_ENV: &str = "AWS_DEFAULT_REGION";
/// The access key id.
pub const ACCESS_KEY_ENV: &str = "AWS_ACCESS_KEY_ID";
/// The secret key.
pub const SECRET_KEY_ENV: &str = "AWS_SECRET_ACCESS_KEY";
/// A temporary credential's session token.
pub const SESSION_TOKEN_ENV: &str = "AWS_SESSION_TOKEN";

/// The prefix of every object when the URL names none.
pub const DEFAULT_PREFIX: &str = "jit-cache";

/// How a bucket is named in a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Addressing {
    /// `http://endpoint/bucket/key`: what S3-compatible servers (SeaweedFS, MinIO, Garage)
    /// expect, and the default with an explicit endpoint.
    Path,
    /// `https://bucket.s3.region.amazonaws.com/key`: AWS's default.
    VirtualHosted,
}

/// An S3 tier's configuration.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct S3Config {
    /// The bucket (it must exist: a missing bucket is an error, never a miss).
    pub bucket: String,
    /// The prefix of every object, without slashes at either end.
    pub prefix: String,
    /// `http[s]://host[:port]`; None for AWS (`https://s3.<region>.amazonaws.com`).
    pub endpoint: Option<String>,
    /// The region signed into every request.
    pub region: String,
    /// Who signs.
    pub credentials: Credentials,
    /// Path-style or virtual-hosted requests.
    pub addressing: Addressing,
    /// The connection's timeout, and the whole first request's: a server that accepts and
    /// never answers (stopped) costs this once.
    pub connect_timeout: Duration,
    /// Each later request's timeout, from sending to the last byte of the reply.
    pub io_timeout: Duration,
}

impl S3Config {
    /// A configuration for `url` (`s3://bucket[/prefix]`) on AWS in `us-east-1`, with the default
    /// timeouts (connect 100 ms, I/O 1 s).
    ///
    /// # Errors
    /// When the URL is not `s3://bucket[/prefix]`.
    pub fn new(url: &str, credentials: Credentials) -> Result<S3Config, Error> {
        let (bucket, prefix) = parse_url(url)?;
        Ok(S3Config {
            bucket,
            prefix,
            endpoint: None,
            region: "us-east-1".into(),
            credentials,
            addressing: Addressing::VirtualHosted,
            connect_timeout: Duration::from_millis(100),
            io_timeout: Duration::from_secs(1),
        })
    }

    /// A configuration for `url` with the endpoint, region and credentials of the standard
    /// variables ([`S3_ENDPOINT_ENV`], [`ENDPOINT_ENV`], [`REGION_ENV`], [`DEFAULT_REGION_ENV`],
    /// [`ACCESS_KEY_ENV`], [`SECRET_KEY_ENV`], [`SESSION_TOKEN_ENV`]). No configuration file,
    /// profile or instance role is read.
    ///
    /// # Errors
    /// A malformed URL, or no access key or secret in the environment.
    pub fn from_env(url: &str) -> Result<S3Config, Error> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let required = |name: &'static str| {
            var(name).ok_or(Error::Setting {
                var: name,
                reason: "not set: the S3 tier reads its credentials from AWS_ACCESS_KEY_ID and \
                         AWS_SECRET_ACCESS_KEY (no configuration file or instance role)"
                    .into(),
            })
        };
        let mut credentials =
            Credentials::new(required(ACCESS_KEY_ENV)?, required(SECRET_KEY_ENV)?);
        credentials.session_token = var(SESSION_TOKEN_ENV);
        let mut config = S3Config::new(url, credentials)?;
        if let Some(region) = var(REGION_ENV).or_else(|| var(DEFAULT_REGION_ENV)) {
            config = config.region(region);
        }
        if let Some(endpoint) = var(S3_ENDPOINT_ENV).or_else(|| var(ENDPOINT_ENV)) {
            config = config.endpoint(endpoint);
        }
        Ok(config)
    }

    /// Sets an explicit endpoint, addressed path-style.
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> S3Config {
        self.endpoint = Some(endpoint.into());
        self.addressing = Addressing::Path;
        self
    }

    /// Sets the region.
    pub fn region(mut self, region: impl Into<String>) -> S3Config {
        self.region = region.into();
        self
    }

    /// Sets the addressing style.
    pub fn addressing(mut self, addressing: Addressing) -> S3Config {
        self.addressing = addressing;
        self
    }

    /// Sets the connect timeout (the first request's too) and the I/O timeout.
    pub fn timeouts(mut self, connect: Duration, io: Duration) -> S3Config {
        self.connect_timeout = connect;
        self.io_timeout = io;
        self
    }

    /// `s3://bucket/prefix`, for messages.
    pub fn url(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix)
    }

    /// The base URL (`scheme://authority`) and the `Host` header of every request.
    pub(crate) fn base_and_host(&self) -> Result<(String, String), Error> {
        // An endpoint may carry credentials (`AWS_ENDPOINT_URL`): messages show it redacted.
        let refuse = |url: &str, reason: &str| Error::Url {
            url: jit_cache::redact_url(url),
            reason: reason.to_string(),
        };
        let Some(endpoint) = &self.endpoint else {
            // AWS. A dotted bucket name cannot be a host name under AWS's certificate.
            let host = match self.addressing {
                Addressing::VirtualHosted if !self.bucket.contains('.') => {
                    format!("{}.s3.{}.amazonaws.com", self.bucket, self.region)
                }
                _ => format!("s3.{}.amazonaws.com", self.region),
            };
            if !cfg!(feature = "tls") {
                return Err(refuse(
                    &format!("https://{host}"),
                    "AWS needs https, and TLS is not built in: enable jit-cache-s3's `tls` \
                     feature, or set AWS_ENDPOINT_URL to an http:// endpoint",
                ));
            }
            return Ok((format!("https://{host}"), host));
        };
        let (scheme, rest) = endpoint
            .split_once("://")
            .ok_or_else(|| refuse(endpoint, "an endpoint is http://host[:port] or https://..."))?;
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.is_empty() || authority.contains(['/', '?', '#', '@', ' ']) {
            return Err(refuse(
                endpoint,
                "an endpoint is scheme://host[:port], without a path, query or user",
            ));
        }
        match scheme {
            "http" => {}
            "https" if cfg!(feature = "tls") => {}
            "https" => {
                return Err(refuse(
                    endpoint,
                    "TLS is not built in: enable jit-cache-s3's `tls` feature, or use http:// \
                     through a TLS tunnel",
                ))
            }
            _ => return Err(refuse(endpoint, "the scheme must be http or https")),
        }
        let host = match self.addressing {
            Addressing::VirtualHosted => format!("{}.{authority}", self.bucket),
            Addressing::Path => authority.to_string(),
        };
        Ok((format!("{scheme}://{host}"), host))
    }
}

/// `s3://bucket[/prefix]` as (bucket, prefix); the prefix defaults to [`DEFAULT_PREFIX`].
fn parse_url(url: &str) -> Result<(String, String), Error> {
    // The URL may carry credentials, which it is refused for: messages show it redacted.
    let refuse = |reason: &str| Error::Url {
        url: jit_cache::redact_url(url),
        reason: reason.to_string(),
    };
    let rest = url
        .strip_prefix("s3://")
        .ok_or_else(|| refuse("an S3 remote is s3://bucket[/prefix]"))?;
    if rest.contains(['?', '#', '@']) {
        return Err(refuse(
            "no query, fragment or credentials in the URL: they come from AWS_* variables",
        ));
    }
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let valid_bucket = (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
    if !valid_bucket {
        return Err(refuse(
            "a bucket name is 3 to 63 lower-case letters, digits, dots and hyphens",
        ));
    }
    let prefix = prefix.trim_matches('/');
    if prefix.split('/').any(|part| part == "." || part == "..")
        || prefix.contains("//")
        || prefix.bytes().any(|b| b.is_ascii_control())
    {
        return Err(refuse("the prefix must be plain path segments"));
    }
    let prefix = if prefix.is_empty() {
        DEFAULT_PREFIX
    } else {
        prefix
    };
    Ok((bucket.to_string(), prefix.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds() -> Credentials {
        Credentials::new("AK", "SK")
    }

    #[test]
    fn urls_name_a_bucket_and_a_prefix() {
        let config = S3Config::new("s3://kernels/fleet/a/", creds()).expect("valid");
        assert_eq!(
            (config.bucket.as_str(), config.prefix.as_str()),
            ("kernels", "fleet/a")
        );
        let config = S3Config::new("s3://kernels", creds()).expect("valid");
        assert_eq!(config.prefix, DEFAULT_PREFIX);
        assert_eq!(config.url(), "s3://kernels/jit-cache");
        for bad in [
            "redis://x",
            "s3://",
            "s3://Upper",
            "s3://ab",
            "s3://b_ucket/x",
            "s3://bucket/a/../b",
            "s3://bucket/p?x=1",
            "s3://user:pw@bucket",
        ] {
            assert!(S3Config::new(bad, creds()).is_err(), "{bad} is refused");
        }
    }

    /// Issue 31, item 11: credentials written into the URL or the endpoint were echoed into
    /// the tier's errors; the Redis tier's redaction (one, in `jit-cache`) now applies here.
    #[test]
    fn credentials_in_a_url_or_an_endpoint_never_reach_an_error() {
        for url in [
            "s3://reader:hunter2@bucket/p",
            "s3://bucket/p?X-Amz-Credential=hunter2",
        ] {
            let message = S3Config::new(url, creds())
                .expect_err("refused")
                .to_string();
            assert!(!message.contains("hunter2"), "{message}");
        }
        for endpoint in [
            "http://reader:hunter2@127.0.0.1:8333",
            "http://127.0.0.1:8333/?token=hunter2",
            "ftp://reader:hunter2@host",
        ] {
            let message = S3Config::new("s3://bucket/p", creds())
                .expect("valid")
                .endpoint(endpoint)
                .base_and_host()
                .expect_err("refused")
                .to_string();
            assert!(!message.contains("hunter2"), "{endpoint}: {message}");
        }
    }

    #[test]
    fn endpoints_choose_the_host_and_the_addressing() {
        let config = S3Config::new("s3://kernels/p", creds())
            .expect("valid")
            .endpoint("http://127.0.0.1:8333/");
        assert_eq!(
            config.base_and_host().expect("valid"),
            (
                "http://127.0.0.1:8333".to_string(),
                "127.0.0.1:8333".to_string()
            )
        );
        let virtual_hosted = config.clone().addressing(Addressing::VirtualHosted);
        assert_eq!(
            virtual_hosted.base_and_host().expect("valid").1,
            "kernels.127.0.0.1:8333"
        );
        for bad in ["127.0.0.1:8333", "ftp://h", "http://h/path", "http://u@h"] {
            let config = config.clone().endpoint(bad);
            assert!(config.base_and_host().is_err(), "{bad} is refused");
        }
        let aws = S3Config::new("s3://kernels/p", creds())
            .expect("valid")
            .region("eu-west-1");
        if cfg!(feature = "tls") {
            assert_eq!(
                aws.base_and_host().expect("AWS").1,
                "kernels.s3.eu-west-1.amazonaws.com"
            );
        } else {
            let refused = aws.base_and_host();
            assert!(
                matches!(&refused, Err(Error::Url { reason, .. }) if reason.contains("tls")),
                "{refused:?}"
            );
        }
    }
}
