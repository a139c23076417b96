//! events (node daemon; being written).
