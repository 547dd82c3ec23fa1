//! The bucket's objects under the prefix, as every layer above reads and writes them: a bounded
//! read that keeps the version (ETag), a conditional write, a conditional delete and a listing,
//! each one request, each failure the cache's error kind.

use crate::client::{xml_element, xml_elements, Call, Client, Condition, Method, Status};
use crate::config::S3Config;
use jit_cache::{TierError, TierErrorKind};
use jit_cache_remote::Error;

/// The most bytes of one listing page read (1,000 keys of ~150 bytes of XML each).
const MAX_LISTING_BYTES: usize = 8 << 20;

/// The objects of one bucket under one prefix. Connects lazily: making one makes no request.
#[derive(Debug)]
pub(crate) struct Objects {
    pub(crate) client: Client,
    pub(crate) prefix: String,
    location: String,
}

/// What a bounded read found.
#[derive(Debug)]
pub(crate) enum Fetched {
    /// No object (or an empty one).
    Absent,
    /// The object's bytes and version.
    Value {
        bytes: Vec<u8>,
        etag: Option<String>,
    },
    /// An object longer than the limit, unread.
    TooLarge { etag: Option<String> },
}

/// What a conditional write did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Written {
    /// Stored; the new version.
    Stored(Option<String>),
    /// The condition did not hold: nothing changed.
    ConditionFailed,
}

impl Objects {
    /// The objects `config` names (checked now; no request is made until the first operation).
    pub(crate) fn open(config: &S3Config) -> Result<Objects, Error> {
        let (base, host) = config.base_and_host()?;
        let location = format!("{} at {base}", config.url());
        Ok(Objects {
            client: Client::new(config, base, host),
            prefix: config.prefix.clone(),
            location,
        })
    }

    /// `s3://bucket/prefix at <endpoint>`.
    pub(crate) fn where_(&self) -> &str {
        &self.location
    }

    /// Reads at most `limit` bytes of `name` (one more to tell "too large").
    pub(crate) fn fetch(
        &self,
        op: &'static str,
        name: &str,
        limit: usize,
    ) -> Result<Fetched, TierError> {
        let reply = self.client.send(op, name, &Call::get(name, limit))?;
        match reply.status {
            Status::NoSuchKey | Status::Empty => Ok(Fetched::Absent),
            Status::ConditionFailed => Err(unexpected(op, name, "a precondition failure")),
            Status::Done => {
                let etag = reply.etag.clone();
                match reply.bounded(op, name, limit) {
                    Ok(bytes) if bytes.is_empty() => Ok(Fetched::Absent),
                    Ok(bytes) => Ok(Fetched::Value { bytes, etag }),
                    Err(e) if e.kind() == TierErrorKind::TooLarge => Ok(Fetched::TooLarge { etag }),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Writes `body` to `name` if `condition` holds.
    pub(crate) fn put(
        &self,
        op: &'static str,
        name: &str,
        body: &[u8],
        condition: Condition,
    ) -> Result<Written, TierError> {
        let conditional = condition != Condition::None;
        let reply = self
            .client
            .send(op, name, &Call::put(name, body, condition))?;
        match reply.status {
            Status::Done => Ok(Written::Stored(reply.etag)),
            Status::ConditionFailed => Ok(Written::ConditionFailed),
            // `If-Match` on an object that is gone (AWS answers 404 where others say 412).
            Status::NoSuchKey if conditional => Ok(Written::ConditionFailed),
            Status::NoSuchKey | Status::Empty => Err(unexpected(op, name, "a 404 or 416 to a PUT")),
        }
    }

    /// Deletes `name` if `condition` holds; false when it did not (or nothing was there).
    pub(crate) fn delete(
        &self,
        op: &'static str,
        name: &str,
        condition: Condition,
    ) -> Result<bool, TierError> {
        let reply = self.client.send(op, name, &Call::delete(name, condition))?;
        Ok(reply.status == Status::Done)
    }

    /// Every object name under `prefix` (ListObjectsV2, page by page).
    pub(crate) fn list(&self, prefix: &str) -> Result<Vec<String>, TierError> {
        let op = "list objects";
        let mut names = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut query = vec![
                ("list-type".to_string(), "2".to_string()),
                ("prefix".to_string(), prefix.to_string()),
            ];
            if let Some(token) = &token {
                query.push(("continuation-token".to_string(), token.clone()));
            }
            let call = Call {
                method: Method::Get,
                key: "",
                query,
                condition: Condition::None,
                body: &[],
                limit: MAX_LISTING_BYTES,
                ranged: false,
                #[cfg(feature = "test-server")]
                wire: None,
            };
            let reply = self.client.send(op, prefix, &call)?;
            if reply.status != Status::Done {
                return Err(unexpected(op, prefix, "no listing"));
            }
            let page = reply.bounded(op, prefix, MAX_LISTING_BYTES)?;
            names.extend(xml_elements(&page, "Key"));
            let truncated = xml_element(&page, "IsTruncated").as_deref() == Some("true");
            token = xml_element(&page, "NextContinuationToken");
            if !truncated || token.is_none() {
                return Ok(names);
            }
        }
    }
}

/// A reply the protocol does not allow here.
pub(crate) fn unexpected(op: &'static str, target: &str, what: &str) -> TierError {
    TierError::new(
        op,
        target,
        TierErrorKind::Protocol,
        format!("the server answered with {what}, which S3 never does here"),
    )
}
