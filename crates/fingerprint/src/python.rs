//! Interpreter identity: SOABI and version, asked of a given Python executable.

use std::path::Path;
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::digest::{Digest, Framed};
use crate::error::{Error, ErrorKind};

/// What a Python interpreter says about its ABI.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PythonIdentity {
    /// `sysconfig.get_config_var("SOABI")`, e.g. `cpython-311-x86_64-linux-gnu` (empty if None).
    pub soabi: String,
    /// `major.minor.micro`.
    pub version: String,
    /// `sys.implementation.name`, e.g. `cpython`.
    pub implementation: String,
    /// Framed digest of the three fields.
    pub digest: Digest,
}

/// The probe script: three lines, printed by the interpreter.
const PROBE: &str = "import sys, sysconfig\nprint(sysconfig.get_config_var('SOABI') or '')\nprint('%d.%d.%d' % sys.version_info[:3])\nprint(sys.implementation.name)\n";

/// Asks `python` for its SOABI, version and implementation: runs `python -I -c <probe>` directly
/// (argv only, no shell; `-I` keeps the user's site directory and the current directory out of
/// the import path).
pub fn python_identity(python: &Path) -> Result<PythonIdentity, Error> {
    let op = "probe python";
    let out = Command::new(python)
        .args(["-I", "-c", PROBE])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::io(op, python, e))?;
    let fail = |reason: String| Error::new(op, python, ErrorKind::PythonProbe { reason });
    if !out.status.success() {
        return Err(fail(format!(
            "exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    parse_probe(&String::from_utf8_lossy(&out.stdout)).map_err(fail)
}

/// Parses the probe's three output lines.
pub(crate) fn parse_probe(text: &str) -> Result<PythonIdentity, String> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let [soabi, version, implementation] = lines.as_slice() else {
        return Err(format!(
            "expected 3 lines (SOABI, version, implementation), got {}: {text:?}",
            lines.len()
        ));
    };
    if version.split('.').count() != 3 || !version.split('.').all(|p| p.parse::<u32>().is_ok()) {
        return Err(format!("bad version line {version:?}"));
    }
    if implementation.is_empty() {
        return Err("empty implementation name".to_owned());
    }
    let digest = Framed::new("python")
        .bytes(soabi.as_bytes())
        .bytes(version.as_bytes())
        .bytes(implementation.as_bytes())
        .finish();
    Ok(PythonIdentity {
        soabi: (*soabi).to_owned(),
        version: (*version).to_owned(),
        implementation: (*implementation).to_owned(),
        digest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_output_parses_and_garbage_does_not() {
        let id =
            parse_probe("cpython-311-x86_64-linux-gnu\n3.11.2\ncpython\n").expect("valid output");
        assert_eq!(
            id.soabi, "cpython-311-x86_64-linux-gnu",
            "SOABI is the first line"
        );
        assert_eq!(id.version, "3.11.2", "version is the second line");
        assert!(
            parse_probe("3.11.2\n").is_err(),
            "one line is not a probe answer"
        );
        assert!(
            parse_probe("x\n3.x.1\ncpython\n").is_err(),
            "a bad version is rejected"
        );
        let other = parse_probe("cpython-312-x86_64-linux-gnu\n3.12.1\ncpython\n").expect("valid");
        assert_ne!(
            id.digest, other.digest,
            "a different interpreter has a different identity"
        );
    }
}
