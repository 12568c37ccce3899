//! HTTP/1.1 codec (to be implemented).
