//! Prints the trace of a command: `cargo run -p file-trace --example dump -- PROGRAM ARGS...`.

use std::process::Command;
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let program = args.next().ok_or("usage: dump PROGRAM ARGS...")?;
    let tracer = file_trace::Tracer::new()?;
    let mut command = Command::new(program);
    command.args(args);
    let (mut child, handle) = tracer.spawn(&mut command)?;
    let status = child.wait()?;
    let trace = handle.finish(Duration::from_secs(2))?;
    for event in &trace.events {
        println!(
            "{} {:?} {} {:?}",
            event.pid,
            event.op,
            event.path.display(),
            event.found
        );
    }
    for gap in &trace.gaps {
        println!("gap {gap:?}");
    }
    eprintln!(
        "{status}; {} events, {} notifications, sync {}, killable {}, end {:?}",
        trace.events.len(),
        trace.notifications,
        trace.sync_wake_up,
        trace.killable_wait,
        trace.end
    );
    Ok(())
}
