//! TLS settings.
