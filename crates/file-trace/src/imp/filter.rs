//! The seccomp filter: classic BPF written by hand, small enough to read whole.
//!
//! Layout (`k` is the native `AUDIT_ARCH_*` value):
//!
//! ```text
//!   ld  [arch]          ; a foreign-ABI call (i386 through int 0x80, arm32) is killed
//!   jeq k, +1, +0
//!   ret KILL_PROCESS
//!   ld  [nr]
//!   jge 0x40000000 -> x32         (x86_64 only: the x32 ABI)
//!   jeq nr_1 -> target_1          (one per traced call)
//!   ...
//!   ret ALLOW
//! empty_path(k): ld [args[k]]; jset AT_EMPTY_PATH -> allow, else -> notify
//! allow:  ret ALLOW
//! notify: ret USER_NOTIF
//! kill:   ret KILL_PROCESS
//! deny:   ret ERRNO | ENOSYS
//! x32:    jge 0x80000000 -> allow, else -> kill
//! ```
//!
//! The x32 check lets "negative" numbers through (`syscall(-1)`, which some programs make to
//! probe): they name no call, and the kernel fails them with `ENOSYS`.
//!
//! A call not in the table is decided by its number alone, so the kernel's seccomp action cache
//! (Linux 5.11+) allows it without running the filter at all: the untraced hot path (`read`,
//! `write`, `mmap`, ...) costs nothing.

use crate::imp::arch::{self, Rule};
use libc::sock_filter;

/// `offsetof(struct seccomp_data, nr)`.
const OFFSET_NR: u32 = 0;
/// `offsetof(struct seccomp_data, arch)`.
const OFFSET_ARCH: u32 = 4;
/// `offsetof(struct seccomp_data, args)`; each argument is 8 bytes, low word first on the
/// little-endian architectures this crate supports.
const OFFSET_ARGS: u32 = 16;

const BPF_LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const BPF_JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const BPF_JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const BPF_JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const BPF_RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

/// A compiled filter, kept in memory allocated before `fork` so the child can install it without
/// allocating.
#[derive(Debug)]
pub(crate) struct Program {
    instructions: Vec<sock_filter>,
}

/// Where a jump goes, before instruction indexes are known.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Next,
    Allow,
    Notify,
    Kill,
    Deny(u16),
    EmptyPathCheck(u8),
    X32Check,
}

/// Numbers from here up are "negative": no call, `ENOSYS` from the kernel.
const NEGATIVE: u32 = 0x8000_0000;

enum Insn {
    Load(u32),
    Jump {
        code: u16,
        k: u32,
        yes: Target,
        no: Target,
    },
    Ret(u32),
}

