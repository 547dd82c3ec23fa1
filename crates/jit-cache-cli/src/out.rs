//! Standard output for a command whose reader may go away: `jit-cache stats | head` ends
//! quietly, as other tools do, instead of panicking on the broken pipe.

use std::io::Write;

/// Writes one line to stdout. A reader that closed the pipe ends the process with status 0;
/// another write error ends it with status 3, saying so on stderr.
pub(crate) fn line(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{args}").and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        let _ = writeln!(std::io::stderr(), "jit-cache: write to stdout: {e}");
        std::process::exit(3);
    }
}

/// `println!` through [`line`].
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::out::line(format_args!($($arg)*))
    };
}
pub(crate) use say;
