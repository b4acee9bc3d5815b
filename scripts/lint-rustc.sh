#!/bin/sh
# The lints ride on the builds (scripts/test.sh): cargo runs this in place of
# rustc for this crate's own targets (RUSTC_WORKSPACE_WRAPPER; dependencies
# are compiled by plain rustc), and clippy-driver both lints and compiles, so
# the builds the tests need are also the lint passes, with warnings denied.
# A separate `cargo clippy` would check every dependency again for metadata
# it alone uses (about 140 s of CPU on a cold 2-core machine). Cargo does
# not count the wrapper in a crate's fingerprint: in a warm target directory
# a crate built without it is fresh and not linted again (a cold run, as
# CI's, always lints; so does `cargo clippy`).
exec clippy-driver "$@" -D warnings
