//! The [`RemoteTier`] on Redis: manifests replaced by a compare-and-set script, blobs set `NX`,
//! failures with a short expiry, leases taken `SET NX PX` with a token and renewed and released
//! by compare-and-* scripts, so that only their holder touches them.

use crate::client::RedisTier;
use jit_cache::{Expected, RemoteTier, TierError};
use std::time::Duration;

/// Replaces KEYS[1] with ARGV[3] if it is still ARGV[2] (ARGV[1] = '1'), absent (ARGV[1] = '0'),
/// or longer than ARGV[2] bytes (ARGV[1] = '2'); expiry ARGV[4] ms (0: none). Returns 1 when
/// replaced.
const REPLACE_SCRIPT: &str = r"
if ARGV[1] == '2' then
  if redis.call('STRLEN', KEYS[1]) <= tonumber(ARGV[2]) then return 0 end
else
  local cur = redis.call('GET', KEYS[1])
  if ARGV[1] == '0' then
    if cur then return 0 end
  elseif cur ~= ARGV[2] then
    return 0
  end
end
if ARGV[4] ~= '0' then
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
else
  redis.call('SET', KEYS[1], ARGV[3])
end
return 1
";

/// Extends KEYS[1] by ARGV[2] ms if it still holds token ARGV[1].
const RENEW_SCRIPT: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// Deletes KEYS[1] if it still holds token ARGV[1].
const RELEASE_SCRIPT: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

impl RemoteTier for RedisTier {
    fn location(&self) -> String {
        self.location.clone()
    }

    fn get_manifest(&self, key: &str, limit: usize) -> Result<Option<Vec<u8>>, TierError> {
        self.get_bounded("get manifest", &self.name('m', key), limit)
    }

    fn replace_manifest(
        &self,
        key: &str,
        expected: Expected<'_>,
        new: &[u8],
    ) -> Result<bool, TierError> {
        let name = self.name('m', key);
        let limit;
        let (mode, compared): (&str, &[u8]) = match expected {
            Expected::Value(bytes) => ("1", bytes),
            Expected::LongerThan(n) => {
                limit = n.to_string();
                ("2", limit.as_bytes())
            }
            Expected::Absent => ("0", b""),
        };
        let replaced: i64 = self.run("replace manifest", &name, |con| {
            redis::cmd("EVAL")
                .arg(REPLACE_SCRIPT)
                .arg(1)
                .arg(&name)
                .arg(mode)
                .arg(compared)
                .arg(new)
                .arg(self.ttl_ms())
                .query(con)
        })?;
        Ok(replaced == 1)
    }

    fn get_blob(&self, digest: &str, limit: usize) -> Result<Option<Vec<u8>>, TierError> {
        self.get_bounded("get blob", &self.name('b', digest), limit)
    }

    fn put_blob(&self, digest: &str, bytes: &[u8]) -> Result<(), TierError> {
        let name = self.name('b', digest);
        let ttl = self.ttl_ms();
        self.run("put blob", &name, |con| {
            let mut cmd = redis::cmd("SET");
            cmd.arg(&name).arg(bytes).arg("NX");
            if ttl > 0 {
                cmd.arg("PX").arg(ttl);
            }
            cmd.query::<Option<String>>(con)
        })?;
        Ok(())
    }

    fn repair_blob(&self, digest: &str, bytes: &[u8]) -> Result<(), TierError> {
        let name = self.name('b', digest);
        let ttl = self.ttl_ms();
        self.run("repair blob", &name, |con| {
            let mut cmd = redis::cmd("SET");
            cmd.arg(&name).arg(bytes);
            if ttl > 0 {
                cmd.arg("PX").arg(ttl);
            }
            cmd.query::<Option<String>>(con)
        })?;
        Ok(())
    }

    fn get_failure(&self, key: &str, limit: usize) -> Result<Option<Vec<u8>>, TierError> {
        self.get_bounded("get failure", &self.name('f', key), limit)
    }

    fn put_failure(&self, key: &str, record: &[u8], ttl: Duration) -> Result<(), TierError> {
        let name = self.name('f', key);
        self.run("put failure", &name, |con| {
            redis::cmd("SET")
                .arg(&name)
                .arg(record)
                .arg("PX")
                .arg(ttl.as_millis().max(1) as u64)
                .query::<Option<String>>(con)
        })?;
        Ok(())
    }

    fn acquire_lease(&self, key: &str, token: &str, ttl: Duration) -> Result<bool, TierError> {
        let name = self.name('l', key);
        let set: Option<String> = self.run("acquire lease", &name, |con| {
            redis::cmd("SET")
                .arg(&name)
                .arg(token)
                .arg("NX")
                .arg("PX")
                .arg(ttl.as_millis().max(1) as u64)
                .query(con)
        })?;
        Ok(set.is_some())
    }

    fn lease_held(&self, key: &str) -> Result<bool, TierError> {
        let name = self.name('l', key);
        self.run("look at lease", &name, |con| {
            redis::cmd("EXISTS").arg(&name).query(con)
        })
    }

    fn renew_lease(&self, key: &str, token: &str, ttl: Duration) -> Result<bool, TierError> {
        let name = self.name('l', key);
        let renewed: i64 = self.run("renew lease", &name, |con| {
            redis::cmd("EVAL")
                .arg(RENEW_SCRIPT)
                .arg(1)
                .arg(&name)
                .arg(token)
                .arg(ttl.as_millis().max(1) as u64)
                .query(con)
        })?;
        Ok(renewed == 1)
    }

    fn release_lease(&self, key: &str, token: &str) -> Result<(), TierError> {
        let name = self.name('l', key);
        self.run("release lease", &name, |con| {
            redis::cmd("EVAL")
                .arg(RELEASE_SCRIPT)
                .arg(1)
                .arg(&name)
                .arg(token)
                .query::<i64>(con)
        })?;
        Ok(())
    }

    fn health(&self) -> Result<(), TierError> {
        self.run("health", &self.location, |con| {
            redis::cmd("PING").query::<String>(con)
        })?;
        Ok(())
    }
}
