//! The platform seam's other side: where this crate cannot trace, [`probe`](probe::probe) and
//! [`Tracer::new`](tracer::Tracer::new) say so and nothing else is reachable.

pub(crate) mod probe {
    use crate::support::{Support, Unsupported};

    /// Whether this system can trace: never, on this platform.
    ///
    /// # Errors
    /// [`Unsupported::Platform`].
    pub fn probe() -> Result<Support, Unsupported> {
        Err(Unsupported::Platform)
    }
}

pub(crate) mod handle {
    use crate::error::Error;
    use crate::trace::Trace;
    use std::convert::Infallible;
    use std::time::Duration;

    /// A running trace's supervisor; never constructed on this platform.
    #[derive(Debug)]
    pub struct TraceHandle {
        never: Infallible,
    }

    impl TraceHandle {
        /// Ends the trace and returns it.
        ///
        /// # Errors
        /// Never returns on this platform.
        pub fn finish(self, _grace: Duration) -> Result<Trace, Error> {
            match self.never {}
        }
    }
}

pub(crate) mod tracer {
    use super::handle::TraceHandle;
    use crate::error::Error;
    use crate::support::{Support, SyncWakeUp, Unsupported};
    use std::convert::Infallible;
    use std::process::{Child, Command};

    /// Starts programs traced; never constructed on this platform.
    #[derive(Clone, Debug)]
    pub struct Tracer {
        never: Infallible,
    }

    impl Tracer {
        /// # Errors
        /// [`Unsupported::Platform`].
        pub fn new() -> Result<Tracer, Unsupported> {
            Err(Unsupported::Platform)
        }

        /// Whether to ask for synchronous wake-ups.
        pub fn sync_wake_up(self, _sync: SyncWakeUp) -> Tracer {
            self
        }

        /// What the probe found.
        pub fn support(&self) -> Support {
            match self.never {}
        }

        /// Spawns `command` traced.
        ///
        /// # Errors
        /// Never returns on this platform.
        pub fn spawn(&self, _command: &mut Command) -> Result<(Child, TraceHandle), Error> {
            match self.never {}
        }
    }
}
