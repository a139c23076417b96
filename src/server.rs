//! server (node daemon; being written).
