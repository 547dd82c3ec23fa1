//! A test program for `file-trace`'s integration tests, not for users: performs exactly the file
//! operations its arguments name, each as one raw system call, so a test can compare a trace
//! with what was done.
//!
//! Arguments are a list of actions; `[` ... `]` groups actions for `thread` and `fork`:
//!
//! ```text
//! mark NAME               faccessat(AT_FDCWD, "/@mark/NAME")  (a marker the tests split on)
//! tid NAME                print "NAME <tid>"
//! open PATH | create PATH | open-nofollow PATH | open-path PATH
//! openat DIR REL          open DIR (O_DIRECTORY), then openat(dirfd, REL)
//! stat PATH | lstat PATH | access PATH | statx PATH | readlink PATH
//! chdir PATH | fchdir PATH | list DIR
//! mkdir P | rmdir P | unlink P | rename A B | exchange A B | symlink TARGET LINK | link A B
//! truncate P | chmod P | touch P
//! legacy-open PATH | legacy-stat PATH      (x86_64 only: the old calls)
//! spawn PROGRAM           posix_spawn (a vfork-like clone), wait
//! exec PROGRAM            execve; the remaining actions are not run
//! thread [ ... ]          run the actions in a new thread, join it
//! fork [ ... ]            run the actions in a forked child, wait for it
//! stat-loop N PATH        N stats of PATH (to time the cost of a traced call)
//! io-uring                print "io_uring_setup <errno>" (0 when it worked)
//! minus-one               print "minus-one <errno>" of syscall(-1)
//! ready-and-pause         print "ready", then wait forever
//! int80 | x32             (x86_64) a getpid through the i386 or x32 ABI
//! ```

use std::ffi::{CStr, CString};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;

fn main() {
    let args: Vec<CString> = std::env::args_os()
        .skip(1)
        .map(|arg| CString::new(arg.as_bytes()).expect("arguments have no NUL"))
        .collect();
    let actions = parse(&args);
    run(&actions);
}

enum Action<'a> {
    One(&'a str, Vec<&'a CStr>),
    Thread(Vec<Action<'a>>),
    Fork(Vec<Action<'a>>),
}

fn arity(word: &str) -> usize {
    match word {
        "io-uring" | "minus-one" | "ready-and-pause" | "int80" | "x32" => 0,
        "openat" | "rename" | "exchange" | "symlink" | "link" | "stat-loop" => 2,
        _ => 1,
    }
}

fn parse(args: &[CString]) -> Vec<Action<'_>> {
    let mut at = 0;
    let actions = parse_list(args, &mut at);
    assert_eq!(at, args.len(), "unbalanced ]");
    actions
}

fn parse_list<'a>(args: &'a [CString], at: &mut usize) -> Vec<Action<'a>> {
    let mut actions = Vec::new();
    while *at < args.len() {
        let word = args[*at].to_str().expect("action names are ASCII");
        *at += 1;
        match word {
            "]" => {
                *at -= 1;
                break;
            }
            "thread" | "fork" => {
                assert_eq!(args[*at].as_bytes(), b"[", "{word} takes [ ... ]");
                *at += 1;
                let inner = parse_list(args, at);
                assert_eq!(args[*at].as_bytes(), b"]", "{word} [ ... ] is closed");
                *at += 1;
                actions.push(if word == "thread" {
                    Action::Thread(inner)
                } else {
                    Action::Fork(inner)
                });
            }
            _ => {
                let n = arity(word);
                let operands = args[*at..*at + n].iter().map(CString::as_c_str).collect();
                *at += n;
                actions.push(Action::One(word, operands));
            }
        }
    }
    actions
}