impl Program {
    /// The filter for this architecture.
    pub(crate) fn build() -> Program {
        let mut head = vec![
            Insn::Load(OFFSET_ARCH),
            Insn::Jump {
                code: BPF_JEQ_K,
                k: arch::NATIVE_ARCH,
                yes: Target::Next,
                no: Target::Kill,
            },
            Insn::Load(OFFSET_NR),
        ];
        if let Some(bit) = arch::X32_SYSCALL_BIT {
            head.push(Insn::Jump {
                code: BPF_JGE_K,
                k: bit,
                yes: Target::X32Check,
                no: Target::Next,
            });
        }
        let mut checks: Vec<u8> = Vec::new();
        let mut denials: Vec<u16> = Vec::new();
        for entry in arch::entries() {
            let target = match entry.call.rule() {
                Rule::Notify => Target::Notify,
                Rule::NotifyUnlessEmptyPath { flags_arg } => {
                    if !checks.contains(&flags_arg) {
                        checks.push(flags_arg);
                    }
                    Target::EmptyPathCheck(flags_arg)
                }
                Rule::Deny { errno } => {
                    if !denials.contains(&errno) {
                        denials.push(errno);
                    }
                    Target::Deny(errno)
                }
            };
            head.push(Insn::Jump {
                code: BPF_JEQ_K,
                // Call numbers are small non-negative integers; the filter compares 32 bits.
                k: entry.nr as u32,
                yes: target,
                no: Target::Next,
            });
        }
        head.push(Insn::Ret(libc::SECCOMP_RET_ALLOW));

        // The tail: each label's instructions, then their indexes.
        let mut labels: Vec<(Target, usize)> = Vec::new();
        let mut tail: Vec<Insn> = Vec::new();
        let base = head.len();
        if arch::X32_SYSCALL_BIT.is_some() {
            labels.push((Target::X32Check, base + tail.len()));
            tail.push(Insn::Jump {
                code: BPF_JGE_K,
                k: NEGATIVE,
                yes: Target::Allow,
                no: Target::Kill,
            });
        }
        for &arg in &checks {
            labels.push((Target::EmptyPathCheck(arg), base + tail.len()));
            tail.push(Insn::Load(OFFSET_ARGS + 8 * u32::from(arg)));
            tail.push(Insn::Jump {
                code: BPF_JSET_K,
                k: libc::AT_EMPTY_PATH as u32,
                yes: Target::Allow,
                no: Target::Notify,
            });
        }
        labels.push((Target::Allow, base + tail.len()));
        tail.push(Insn::Ret(libc::SECCOMP_RET_ALLOW));
        labels.push((Target::Notify, base + tail.len()));
        tail.push(Insn::Ret(libc::SECCOMP_RET_USER_NOTIF));
        labels.push((Target::Kill, base + tail.len()));
        tail.push(Insn::Ret(libc::SECCOMP_RET_KILL_PROCESS));
        for &errno in &denials {
            labels.push((Target::Deny(errno), base + tail.len()));
            tail.push(Insn::Ret(libc::SECCOMP_RET_ERRNO | u32::from(errno)));
        }

        let index_of = |target: Target, at: usize| -> u8 {
            let to = match target {
                Target::Next => at + 1,
                other => labels
                    .iter()
                    .find(|(label, _)| *label == other)
                    .map(|&(_, index)| index)
                    .expect("every jump target has a label"),
            };
            // A classic BPF jump is relative to the next instruction and at most 255 forward.
            u8::try_from(to - (at + 1)).expect("the filter's jumps fit in 8 bits")
        };
        let instructions = head
            .iter()
            .chain(tail.iter())
            .enumerate()
            .map(|(at, insn)| match *insn {
                Insn::Load(offset) => sock_filter {
                    code: BPF_LD_W_ABS,
                    jt: 0,
                    jf: 0,
                    k: offset,
                },
                Insn::Jump { code, k, yes, no } => sock_filter {
                    code,
                    jt: index_of(yes, at),
                    jf: index_of(no, at),
                    k,
                },
                Insn::Ret(k) => sock_filter {
                    code: BPF_RET_K,
                    jt: 0,
                    jf: 0,
                    k,
                },
            })
            .collect();
        Program { instructions }
    }

    /// The `sock_fprog` the `seccomp(2)` call takes, pointing into this program. Builds it on
    /// the stack: callable after `fork`.
    pub(crate) fn fprog(&self) -> libc::sock_fprog {
        libc::sock_fprog {
            // At most a few hundred instructions (the table is fixed), far below BPF_MAXINSNS.
            len: self.instructions.len() as u16,
            filter: self.instructions.as_ptr().cast_mut(),
        }
    }

