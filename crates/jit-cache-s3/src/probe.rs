//! Whether the server honours conditional writes, probed once per process before its first
//! coordinating write (a lease or a manifest update): a second create-only PUT of one object
//! must fail, and so must a PUT and a DELETE that name a version that is not there. A server
//! that ignores them would let two hosts hold one lease and lose manifest updates, so the tier
//! then refuses coordination (the cache warns once and stops writing; reads go on).

use crate::client::Condition;
use crate::objects::{Objects, Written};
use crate::records::{object_name, Space};
use jit_cache::{TierError, TierErrorKind};
use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;

/// What the probe found.
#[derive(Debug, Clone)]
enum Verdict {
    /// Create-only PUTs, `If-Match` PUTs and conditional DELETEs hold: leases and manifest
    /// updates are safe.
    Honoured,
    /// Coordinating writes are refused, for this reason (the kind of the error they return).
    Refused(TierErrorKind, String),
}

/// A version no object has (an ETag is a quoted hex digest).
const NO_VERSION: &str = "\"00000000000000000000000000000000\"";

/// Whether a process may coordinate through the server: the probe's verdict, once it has one.
#[derive(Debug, Default)]
pub(crate) struct Coordination {
    verdict: Mutex<Option<Verdict>>,
}

impl Coordination {
    /// Ok when coordinating writes to `objects` may go on; the probe's verdict as `op`'s error
    /// otherwise. A probe that failed (the server is down) is not remembered: the cache skips
    /// the tier.
    pub(crate) fn check(
        &self,
        objects: &Objects,
        op: &'static str,
        target: &str,
    ) -> Result<(), TierError> {
        let mut state = self.verdict.lock().unwrap_or_else(|p| p.into_inner());
        let verdict = match &*state {
            Some(verdict) => verdict.clone(),
            None => state.insert(probe(objects)?).clone(),
        };
        match verdict {
            Verdict::Honoured => Ok(()),
            Verdict::Refused(kind, message) => Err(TierError::new(op, target, kind, message)),
        }
    }
}

fn probe(objects: &Objects) -> Result<Verdict, TierError> {
    let op = "probe conditional writes";
    let name = object_name(&objects.prefix, Space::Probe, &unique_token());
    let body = b"jit-cache: a probe of conditional writes, removed at once\n";
    match objects.put(op, &name, body, Condition::Absent) {
        Ok(Written::Stored(_)) => {}
        Ok(Written::ConditionFailed) => {
            return Err(TierError::new(
                op,
                &name,
                TierErrorKind::Protocol,
                "a create-only PUT of a fresh name was refused as if it existed",
            ))
        }
        Err(e) if e.kind() == TierErrorKind::Denied => {
            return Ok(Verdict::Refused(
                TierErrorKind::Denied,
                format!(
                    "this identity may not write, so it takes no leases and uploads nothing ({e})"
                ),
            ))
        }
        Err(e) => return Err(e),
    }
    let mut ignored = Vec::new();
    if objects.put(op, &name, body, Condition::Absent)? != Written::ConditionFailed {
        ignored.push("`If-None-Match: *` replaced an existing object");
    }
    let wrong = Condition::Version(NO_VERSION.to_string());
    if objects.put(op, &name, body, wrong.clone())? != Written::ConditionFailed {
        ignored.push("`If-Match` with a wrong version replaced the object");
    }
    if objects.delete(op, &name, wrong)? {
        ignored.push("a DELETE with a wrong `If-Match` removed the object");
    }
    // Tidy up; a probe object left behind is harmless (and under its own prefix).
    let _ = objects.delete(op, &name, Condition::None);
    if ignored.is_empty() {
        return Ok(Verdict::Honoured);
    }
    Ok(Verdict::Refused(
        TierErrorKind::Denied,
        format!(
            "{} does not honour conditional writes ({}): no leases and no manifest updates \
             from this process, so hosts may compile a kernel more than once",
            objects.where_(),
            ignored.join("; ")
        ),
    ))
}

/// A name no other process picks: the pid, the time and a per-process random hasher's output.
pub(crate) fn unique_token() -> String {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    hasher.write_u128(now.as_nanos());
    hasher.write_u32(std::process::id());
    format!(
        "{}-{}-{:016x}",
        std::process::id(),
        now.as_millis(),
        hasher.finish()
    )
}
