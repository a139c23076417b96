//! config (node daemon; being written).