fn run(actions: &[Action<'_>]) {
    for action in actions {
        match action {
            Action::One(word, operands) => one(word, operands),
            Action::Thread(inner) => std::thread::scope(|scope| {
                scope.spawn(|| run(inner));
            }),
            Action::Fork(inner) => {
                std::io::stdout().flush().expect("flush stdout");
                // SAFETY: the test program forks only while it is single-threaded at this
                // point (threads are joined before their action returns), so the child may run
                // ordinary Rust code.
                let pid = unsafe { libc::fork() };
                assert!(pid >= 0, "fork");
                if pid == 0 {
                    run(inner);
                    std::io::stdout().flush().expect("flush stdout");
                    // SAFETY: ends the child without running the parent's exit handlers twice.
                    unsafe { libc::_exit(0) };
                }
                let mut status = 0;
                // SAFETY: waits for the child just forked.
                unsafe { libc::waitpid(pid, &mut status, 0) };
            }
        }
    }
}

/// A raw system call; prints nothing, ignores the result (a test checks the trace).
macro_rules! sys {
    ($nr:expr $(, $arg:expr)*) => {
        // SAFETY: every argument is an integer or a pointer to a NUL-terminated string or
        // buffer that lives across the call.
        unsafe { libc::syscall($nr $(, $arg)*) }
    };
}

fn one(word: &str, operands: &[&CStr]) {
    let p = |i: usize| operands[i].as_ptr();
    let cwd = libc::AT_FDCWD;
    let mut stat_buf = [0u64; 64];
    let buf = stat_buf.as_mut_ptr();
    match word {
        "mark" => {
            let path = CString::new(format!("/@mark/{}", operands[0].to_str().expect("ASCII")))
                .expect("no NUL");
            sys!(libc::SYS_faccessat, cwd, path.as_ptr(), libc::F_OK);
        }
        "tid" => {
            let tid = sys!(libc::SYS_gettid);
            println!("{} {tid}", operands[0].to_str().expect("ASCII"));
            std::io::stdout().flush().expect("flush stdout");
        }
        "open" => close(sys!(
            libc::SYS_openat,
            cwd,
            p(0),
            libc::O_RDONLY | libc::O_CLOEXEC
        )),
        "create" => close(sys!(
            libc::SYS_openat,
            cwd,
            p(0),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
            0o644
        )),
        "open-nofollow" => close(sys!(
            libc::SYS_openat,
            cwd,
            p(0),
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC
        )),
        "open-path" => close(sys!(
            libc::SYS_openat,
            cwd,
            p(0),
            libc::O_PATH | libc::O_CLOEXEC
        )),
        "openat" => {
            let dir = sys!(
                libc::SYS_openat,
                cwd,
                p(0),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC
            );
            close(sys!(
                libc::SYS_openat,
                dir,
                p(1),
                libc::O_RDONLY | libc::O_CLOEXEC
            ));
            close(dir);
        }
        "stat" => {
            sys!(libc::SYS_newfstatat, cwd, p(0), buf, 0);
        }
        "stat-loop" => {
            let n: u64 = operands[0]
                .to_str()
                .ok()
                .and_then(|n| n.parse().ok())
                .expect("a count");
            for _ in 0..n {
                sys!(libc::SYS_newfstatat, cwd, p(1), buf, 0);
            }
        }
        "lstat" => {
            sys!(
                libc::SYS_newfstatat,
                cwd,
                p(0),
                buf,
                libc::AT_SYMLINK_NOFOLLOW
            );
        }
        "readlink" => {
            sys!(libc::SYS_readlinkat, cwd, p(0), buf, 512);
        }
        "statx" => {
            sys!(libc::SYS_statx, cwd, p(0), 0, libc::STATX_BASIC_STATS, buf);
        }
        "access" => {
            sys!(libc::SYS_faccessat, cwd, p(0), libc::R_OK);
        }
        "chdir" => {
            sys!(libc::SYS_chdir, p(0));
        }
        "fchdir" => {
            let dir = sys!(
                libc::SYS_openat,
                cwd,
                p(0),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC
            );
            sys!(libc::SYS_fchdir, dir);
            close(dir);
        }
        "list" => {
            let dir = sys!(
                libc::SYS_openat,
                cwd,
                p(0),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC
            );
            let mut entries = vec![0u8; 32 * 1024];
            while sys!(
                libc::SYS_getdents64,
                dir,
                entries.as_mut_ptr(),
                entries.len()
            ) > 0
            {}
            close(dir);
        }
        "mkdir" => {
            sys!(libc::SYS_mkdirat, cwd, p(0), 0o755);
        }
        "rmdir" => {
            sys!(libc::SYS_unlinkat, cwd, p(0), libc::AT_REMOVEDIR);
        }
        "unlink" => {
            sys!(libc::SYS_unlinkat, cwd, p(0), 0);
        }
        "rename" => {
            sys!(libc::SYS_renameat2, cwd, p(0), cwd, p(1), 0);
        }
        "exchange" => {
            sys!(
                libc::SYS_renameat2,
                cwd,
                p(0),
                cwd,
                p(1),
                libc::RENAME_EXCHANGE
            );
        }
        "symlink" => {
            sys!(libc::SYS_symlinkat, p(0), cwd, p(1));
        }
        "link" => {
            sys!(libc::SYS_linkat, cwd, p(0), cwd, p(1), 0);
        }
        "truncate" => {
            sys!(libc::SYS_truncate, p(0), 0);
        }
        "chmod" => {
            sys!(libc::SYS_fchmodat, cwd, p(0), 0o600);
        }
        "touch" => {
            sys!(
                libc::SYS_utimensat,
                cwd,
                p(0),
                std::ptr::null::<libc::timespec>(),
                0
            );
        }
        #[cfg(target_arch = "x86_64")]
        "legacy-open" => close(sys!(libc::SYS_open, p(0), libc::O_RDONLY | libc::O_CLOEXEC)),
        #[cfg(target_arch = "x86_64")]
        "legacy-stat" => {
            sys!(libc::SYS_stat, p(0), buf);
        }
        "spawn" => {
            let program = operands[0];
            let argv = [program.as_ptr().cast_mut(), std::ptr::null_mut()];
            let mut pid = 0;
            // SAFETY: posix_spawn reads the program path and a NULL-terminated argv that live
            // across the call; no file actions or attributes are passed.
            let rc = unsafe {
                libc::posix_spawn(
                    &mut pid,
                    program.as_ptr(),
                    std::ptr::null(),
                    std::ptr::null(),
                    argv.as_ptr(),
                    std::ptr::null(),
                )
            };
            if rc == 0 {
                let mut status = 0;
                // SAFETY: waits for the child just spawned.
                unsafe { libc::waitpid(pid, &mut status, 0) };
            }
        }
        "exec" => {
            let program = operands[0];
            let argv = [program.as_ptr(), std::ptr::null()];
            std::io::stdout().flush().expect("flush stdout");
            let env: [*const libc::c_char; 1] = [std::ptr::null()];
            sys!(
                libc::SYS_execve,
                program.as_ptr(),
                argv.as_ptr(),
                env.as_ptr()
            );
            std::process::exit(127);
        }
        "io-uring" => {
            let mut params = [0u8; 120];
            let fd = sys!(libc::SYS_io_uring_setup, 1, params.as_mut_ptr());
            let errno = if fd < 0 {
                std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
            } else {
                close(fd);
                0
            };
            println!("io_uring_setup {errno}");
        }
        "minus-one" => {
            sys!(-1 as libc::c_long);
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            println!("minus-one {errno}");
        }
        "ready-and-pause" => {
            println!("ready");
            std::io::stdout().flush().expect("flush stdout");
            loop {
                // SAFETY: pause only waits for a signal.
                unsafe { libc::pause() };
            }
        }
        #[cfg(target_arch = "x86_64")]
        "int80" => {
            let ret: i64;
            // SAFETY: the i386 getpid (20) through int 0x80 takes no arguments; the kernel
            // returns in eax and may clear r8-r11.
            unsafe {
                std::arch::asm!(
                    "int 0x80",
                    inlateout("rax") 20i64 => ret,
                    out("r8") _, out("r9") _, out("r10") _, out("r11") _,
                );
            }
            println!("int80 {ret}");
        }
        #[cfg(target_arch = "x86_64")]
        "x32" => {
            let ret = sys!(0x4000_0000 | libc::SYS_getpid);
            println!("x32 {ret}");
        }
        other => panic!("unknown action {other}"),
    }
}

fn close(fd: libc::c_long) {
    if fd >= 0 {
        // SAFETY: closes a descriptor this program opened.
        unsafe { libc::close(fd as libc::c_int) };
    }
}
