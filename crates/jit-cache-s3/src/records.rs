//! The store's layout and its two small record formats: object names under the prefix
//! (blobs and manifests fanned out by their first two hex digits, so that no prefix is hot and
//! no listing huge), and the lease and failure records, which carry their expiry on the
//! server's clock because S3 has no per-object time to live.

/// The most bytes of a lease object read (a token and a number; anything longer is garbage).
pub(crate) const MAX_LEASE_BYTES: usize = 1024;

/// The most bytes of a failure record's header line.
pub(crate) const MAX_FAILURE_HEADER: usize = 64;

const LEASE_MAGIC: &str = "jit-cache-lease v1";
const FAILURE_MAGIC: &str = "jit-cache-failure v1";

/// What an object holds: the object's name is `<prefix>/<space>/...`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Space {
    Manifest,
    Blob,
    Failure,
    Lease,
    Probe,
}

impl Space {
    fn dir(self) -> &'static str {
        match self {
            Space::Manifest => "m",
            Space::Blob => "b",
            Space::Failure => "f",
            Space::Lease => "l",
            Space::Probe => "probe",
        }
    }

    /// Whether names are fanned out under their first two characters.
    fn fanned(self) -> bool {
        matches!(self, Space::Manifest | Space::Blob)
    }
}

/// The object name of `id` (a hex key or digest) in `space`.
pub(crate) fn object_name(prefix: &str, space: Space, id: &str) -> String {
    if space.fanned() {
        let fan = id.get(..2).unwrap_or("00");
        format!("{prefix}/{}/{fan}/{id}", space.dir())
    } else {
        format!("{prefix}/{}/{id}", space.dir())
    }
}

/// The listing prefix of a space (with its trailing slash).
pub(crate) fn space_prefix(prefix: &str, space: Space) -> String {
    format!("{prefix}/{}/", space.dir())
}

/// A compile lease as stored: its holder's token and its expiry on the server's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lease {
    pub(crate) token: String,
    pub(crate) expires_ms: u64,
}

impl Lease {
    pub(crate) fn encode(&self) -> Vec<u8> {
        format!("{LEASE_MAGIC} {} {}\n", self.expires_ms, self.token).into_bytes()
    }

    /// None for anything but a lease record (garbage, which any host may take over).
    pub(crate) fn decode(bytes: &[u8]) -> Option<Lease> {
        let text = std::str::from_utf8(bytes).ok()?.strip_suffix('\n')?;
        let rest = text.strip_prefix(LEASE_MAGIC)?.strip_prefix(' ')?;
        let (expires, token) = rest.split_once(' ')?;
        let expires_ms = expires.parse().ok()?;
        (!token.is_empty() && !token.contains(char::is_whitespace)).then(|| Lease {
            token: token.to_string(),
            expires_ms,
        })
    }

    /// Whether the lease still holds at the server's `now_ms`.
    pub(crate) fn live_at(&self, now_ms: u64) -> bool {
        now_ms <= self.expires_ms
    }
}

/// `Date` is whole seconds, rounded down, so an estimate of the server's clock drawn from it
/// (the last `Date` plus the time since) may be up to a second behind.
const DATE_GRANULARITY_MS: u64 = 1000;

/// The expiry to write for a lease of `ttl` taken when the server's clock is estimated at
/// `server_estimate_ms`: late enough that no reader, whose `Date` is never ahead of the server's
/// clock, judges it expired before `ttl` has passed.
pub(crate) fn lease_expiry(server_estimate_ms: u64, ttl: std::time::Duration) -> u64 {
    server_estimate_ms + DATE_GRANULARITY_MS + ttl.as_millis() as u64
}

/// A shared failure record with its expiry line in front.
pub(crate) fn encode_failure(record: &[u8], expires_ms: u64) -> Vec<u8> {
    let mut out = format!("{FAILURE_MAGIC} {expires_ms}\n").into_bytes();
    out.extend_from_slice(record);
    out
}

/// The expiry and the record of a stored failure; None when it is not one.
pub(crate) fn decode_failure(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let end = bytes
        .iter()
        .take(MAX_FAILURE_HEADER)
        .position(|&b| b == b'\n')?;
    let line = std::str::from_utf8(&bytes[..end]).ok()?;
    let expires = line
        .strip_prefix(FAILURE_MAGIC)?
        .strip_prefix(' ')?
        .parse()
        .ok()?;
    Some((expires, &bytes[end + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fan_out_blobs_and_manifests_only() {
        assert_eq!(object_name("p/q", Space::Blob, "abcdef"), "p/q/b/ab/abcdef");
        assert_eq!(object_name("p", Space::Manifest, "0f12"), "p/m/0f/0f12");
        assert_eq!(object_name("p", Space::Lease, "0f12"), "p/l/0f12");
        assert_eq!(object_name("p", Space::Failure, "0f12"), "p/f/0f12");
        assert_eq!(space_prefix("p", Space::Blob), "p/b/");
    }

    #[test]
    fn leases_round_trip_and_garbage_is_no_lease() {
        let lease = Lease {
            token: "host-a.123".into(),
            expires_ms: 1_700_000_000_123,
        };
        assert_eq!(Lease::decode(&lease.encode()), Some(lease.clone()));
        assert!(lease.live_at(1_700_000_000_123) && !lease.live_at(1_700_000_000_124));
        for garbage in [
            &b""[..],
            b"jit-cache-lease v1 12 \n",
            b"jit-cache-lease v1 x token\n",
            b"jit-cache-lease v2 12 token\n",
            b"jit-cache-lease v1 12 token",
            b"\xff\xfe",
        ] {
            assert_eq!(Lease::decode(garbage), None, "{garbage:?}");
        }
    }

    #[test]
    fn a_lease_holds_its_whole_ttl_however_far_behind_the_estimate_of_the_clock_is() {
        let ttl = std::time::Duration::from_millis(1500);
        let written_at = 1_796_168_412_700; // the server's true time when the lease was written
                                            // The writer's estimate: the last Date (rounded down to its second) plus the time since.
        for behind in [0, 1, 500, 700, 999] {
            let lease = Lease {
                token: "t".into(),
                expires_ms: lease_expiry(written_at - behind, ttl),
            };
            // A reader's Date is the server's time rounded down: never ahead of it.
            for reader_true in (written_at..=written_at + 1500).step_by(50) {
                let reader_date = reader_true / 1000 * 1000;
                assert!(
                    lease.live_at(reader_date),
                    "{behind} ms behind: judged expired at {} ms of a {ttl:?} lease",
                    reader_true - written_at
                );
            }
        }
    }

    #[test]
    fn failures_carry_their_expiry() {
        let stored = encode_failure(b"{\"record\":1}\n", 42);
        assert_eq!(
            decode_failure(&stored),
            Some((42, &b"{\"record\":1}\n"[..]))
        );
        assert_eq!(decode_failure(b"{\"record\":1}"), None);
        assert_eq!(decode_failure(b"jit-cache-failure v1 soon\n{}"), None);
    }
}
