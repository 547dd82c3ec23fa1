//! Reading a tracee's arguments out of its memory with `process_vm_readv`.

use crate::trace::Errno;

/// `PATH_MAX`: the kernel copies at most this many bytes of a path, NUL included.
pub(crate) const PATH_MAX: usize = libc::PATH_MAX as usize;

/// What a string read found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Text<'a> {
    /// The bytes before the terminating NUL.
    Found(&'a [u8]),
    /// No NUL within `PATH_MAX` bytes (the kernel fails with `ENAMETOOLONG`), or the string runs
    /// into unmapped memory, or the pointer itself is bad (`EFAULT`): the kernel looks nothing
    /// up.
    Invalid,
}

/// Reads from one task's memory into a reusable buffer.
pub(crate) struct Reader {
    buffer: Vec<u8>,
    page_size: usize,
}

impl Reader {
    pub(crate) fn new() -> Reader {
        Reader {
            buffer: vec![0; PATH_MAX],
            page_size: rustix::param::page_size(),
        }
    }

    /// The NUL-terminated string at `addr` in task `pid`.
    ///
    /// Reads to the end of `addr`'s page first, and the next page only if the string goes on:
    /// most paths end well before their page does, and a read past the string would touch (and
    /// maybe fault in) tracee memory the call never uses.
    ///
    /// # Errors
    /// `ESRCH` when the task is gone, `EPERM` when its memory may not be read.
    pub(crate) fn string(&mut self, pid: u32, addr: u64) -> Result<Text<'_>, Errno> {
        if addr == 0 {
            return Ok(Text::Invalid);
        }
        let page = self.page_size as u64;
        let first = ((page - addr % page) as usize).min(PATH_MAX);
        let mut read = self.read_into(pid, addr, 0, first)?;
        if read == first && first < PATH_MAX && memchr_nul(&self.buffer[..read]).is_none() {
            read += self.read_into(pid, addr + first as u64, first, PATH_MAX - first)?;
        }
        let bytes = &self.buffer[..read];
        Ok(match memchr_nul(bytes) {
            Some(end) => Text::Found(&bytes[..end]),
            None => Text::Invalid,
        })
    }

    /// Exactly `len` bytes at `addr` (at most `PATH_MAX`); `None` when they are not all mapped.
    pub(crate) fn bytes(
        &mut self,
        pid: u32,
        addr: u64,
        len: usize,
    ) -> Result<Option<&[u8]>, Errno> {
        let len = len.min(PATH_MAX);
        if addr == 0 {
            return Ok(None);
        }
        let page = self.page_size as u64;
        let first = ((page - addr % page) as usize).min(len);
        let mut read = self.read_into(pid, addr, 0, first)?;
        if read == first && first < len {
            read += self.read_into(pid, addr + first as u64, first, len - first)?;
        }
        Ok((read == len).then(|| &self.buffer[..len]))
    }

    /// Reads `len` bytes at `addr` (within one page, or at most the rest of the buffer) into
    /// the buffer at `at`: how many arrived, 0 for memory that is not mapped (`EFAULT`).
    fn read_into(&mut self, pid: u32, addr: u64, at: usize, len: usize) -> Result<usize, Errno> {
        let local = libc::iovec {
            iov_base: self.buffer[at..at + len].as_mut_ptr().cast(),
            iov_len: len,
        };
        let remote = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: the local iovec covers `len` bytes of our own buffer from `at` (the slice
        // index above checked the bounds); the remote one names the tracee's memory, which the
        // kernel checks.
        let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        if n >= 0 {
            return Ok(n as usize);
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EFAULT) => Ok(0),
            other => Err(Errno(other.unwrap_or(0))),
        }
    }
}