    #[cfg(test)]
    pub(crate) fn instructions(&self) -> &[sock_filter] {
        &self.instructions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a classic BPF program over a `seccomp_data` as the kernel would (only the opcodes
    /// `Program::build` emits).
    fn run(program: &Program, nr: u32, arch_value: u32, args: [u64; 6]) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&nr.to_le_bytes());
        data[4..8].copy_from_slice(&arch_value.to_le_bytes());
        for (i, arg) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&arg.to_le_bytes());
        }
        let insns = program.instructions();
        let mut pc = 0usize;
        let mut acc = 0u32;
        loop {
            let insn = insns[pc];
            pc += 1;
            match insn.code {
                BPF_LD_W_ABS => {
                    let at = insn.k as usize;
                    acc = u32::from_le_bytes(data[at..at + 4].try_into().expect("4 bytes"));
                }
                BPF_JEQ_K | BPF_JGE_K | BPF_JSET_K => {
                    let taken = match insn.code {
                        BPF_JEQ_K => acc == insn.k,
                        BPF_JGE_K => acc >= insn.k,
                        _ => acc & insn.k != 0,
                    };
                    pc += usize::from(if taken { insn.jt } else { insn.jf });
                }
                BPF_RET_K => return insn.k,
                other => panic!("opcode {other:#x} is not one the builder emits"),
            }
        }
    }

    fn nr(sys: libc::c_long) -> u32 {
        sys as u32
    }

    #[test]
    fn traced_calls_notify_and_others_are_allowed() {
        let program = Program::build();
        let native = arch::NATIVE_ARCH;
        for entry in arch::entries() {
            let verdict = run(&program, nr(entry.nr), native, [0; 6]);
            let expected = match entry.call.rule() {
                Rule::Notify | Rule::NotifyUnlessEmptyPath { .. } => libc::SECCOMP_RET_USER_NOTIF,
                Rule::Deny { errno } => libc::SECCOMP_RET_ERRNO | u32::from(errno),
            };
            assert_eq!(verdict, expected, "{} with no flags", entry.name);
        }
        for sys in [
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_mmap,
            libc::SYS_close,
        ] {
            assert_eq!(
                run(&program, nr(sys), native, [0; 6]),
                libc::SECCOMP_RET_ALLOW,
                "call {sys} is not traced"
            );
        }
    }

    #[test]
    fn fstat_through_at_empty_path_is_allowed_unnotified() {
        let program = Program::build();
        let native = arch::NATIVE_ARCH;
        let empty = libc::AT_EMPTY_PATH as u64;
        let nofollow = libc::AT_SYMLINK_NOFOLLOW as u64;
        let fstatat = nr(libc::SYS_newfstatat);
        assert_eq!(
            run(&program, fstatat, native, [3, 0, 0, empty, 0, 0]),
            libc::SECCOMP_RET_ALLOW,
            "newfstatat(fd, \"\", AT_EMPTY_PATH) is glibc's fstat"
        );
        assert_eq!(
            run(&program, fstatat, native, [3, 0, 0, nofollow, 0, 0]),
            libc::SECCOMP_RET_USER_NOTIF,
            "newfstatat with a path is a lookup"
        );
        let statx = nr(libc::SYS_statx);
        assert_eq!(
            run(&program, statx, native, [3, 0, empty, 0, 0, 0]),
            libc::SECCOMP_RET_ALLOW,
            "statx's flags are argument 2"
        );
        assert_eq!(
            run(&program, statx, native, [3, 0, 0, empty, 0, 0]),
            libc::SECCOMP_RET_USER_NOTIF,
            "statx's argument 3 is the mask, not flags"
        );
    }

    #[test]
    fn io_uring_setup_fails_with_enosys() {
        let program = Program::build();
        assert_eq!(
            run(
                &program,
                nr(libc::SYS_io_uring_setup),
                arch::NATIVE_ARCH,
                [0; 6]
            ),
            libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        );
    }

    #[test]
    fn a_foreign_architecture_is_killed() {
        let program = Program::build();
        const AUDIT_ARCH_I386: u32 = 0x4000_0003;
        const AUDIT_ARCH_ARM: u32 = 0x4000_0028;
        for foreign in [AUDIT_ARCH_I386, AUDIT_ARCH_ARM] {
            assert_eq!(
                run(&program, nr(libc::SYS_read), foreign, [0; 6]),
                libc::SECCOMP_RET_KILL_PROCESS,
                "arch {foreign:#x} even for an untraced number"
            );
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn an_x32_call_is_killed() {
        let program = Program::build();
        assert_eq!(
            run(
                &program,
                nr(libc::SYS_openat) | 0x4000_0000,
                arch::NATIVE_ARCH,
                [0; 6]
            ),
            libc::SECCOMP_RET_KILL_PROCESS,
        );
        assert_eq!(
            run(&program, u32::MAX, arch::NATIVE_ARCH, [0; 6]),
            libc::SECCOMP_RET_ALLOW,
            "syscall(-1) names no call: the kernel answers ENOSYS"
        );
    }
}
