//! The conformance suite (feature `conformance`): the tests every fleet tier must pass, written
//! once over [`TestServer`](server::TestServer), which starts the tier's real server and hands
//! out tiers on it and the hooks the tests need (look at, tamper with, stop and kill what it
//! stores). Each tier's `tests/all` runs the whole suite with the macro `conformance_suite!` and
//! keeps only the tests of what is its own (SigV4, conditional-write probes, Redis's `OOM`).
//!
//! Each test is a generic function here and a `#[test]` in the tier's binary, so that nextest
//! runs each in its own process (a test sets its umask, signals its server).

pub mod faults;
pub mod hosts;
pub mod server;
pub mod sharing;
pub mod store;
pub mod tier;

/// Runs the whole conformance suite on a tier: one `#[test]` per test, in a module
/// `conformance` of the invoking crate, each starting its own server of the type given (an
/// absolute path such as `crate::support::Server`, which implements
/// [`TestServer`](server::TestServer)).
///
/// A test added to the suite is added to this list too.
#[macro_export]
macro_rules! conformance_suite {
    ($server:path) => {
        /// The fleet tiers' conformance suite (`jit_cache_remote::conformance`) on this tier.
        mod conformance {
            $crate::conformance_suite!(@module $server, sharing: [
                a_kernel_built_on_one_host_is_fetched_verified_and_published_on_another,
                a_kernel_fetched_into_a_team_root_gets_the_team_file_modes_as_a_built_one,
                a_batch_builds_other_kernels_first_while_another_host_holds_a_lease,
                a_remote_variant_serves_only_hosts_whose_headers_match_it,
                a_compile_failure_is_shared_and_served_to_other_hosts,
                heavy_hosts_asking_at_once_compile_each_kernel_once_in_the_fleet,
            ]);
            $crate::conformance_suite!(@module $server, store: [
                a_stored_entry_produced_on_one_host_is_fetched_verified_on_another,
                a_corrupt_stored_blob_is_refused_and_the_host_produces_and_repairs_it,
            ]);
            $crate::conformance_suite!(@module $server, faults: [
                a_refused_connection_costs_one_attempt_per_process,
                a_stopped_server_costs_one_timeout_then_nothing,
                a_server_killed_between_operations_is_a_miss_and_then_skipped,
                a_read_only_identity_reads_and_never_writes,
                an_evicted_or_deleted_blob_under_a_surviving_manifest_is_a_miss_not_an_error,
                every_corrupt_truncated_oversized_or_mismatched_object_is_refused,
                heavy_a_lease_whose_holder_died_expires_and_a_waiter_compiles,
                an_oversized_manifest_is_replaced_by_the_next_upload,
            ]);
            $crate::conformance_suite!(@module $server, tier: [
                blobs_are_create_only_and_manifests_replaced_only_from_the_version_read,
                every_read_is_bounded,
                leases_are_exclusive_renewed_and_released_only_by_their_holder,
                a_dead_holders_lease_is_taken_over_only_after_its_expiry_on_the_server_clock,
                a_read_only_identity_reads_and_every_write_it_tries_is_refused,
                an_audit_finds_corrupt_blobs_and_unreadable_manifests,
                a_stopped_server_costs_a_process_the_connect_timeout_not_the_io_timeout,
                a_listing_past_one_page_finds_every_object,
            ]);
        }
    };
    (@module $server:path, $module:ident: [$($test:ident),* $(,)?]) => {
        mod $module {
            $(
                #[test]
                fn $test() {
                    $crate::conformance::$module::$test::<$server>();
                }
            )*
        }
    };
}