fn memchr_nul(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two pages: the first readable, the second not.
    struct Guarded {
        base: *mut u8,
        page: usize,
    }

    impl Guarded {
        fn new() -> Guarded {
            let page = rustix::param::page_size();
            // SAFETY: an anonymous private mapping of two pages; no existing memory is touched.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    2 * page,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(base, libc::MAP_FAILED, "map two pages");
            // SAFETY: the second page belongs to the mapping just made.
            let rc = unsafe {
                libc::mprotect(base.cast::<u8>().add(page).cast(), page, libc::PROT_NONE)
            };
            assert_eq!(rc, 0, "make the second page inaccessible");
            Guarded {
                base: base.cast(),
                page,
            }
        }

        /// Writes `bytes` so that they end exactly at the inaccessible page; returns their address.
        fn place_at_end(&self, bytes: &[u8]) -> u64 {
            let at = self.page - bytes.len();
            // SAFETY: at + bytes.len() == page: the write stays in the accessible page.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.add(at), bytes.len())
            };
            self.base as u64 + at as u64
        }
    }

    impl Drop for Guarded {
        fn drop(&mut self) {
            // SAFETY: unmaps exactly the mapping made in new().
            unsafe { libc::munmap(self.base.cast(), 2 * self.page) };
        }
    }

    fn own_pid() -> u32 {
        std::process::id()
    }

    #[test]
    fn a_string_that_ends_before_an_unmapped_page_is_read_whole() {
        let guarded = Guarded::new();
        let addr = guarded.place_at_end(b"/usr/include/stdio.h\0");
        let mut reader = Reader::new();
        assert_eq!(
            reader.string(own_pid(), addr).expect("read own memory"),
            Text::Found(b"/usr/include/stdio.h"),
            "the page after the NUL is unmapped, and the read still succeeds"
        );
    }

    #[test]
    fn a_string_that_crosses_into_a_mapped_page_is_read_whole() {
        let guarded = Guarded::new();
        // SAFETY: makes the mapping's second page readable again.
        let rc = unsafe {
            libc::mprotect(
                guarded.base.add(guarded.page).cast(),
                guarded.page,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        assert_eq!(rc, 0, "unprotect the second page");
        let text = b"/a/path/that/straddles/the/page/boundary\0";
        let at = guarded.page - 10;
        // SAFETY: at + text.len() stays within the two mapped pages.
        unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), guarded.base.add(at), text.len()) };
        let mut reader = Reader::new();
        assert_eq!(
            reader
                .string(own_pid(), guarded.base as u64 + at as u64)
                .expect("read own memory"),
            Text::Found(&text[..text.len() - 1]),
            "the rest of the string is read from the next page"
        );
    }

    #[test]
    fn a_string_that_runs_into_an_unmapped_page_is_invalid() {
        let guarded = Guarded::new();
        let addr = guarded.place_at_end(b"/no/terminator");
        let mut reader = Reader::new();
        assert_eq!(
            reader.string(own_pid(), addr).expect("read own memory"),
            Text::Invalid,
            "the kernel would fail with EFAULT"
        );
    }

    #[test]
    fn a_null_or_unmapped_pointer_is_invalid_not_an_error() {
        let guarded = Guarded::new();
        let mut reader = Reader::new();
        assert_eq!(reader.string(own_pid(), 0).expect("null"), Text::Invalid);
        let unmapped = guarded.base as u64 + guarded.page as u64;
        assert_eq!(
            reader.string(own_pid(), unmapped).expect("unmapped"),
            Text::Invalid
        );
    }

    #[test]
    fn a_string_without_nul_in_path_max_is_invalid() {
        let long = vec![b'a'; PATH_MAX + 10];
        let mut reader = Reader::new();
        assert_eq!(
            reader
                .string(own_pid(), long.as_ptr() as u64)
                .expect("read own memory"),
            Text::Invalid,
            "the kernel would fail with ENAMETOOLONG"
        );
        let mut fits = vec![b'b'; PATH_MAX - 1];
        fits.push(0);
        assert_eq!(
            reader
                .string(own_pid(), fits.as_ptr() as u64)
                .expect("read own memory"),
            Text::Found(&fits[..PATH_MAX - 1]),
            "PATH_MAX - 1 bytes and the NUL fit"
        );
    }

    #[test]
    fn bytes_are_read_exactly_or_not_at_all() {
        let guarded = Guarded::new();
        let addr = guarded.place_at_end(&[7u8; 24]);
        let mut reader = Reader::new();
        assert_eq!(
            reader.bytes(own_pid(), addr, 24).expect("read"),
            Some(&[7u8; 24][..])
        );
        assert_eq!(
            reader.bytes(own_pid(), addr + 8, 24).expect("read"),
            None,
            "the last 8 bytes are unmapped"
        );
    }
}
