//! Upstreams.
