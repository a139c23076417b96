//! daemon (node daemon; being written).
