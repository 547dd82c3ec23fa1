//! A fake nvcc that preprocesses with `g++ -E -P`: GCC's real include rules decide what is read,
//! and the "artifact" is the preprocessed text, so it shows exactly which header contents a
//! compile saw. Used where a test needs control of timing or signals (and by the property test,
//! for speed); everything else runs the real nvcc.
//!
//! Control files in `<dir>/ctl/`: `hold-before` / `hold-after` pause a compile before or after it
//! preprocesses (it writes a line to the FIFO `started` and waits for one on `go`), `kill` makes
//! it SIGKILL itself, `hang` makes it hang (for timeouts), `full` holds a path prefix under which
//! writing the output "fails" with ENOSPC, `full-de` makes a compile whose output's filesystem
//! has less than 64 KiB free fail with a German ENOSPC message, as a German GCC would. `log` gets one line per compile.

use jit_cache::{Cache, CacheOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

const SCRIPT: &str = r#"#!/usr/bin/env python3
import os, sys, subprocess, signal, time
CTL = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'ctl')
def ctl(name): return os.path.join(CTL, name)
args = sys.argv[1:]
if '-dryrun' in args: sys.exit(1)
if '--version' in args or '--help' in args:
    print('nvcc: NVIDIA (R) Cuda compiler driver (fake: g++ -E)')
    print('Cuda compilation tools, release 13.5, V13.5.0')
    sys.exit(0)
gxx, pre, out, src = 'g++', [], None, None
i = 0
while i < len(args):
    a = args[i]; i += 1
    if a == '-o': out = args[i]; i += 1
    elif a in ('-ccbin', '--compiler-bindir'): gxx = args[i]; i += 1
    elif a.startswith('-ccbin='): gxx = a.split('=', 1)[1]
    elif a.startswith('-isystem=') or a.startswith('-include='):
        name, value = a.split('=', 1); pre += [name, value]
    elif a in ('-I', '-isystem', '-include', '-MF'): pre += [a, args[i]]; i += 1
    elif a.startswith('-Xcompiler='): pre += a.split('=', 1)[1].split(',')
    elif a == '-Xcompiler': pre += args[i].split(','); i += 1
    elif a == '-MD' or a.startswith('-I') or a.startswith('-D') or a.startswith('-U') or a.startswith('-isystem'): pre.append(a)
    elif a.startswith('-'): pass
    else: src = a
with open(ctl('log'), 'a') as f: f.write(f'{os.getpid()} {src}\n')
if os.path.exists(ctl('kill')): os.kill(os.getpid(), signal.SIGKILL)
if os.path.exists(ctl('hang')): time.sleep(3600)
if os.path.exists(ctl('full')) and out.startswith(open(ctl('full')).read().strip()):
    sys.stderr.write(f'fatal error: closing dependency file {out}.d: No space left on device\n')
    sys.exit(1)
if os.path.exists(ctl('full-de')):
    st = os.statvfs(os.path.dirname(os.path.abspath(out)))
    if st.f_bavail * st.f_frsize < (64 << 10):
        # A German GCC writing its output on a full disk.
        sys.stderr.write(f'cc1plus: schwerwiegender Fehler: {out}: Auf dem Gerät ist kein Speicherplatz mehr verfügbar\n')
        sys.exit(1)
def pause(point):
    if os.path.exists(ctl('hold-' + point)):
        with open(ctl('started'), 'w') as f: f.write(point + '\n')
        with open(ctl('go')) as f: f.read()
pause('before')
r = subprocess.run([gxx, '-E', '-P', '-x', 'c++'] + pre + [src, '-o', out])
if r.returncode: sys.exit(r.returncode)
pause('after')
"#;

/// The fake compiler and its control directory.
pub struct Gxx {
    pub nvcc: PathBuf,
    pub ctl: PathBuf,
}

impl Gxx {
    pub fn new(dir: &Path) -> Gxx {
        let root = dir.join("fake-toolkit");
        let bin = root.join("bin");
        let ctl = root.join("ctl");
        for d in [&bin, &ctl, &root.join("include")] {
            std::fs::create_dir_all(d).expect("create fake toolkit dirs");
        }
        let nvcc = bin.join("nvcc");
        crate::support::write_executable(&nvcc, SCRIPT);
        for fifo in ["started", "go"] {
            let status = Command::new("mkfifo")
                .arg(ctl.join(fifo))
                .status()
                .expect("run mkfifo");
            assert!(status.success(), "mkfifo {fifo}");
        }
        Gxx { nvcc, ctl }
    }

    /// A cache in `root` that compiles with this fake.
    pub fn cache(&self, root: &Path) -> Cache {
        Cache::open_with(
            root,
            CacheOptions::default()
                .nvcc(nvcc::Nvcc::at(&self.nvcc).expect("fake nvcc"))
                // Its control files and log are the test's, not the compile's answer.
                .ignore_paths_under(&self.ctl),
        )
        .expect("open cache")
    }

    /// Creates (or removes) a control file.
    pub fn set(&self, name: &str, on: bool) {
        let path = self.ctl.join(name);
        if on {
            std::fs::write(&path, "").expect("write control file");
        } else {
            let _ = std::fs::remove_file(&path);
        }
    }

    /// A compile writing to a full filesystem fails as a German GCC does.
    pub fn set_full_in_german(&self) {
        std::fs::write(self.ctl.join("full-de"), b"").expect("write control file");
    }

    pub fn set_full(&self, prefix: &Path) {
        std::fs::write(self.ctl.join("full"), prefix.as_os_str().as_encoded_bytes())
            .expect("write control file");
    }

    /// Blocks until a held compile reached its pause point; returns the point.
    pub fn wait_started(&self) -> String {
        let mut text = String::new();
        std::fs::File::open(self.ctl.join("started"))
            .and_then(|mut f| f.read_to_string(&mut text))
            .expect("read the started FIFO");
        text.trim().to_string()
    }

    /// Lets the held compile go on.
    pub fn go(&self) {
        std::fs::OpenOptions::new()
            .write(true)
            .open(self.ctl.join("go"))
            .and_then(|mut f| f.write_all(b"go\n"))
            .expect("write the go FIFO");
    }

    /// Compiles counted so far.
    pub fn compiles(&self) -> usize {
        std::fs::read_to_string(self.ctl.join("log"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }
}

/// What a fresh, uncached compile of `source` gives with these search flags, run in `cwd`:
/// GCC's own preprocessing, independent of the cache. None when it fails.
pub fn oracle(cwd: &Path, source: &Path, search_flags: &[String]) -> Option<Vec<u8>> {
    let out = Command::new("g++")
        .current_dir(cwd)
        .args(["-E", "-P", "-x", "c++"])
        .args(search_flags)
        .arg(source)
        .arg("-o")
        .arg("-")
        .output()
        .expect("run g++ -E");
    out.status.success().then_some(out.stdout)
}
