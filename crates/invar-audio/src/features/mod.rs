//! The speech front-end.
