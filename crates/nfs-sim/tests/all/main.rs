//! nfs-sim's tests: the NFS semantics each host sees, and the cache's promises across hosts
//! (issue 13), each beside the negative control that shows the test catches the break.

mod attributes;
mod cross_host;
mod semantics;
mod support;
